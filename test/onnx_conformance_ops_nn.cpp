// ONNX conformance mapping table, nn family: matrix products, softmax, convolution, pooling,
// normalization, losses, resize, windows (see onnx_conformance.hpp).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

using Pads = std::vector<std::pair<std::int64_t, std::int64_t>>;

Tensor scalar_as(double v, const Tensor& like) { return kiln::scalar(v, like.dtype()); }

Outputs gemm(const Case& c) {
  Tensor a = c.in(0);
  Tensor b = c.in(1);
  if (c.i("transA", 0) != 0) a = kiln::transpose(a);
  if (c.i("transB", 0) != 0) b = kiln::transpose(b);
  Tensor y = kiln::mul(kiln::matmul(a, b), scalar_as(c.f("alpha", 1.0), a));
  if (c.has(2)) y = kiln::add(y, kiln::mul(c.in(2), scalar_as(c.f("beta", 1.0), a)));
  return {y};
}

/// Softmax, LogSoftmax, Hardmax: along one axis from opset 13; before, over the axes
/// [axis, rank) of x coerced to 2-D (default axis 1).
OpFn softmax_like(Tensor (*fn)(const Tensor&, std::int64_t)) {
  return [fn](const Case& c) -> Outputs {
    const Tensor& x = c.in(0);
    if (c.opset >= 13) return {fn(x, c.i("axis", -1))};
    const auto axis = normalize_axis(c.i("axis", 1), x.ndim());
    std::int64_t outer = 1;
    for (std::int64_t k = 0; k < axis; ++k) outer *= x.dim(k);
    return {kiln::reshape(fn(kiln::reshape(x, {outer, -1}), 1), x.shape())};
  };
}

Tensor hardmax(const Tensor& x, std::int64_t axis) {
  axis = normalize_axis(axis, x.ndim());
  const Tensor hot = kiln::one_hot(kiln::argmax(x, axis), x.dim(axis), x.dtype());
  return move_last_axis_to(hot, axis);
}

Outputs lp_normalization(const Case& c) {
  const Tensor& x = c.in(0);
  const auto p = c.i("p", 2);
  const std::vector<std::int64_t> axis = {c.i("axis", -1)};
  Tensor norm;
  if (p == 1)
    norm = kiln::sum(kiln::abs(x), axis, true);
  else if (p == 2)
    norm = kiln::sqrt(kiln::sum(kiln::square(x), axis, true));
  else
    throw NotMapped("LpNormalization p not 1 or 2");
  // ONNX's reference gives 0 where the norm is 0 (not 0 / 0).
  const Tensor zero = scalar_as(0, x);
  const Tensor is_zero = kiln::equal(norm, zero);
  return {kiln::where(is_zero, zero, kiln::div(x, kiln::where(is_zero, scalar_as(1, x), norm)))};
}

/// The spatial padding of Conv / pools: explicit pads, or auto_pad SAME_UPPER / SAME_LOWER /
/// VALID, for input extents `in`, effective kernel extents `k` and strides `s`.
Pads spatial_pads(const Case& c, const std::vector<std::int64_t>& in,
                  const std::vector<std::int64_t>& k, const std::vector<std::int64_t>& s) {
  const auto n = in.size();
  Pads pads(n, {0, 0});
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    const auto p = c.ints("pads", std::vector<std::int64_t>(2 * n, 0));
    for (std::size_t d = 0; d < n; ++d) pads[d] = {p[d], p[d + n]};
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (std::size_t d = 0; d < n; ++d) {
      const auto out = (in[d] + s[d] - 1) / s[d];
      const auto total = std::max<std::int64_t>(0, (out - 1) * s[d] + k[d] - in[d]);
      const auto small = total / 2;
      pads[d] = auto_pad == "SAME_UPPER" ? std::pair{small, total - small}
                                         : std::pair{total - small, small};
    }
  } else if (auto_pad != "VALID") {
    throw NotMapped("auto_pad " + auto_pad);
  }
  return pads;
}

std::vector<std::int64_t> spatial_dims(const Tensor& x) {
  std::vector<std::int64_t> d;
  for (std::int64_t k = 2; k < x.ndim(); ++k) d.push_back(x.dim(k));
  return d;
}

std::vector<std::int64_t> ones_or(const Case& c, const char* name, std::size_t n) {
  return c.ints(name, std::vector<std::int64_t>(n, 1));
}

Tensor add_channel_bias(const Tensor& y, const Tensor& bias) {
  std::vector<std::int64_t> dims(static_cast<std::size_t>(y.ndim()), 1);
  dims[1] = bias.size();
  return kiln::add(y, kiln::reshape(bias, kiln::Shape(dims)));
}

/// Conv's (and ConvInteger's, QLinearConv's) convolution of x with w, from the attributes.
Tensor conv_of(const Case& c, const Tensor& x, const Tensor& w) {
  const auto in = spatial_dims(x);
  const auto n = in.size();
  const auto strides = ones_or(c, "strides", n);
  const auto dilations = ones_or(c, "dilations", n);
  std::vector<std::int64_t> k;
  for (std::size_t d = 0; d < n; ++d)
    k.push_back((w.dim(static_cast<std::int64_t>(d) + 2) - 1) * dilations[d] + 1);
  kiln::ConvOptions o;
  o.strides = strides;
  o.dilations = dilations;
  o.padding = kiln::ConvPadding::explicit_pads;
  o.pads = spatial_pads(c, in, k, strides);
  o.groups = c.i("group", 1);
  o.layout = kiln::DataLayout::channels_first;
  return kiln::conv(x, w, o);
}

Outputs conv(const Case& c) {
  Tensor y = conv_of(c, c.in(0), c.in(1));
  if (c.has(2)) y = add_channel_bias(y, c.in(2));
  return {y};
}

/// x - zero_point in i32. A 1-D zero point of several values runs along x's axis `axis`
/// (MatMulInteger's a: its rows, ndim - 2; a kernel: its output channels, 0; MatMulInteger's b:
/// its columns, the last axis, where it broadcasts as it is).
Tensor centered(const Tensor& x, const Case& c, std::size_t zero_point_input, std::int64_t axis) {
  const Tensor wide = kiln::cast(x, kiln::i32);
  if (!c.has(zero_point_input)) return wide;
  Tensor zp = kiln::cast(c.in(zero_point_input), kiln::i32);
  if (zp.ndim() == 1 && zp.size() > 1 && axis != x.ndim() - 1) {
    std::vector<std::int64_t> dims(static_cast<std::size_t>(x.ndim() - axis), 1);
    dims[0] = zp.size();
    zp = kiln::reshape(zp, kiln::Shape(dims));
  }
  return kiln::sub(wide, zp);
}

/// The integer convolution of ConvInteger / QLinearConv: exact in f64 (every sum of these
/// 8-bit products is far below 2^53), as i32.
Tensor integer_conv(const Case& c, const Tensor& x, const Tensor& w) {
  return kiln::cast(conv_of(c, kiln::cast(x, kiln::f64), kiln::cast(w, kiln::f64)), kiln::i32);
}

Outputs conv_integer(const Case& c) {
  return {integer_conv(c, centered(c.in(0), c, 2, c.in(0).ndim() - 1), centered(c.in(1), c, 3, 0))};
}

Outputs matmul_integer(const Case& c) {
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  return {kiln::matmul(centered(a, c, 2, a.ndim() - 2), centered(b, c, 3, b.ndim() - 1))};
}

/// QLinearMatMul / QLinearConv's requantization of an i32 accumulator, as ONNX's reference:
/// acc * (a_scale * b_scale / y_scale) in f64 (the scales' product in their own dtype), plus
/// the zero point, rounded half to even, clipped to the output dtype.
Tensor requantize(const Tensor& acc, const Tensor& a_scale, const Tensor& b_scale,
                  const Tensor& y_scale, const Tensor& y_zero_point, bool round_after_clip) {
  const Tensor factor = kiln::cast(kiln::div(kiln::mul(a_scale, b_scale), y_scale), kiln::f64);
  Tensor r =
      kiln::add(kiln::mul(kiln::cast(acc, kiln::f64), factor), kiln::cast(y_zero_point, kiln::f64));
  const kiln::DType out = y_zero_point.dtype();
  const double lo = out == kiln::i8 ? -128 : 0, hi = out == kiln::i8 ? 127 : 255;
  if (out != kiln::i8 && out != kiln::u8) throw NotMapped("requantizing to a non-8-bit dtype");
  r = round_after_clip ? kiln::round(kiln::clip(r, lo, hi)) : kiln::clip(kiln::round(r), lo, hi);
  return kiln::cast(r, out);
}

Outputs qlinear_matmul(const Case& c) {
  // Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
  const Tensor a = kiln::sub(kiln::cast(c.in(0), kiln::i32), kiln::cast(c.in(2), kiln::i32));
  const Tensor b = kiln::sub(kiln::cast(c.in(3), kiln::i32), kiln::cast(c.in(5), kiln::i32));
  return {requantize(kiln::matmul(a, b), c.in(1), c.in(4), c.in(6), c.in(7), false)};
}

Outputs qlinear_conv(const Case& c) {
  // Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
  const Tensor x = kiln::sub(kiln::cast(c.in(0), kiln::i32), kiln::cast(c.in(2), kiln::i32));
  Tensor wzp = kiln::cast(c.in(5), kiln::i32);
  const Tensor& w_in = c.in(3);
  if (wzp.ndim() == 1 && wzp.size() == w_in.dim(0) && wzp.size() > 1) {
    std::vector<std::int64_t> dims(static_cast<std::size_t>(w_in.ndim()), 1);
    dims[0] = wzp.size();
    wzp = kiln::reshape(wzp, kiln::Shape(dims));
  }
  const Tensor w = kiln::sub(kiln::cast(w_in, kiln::i32), wzp);
  Tensor acc = integer_conv(c, x, w);
  if (c.has(8)) acc = add_channel_bias(acc, kiln::cast(c.in(8), kiln::i32));
  Tensor w_scale = c.in(4);
  if (w_scale.size() > 1) w_scale = kiln::reshape(w_scale, kiln::Shape{1, w_scale.size(), 1, 1});
  return {requantize(acc, c.in(1), w_scale, c.in(6), c.in(7), true)};
}

Outputs conv_transpose(const Case& c) {
  const Tensor& x = c.in(0);
  const Tensor& w = c.in(1);
  const auto in = spatial_dims(x);
  const auto n = in.size();
  kiln::ConvTransposeOptions o;
  o.strides = ones_or(c, "strides", n);
  o.dilations = ones_or(c, "dilations", n);
  o.groups = c.i("group", 1);
  o.layout = kiln::DataLayout::channels_first;
  o.output_padding = c.ints("output_padding", std::vector<std::int64_t>(n, 0));
  o.padding = kiln::ConvPadding::explicit_pads;
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  const auto p = c.ints("pads", std::vector<std::int64_t>(2 * n, 0));
  o.pads.assign(n, {0, 0});
  std::vector<std::int64_t> out_shape = c.ints("output_shape");
  if (out_shape.size() > n) out_shape.erase(out_shape.begin(), out_shape.end() - n);
  for (std::size_t d = 0; d < n; ++d) {
    const auto k = (w.dim(static_cast<std::int64_t>(d) + 2) - 1) * o.dilations[d] + 1;
    const auto full = (in[d] - 1) * o.strides[d] + k + o.output_padding[d];
    std::int64_t target = -1;
    if (!out_shape.empty())
      target = out_shape[d];
    else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      target = in[d] * o.strides[d];
    if (target >= 0) {
      const auto total = full - target;
      if (total < 0) throw NotMapped("ConvTranspose output_shape beyond the full output");
      const auto small = total / 2;
      o.pads[d] = auto_pad == "SAME_LOWER" ? std::pair{total - small, small}
                                           : std::pair{small, total - small};
    } else if (auto_pad == "NOTSET") {
      o.pads[d] = {p[d], p[d + n]};
    }
  }
  Tensor y = kiln::conv_transpose(x, w, o);
  if (c.has(2)) y = add_channel_bias(y, c.in(2));
  return {y};
}

/// MaxPool / AveragePool: dilations other than 1 and the Indices output do not map; ceil_mode
/// becomes extra padding after each axis (ignored by both pools unless count_include_pad).
Outputs pool(const Case& c, bool is_max) {
  const Tensor& x = c.in(0);
  if (c.wants(1)) throw NotMapped("MaxPool Indices output");
  const auto in = spatial_dims(x);
  const auto n = in.size();
  const auto window = c.ints("kernel_shape");
  if (c.i("storage_order", 0) != 0) throw NotMapped("MaxPool storage_order");
  kiln::PoolOptions o;
  o.window = window;
  o.strides = ones_or(c, "strides", n);
  o.dilations = ones_or(c, "dilations", n);
  std::vector<std::int64_t> span;  // the windows' extents, dilation included
  for (std::size_t d = 0; d < n; ++d) span.push_back((window[d] - 1) * o.dilations[d] + 1);
  o.padding = kiln::ConvPadding::explicit_pads;
  o.pads = spatial_pads(c, in, span, o.strides);
  o.layout = kiln::DataLayout::channels_first;
  o.count_padding = c.i("count_include_pad", 0) != 0;
  if (c.i("ceil_mode", 0) != 0) {
    for (std::size_t d = 0; d < n; ++d) {
      auto& [before, after] = o.pads[d];
      const auto room = in[d] + before + after - span[d];
      auto out = (room + o.strides[d] - 1) / o.strides[d] + 1;
      if ((out - 1) * o.strides[d] >= in[d] + before) --out;  // window must start inside
      const auto extra = (out - 1) * o.strides[d] + span[d] - (in[d] + before + after);
      if (extra > 0) {
        if (o.count_padding) throw NotMapped("ceil_mode with count_include_pad");
        after += extra;
      }
    }
  }
  return {is_max ? kiln::max_pool(x, o) : kiln::avg_pool(x, o)};
}

/// LpPool: the sum of |x|^p over each window's taps inside x (padding adds nothing), to the 1/p;
/// the sum is the mean over the whole window times its size.
Outputs lp_pool(const Case& c) {
  const Tensor& x = c.in(0);
  const auto in = spatial_dims(x);
  const auto n = in.size();
  if (c.i("ceil_mode", 0) != 0) throw NotMapped("LpPool ceil_mode");
  kiln::PoolOptions o;
  o.window = c.ints("kernel_shape");
  o.strides = ones_or(c, "strides", n);
  o.dilations = ones_or(c, "dilations", n);
  std::vector<std::int64_t> span;
  for (std::size_t d = 0; d < n; ++d) span.push_back((o.window[d] - 1) * o.dilations[d] + 1);
  o.padding = kiln::ConvPadding::explicit_pads;
  o.pads = spatial_pads(c, in, span, o.strides);
  o.layout = kiln::DataLayout::channels_first;
  o.count_padding = true;
  const double p = static_cast<double>(c.i("p", 2));
  std::int64_t taps = 1;
  for (const auto k : o.window) taps *= k;
  const Tensor powered = kiln::pow(kiln::abs(x), scalar_as(p, x));
  const Tensor sums =
      kiln::mul(kiln::avg_pool(powered, o), scalar_as(static_cast<double>(taps), x));
  return {kiln::pow(sums, scalar_as(1.0 / p, x))};
}

/// ONNX LRN: x / (bias + alpha / size * (sum of x^2 over the `size` channels around each
/// channel))^beta, the window floor((size - 1) / 2) channels before, the rest after.
Outputs lrn(const Case& c) {
  c.only({"alpha", "beta", "bias", "size"});
  const Tensor& x = c.in(0);
  const std::int64_t size = c.i("size", 1);
  const std::int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<std::pair<std::int64_t, std::int64_t>> widths(static_cast<std::size_t>(x.ndim()),
                                                            {0, 0});
  widths[1] = {before, after};
  const Tensor squares = kiln::pad(kiln::square(x), widths, 0.0);
  Tensor sum = kiln::slice(squares, 1, 0, x.dim(1));
  for (std::int64_t k = 1; k < size; ++k)
    sum = kiln::add(sum, kiln::slice(squares, 1, k, k + x.dim(1)));
  const Tensor scale =
      kiln::add(kiln::mul(sum, scalar_as(c.f("alpha", 1e-4) / static_cast<double>(size), x)),
                scalar_as(c.f("bias", 1.0), x));
  return {kiln::div(x, kiln::pow(scale, scalar_as(c.f("beta", 0.75), x)))};
}

/// ONNX DFT of x along `axis` as matrix products: the signal axis moved last, the real and
/// imaginary parts multiplied by the cosine and sine matrices of the transform (forward, inverse,
/// one-sided forward, and the one-sided inverse whose conjugate-symmetric half counts twice).
Tensor transform(const Tensor& x, std::int64_t axis, bool inverse, bool onesided) {
  const std::int64_t rank = x.ndim();
  std::vector<std::int64_t> to_last;  // the signal axis last, over the rank - 1 data axes
  for (std::int64_t a = 0; a < rank - 1; ++a)
    if (a != axis) to_last.push_back(a);
  to_last.push_back(axis);
  std::vector<std::int64_t> back(to_last.size());
  for (std::size_t a = 0; a < to_last.size(); ++a)
    back[static_cast<std::size_t>(to_last[a])] = static_cast<std::int64_t>(a);
  const auto part = [&](std::int64_t k) {  // in f64, as ONNX's reference (numpy.fft) computes
    return kiln::cast(
        kiln::transpose(kiln::squeeze(kiln::slice(x, rank - 1, k, k + 1), {rank - 1}), to_last),
        kiln::f64);
  };
  const Tensor re = part(0);
  const Tensor im = x.dim(-1) == 2 ? part(1) : kiln::zeros_like(re);
  const std::int64_t n_in = re.dim(-1);
  const std::int64_t length = inverse && onesided ? 2 * (n_in - 1) : n_in;
  const std::int64_t n_out = !inverse && onesided ? length / 2 + 1 : length;
  std::vector<double> cosines, sines;
  for (std::int64_t j = 0; j < n_in; ++j)
    for (std::int64_t k = 0; k < n_out; ++k) {
      double weight = inverse ? 1.0 / static_cast<double>(length) : 1.0;
      if (inverse && onesided && j != 0 && 2 * j != length) weight *= 2;  // the mirrored half
      const double angle = 2 * std::numbers::pi * static_cast<double>((j * k) % length) /
                           static_cast<double>(length);
      cosines.push_back(weight * std::cos(angle));
      sines.push_back(weight * std::sin(angle));
    }
  const Tensor cm = kiln::tensor(cosines, {n_in, n_out});
  const Tensor sm = kiln::tensor(sines, {n_in, n_out});
  Tensor out_re, out_im;
  if (!inverse) {  // x e^{-i angle}
    out_re = kiln::add(kiln::matmul(re, cm), kiln::matmul(im, sm));
    out_im = kiln::sub(kiln::matmul(im, cm), kiln::matmul(re, sm));
  } else {  // X e^{+i angle} / N
    out_re = kiln::sub(kiln::matmul(re, cm), kiln::matmul(im, sm));
    out_im = kiln::add(kiln::matmul(re, sm), kiln::matmul(im, cm));
  }
  std::vector<Tensor> parts = {kiln::transpose(out_re, back)};
  if (!(inverse && onesided)) parts.push_back(kiln::transpose(out_im, back));
  return kiln::cast(kiln::stack(parts, rank - 1), x.dtype());
}

Outputs dft(const Case& c) {
  c.only({"axis", "inverse", "onesided"});
  if (c.has(1)) throw NotMapped("DFT dft_length");
  const Tensor& x = c.in(0);  // [..., signal..., 1 or 2]
  const std::int64_t axis = normalize_axis(
      c.opset >= 20 ? (c.has(2) ? int_values(c.in(2))[0] : -2) : c.i("axis", 1), x.ndim());
  return {transform(x, axis, c.i("inverse", 0) != 0, c.i("onesided", 0) != 0)};
}

/// ONNX STFT: frames of frame_length every frame_step along the signal [B, S, 1 or 2] (gathered),
/// each times the window, transformed (one-sided by default): [B, frames, bins, 2].
Outputs stft(const Case& c) {
  c.only({"onesided"});
  const Tensor& x = c.in(0);
  const std::int64_t step = int_values(c.in(1))[0];
  const std::int64_t length = c.has(3) ? int_values(c.in(3))[0] : c.in(2).dim(0);
  const std::int64_t frames = (x.dim(1) - length) / step + 1;
  std::vector<std::int64_t> at;
  for (std::int64_t f = 0; f < frames; ++f)
    for (std::int64_t j = 0; j < length; ++j) at.push_back(f * step + j);
  Tensor framed = kiln::reshape(kiln::gather(x, kiln::tensor(at, {frames * length}), 1),
                                {x.dim(0), frames, length, x.dim(2)});
  if (c.has(2)) framed = kiln::mul(framed, kiln::reshape(c.in(2), {1, 1, length, 1}));
  return {transform(framed, 2, false, c.i("onesided", 1) != 0)};
}

/// ONNX MaxUnpool: each value of x written at its index (flat over the unpooled shape: what a
/// pool of this kernel, stride and padding undoes) into zeros; a larger output_shape pads the
/// end of each axis with zeros.
Outputs max_unpool(const Case& c) {
  c.only({"kernel_shape", "strides", "pads"});
  const Tensor& x = c.in(0);
  const auto in = spatial_dims(x);
  const auto n = in.size();
  const auto k = c.ints("kernel_shape");
  const auto strides = ones_or(c, "strides", n);
  const auto pads = c.ints("pads", std::vector<std::int64_t>(2 * n, 0));
  std::vector<std::int64_t> unpooled = {x.dim(0), x.dim(1)};
  for (std::size_t d = 0; d < n; ++d)
    unpooled.push_back((in[d] - 1) * strides[d] - pads[d] - pads[d + n] + k[d]);
  const kiln::Shape shape(unpooled);
  Tensor y = kiln::reshape(kiln::scatter(kiln::zeros({shape.numel()}, x.dtype()),
                                         kiln::reshape(c.in(1), {-1}), kiln::reshape(x, {-1}), 0),
                           shape);
  if (c.has(2)) {
    const auto wanted = int_values(c.in(2));
    std::vector<std::pair<std::int64_t, std::int64_t>> widths;
    for (std::size_t d = 0; d < wanted.size(); ++d) widths.push_back({0, wanted[d] - unpooled[d]});
    y = kiln::pad(y, widths, 0.0);
  }
  return {y};
}

/// ONNX AffineGrid: the sampling grid [N, (D,) H, W, 2 or 3] of theta [N, 2, 3] or [N, 3, 4]
/// applied to the normalized coordinates (x fastest) of an output of `size`.
Outputs affine_grid(const Case& c) {
  c.only({"align_corners"});
  const Tensor& theta = c.in(0);
  const auto size = int_values(c.in(1));
  const bool align = c.i("align_corners", 0) != 0;
  const std::size_t spatial = size.size() - 2;
  const auto coordinate = [&](std::int64_t i, std::int64_t n) {
    if (align)
      return n == 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0;
  };
  // Rows (x, y[, z], 1) in row-major order of the spatial dims (D, H, W), W fastest.
  std::vector<double> base;
  std::int64_t points = 1;
  for (std::size_t a = 0; a < spatial; ++a) points *= size[2 + a];
  for (std::int64_t p = 0; p < points; ++p) {
    std::vector<double> row(spatial + 1, 1.0);
    std::int64_t rest = p;
    for (std::size_t a = spatial; a-- > 0;) {  // W, then H, then D
      const std::int64_t n = size[2 + a];
      row[spatial - 1 - a] = coordinate(rest % n, n);
      rest /= n;
    }
    base.insert(base.end(), row.begin(), row.end());
  }
  const auto columns = static_cast<std::int64_t>(spatial + 1);
  const Tensor grid = kiln::cast(kiln::tensor(base, {1, points, columns}), theta.dtype());
  const Tensor out = kiln::matmul(grid, kiln::transpose(theta, {0, 2, 1}));  // [N, P, spatial]
  std::vector<std::int64_t> dims = {size[0]};
  for (std::size_t a = 0; a < spatial; ++a) dims.push_back(size[2 + a]);
  dims.push_back(static_cast<std::int64_t>(spatial));
  return {kiln::reshape(out, kiln::Shape(dims))};
}

/// ONNX CausalConvWithState (opset 27): a depthwise causal conv1d over [B, C, L], left-padded
/// with past_state (or zeros), plus bias, optionally through SiLU; present_state is the last
/// k - 1 positions of the padded input.
Outputs causal_conv_with_state(const Case& c) {
  c.only({"activation"});
  const Tensor& x = c.in(0);
  const Tensor& w = c.in(1);  // [C, 1, k]
  const std::int64_t k = w.dim(2);
  const Tensor past = c.has(3) ? c.in(3) : kiln::zeros({x.dim(0), x.dim(1), k - 1}, x.dtype());
  const Tensor padded = kiln::concat({past, x}, 2);
  kiln::ConvOptions o;
  o.groups = x.dim(1);
  o.layout = kiln::DataLayout::channels_first;
  Tensor y = kiln::conv(padded, w, o);
  if (c.has(2)) y = add_channel_bias(y, c.in(2));
  const std::string activation = c.s("activation", "none");
  if (activation == "silu" || activation == "swish")
    y = kiln::cast(kiln::silu(kiln::cast(y, kiln::f32)), x.dtype());
  else if (activation != "none")
    throw NotMapped("CausalConvWithState activation " + activation);
  return {y, kiln::slice(padded, 2, padded.dim(2) - (k - 1), padded.dim(2))};
}

Outputs batch_norm(const Case& c) {
  if (c.i("training_mode", 0) != 0 || c.wants(1)) throw NotMapped("BatchNormalization training");
  return {kiln::nn::batch_norm(c.in(0), c.in(3), c.in(4), c.in(1), c.in(2), c.f("epsilon", 1e-5))};
}

Outputs layer_norm(const Case& c) {
  const Tensor& x = c.in(0);
  const auto axis = normalize_axis(c.i("axis", -1), x.ndim());
  const double eps = c.f("epsilon", 1e-5);
  const Tensor y = kiln::nn::layer_norm(x, c.in(1), c.has(2) ? c.in(2) : Tensor(), axis, eps);
  if (!c.wants(1) && !c.wants(2)) return {y};
  std::vector<std::int64_t> axes;
  for (auto k = axis; k < x.ndim(); ++k) axes.push_back(k);
  const auto [mean, var] = kiln::nn::moments(x, axes, true);
  return {y, mean, kiln::rsqrt(kiln::add(var, scalar_as(eps, var)))};
}

Outputs group_norm(const Case& c) {
  if (c.opset < 21) throw NotMapped("GroupNormalization-18 (per-group scale and bias)");
  return {
      kiln::nn::group_norm(c.in(0), c.i("num_groups", 1), c.in(1), c.in(2), c.f("epsilon", 1e-5))};
}

Outputs rms_norm(const Case& c) {
  return {kiln::nn::rms_norm(c.in(0), c.in(1), c.i("axis", -1), c.f("epsilon", 1e-5))};
}

Outputs mean_variance_normalization(const Case& c) {
  const Tensor& x = c.in(0);
  const auto [mean, var] = kiln::nn::moments(x, c.ints("axes", {0, 2, 3}), true);
  return {kiln::div(kiln::sub(x, mean), kiln::add(kiln::sqrt(var), scalar_as(1e-9, x)))};
}

/// Dropout in inference (no training_mode, or false): the identity and an all-true mask.
Outputs dropout(const Case& c) {
  if (c.has(2) && scalar_value(c.in(2)) != 0) throw NotMapped("Dropout training (random)");
  const Tensor& x = c.in(0);
  return {x, kiln::ones(x.shape(), kiln::boolean)};
}

/// NegativeLogLikelihoodLoss of log-probabilities [N, C, d..] and targets [N, d..].
Tensor nll(const Case& c, const Tensor& input, Tensor* log_prob_unused = nullptr) {
  (void)log_prob_unused;
  const Tensor& target = c.in(1);
  const std::string reduction = c.s("reduction", "mean");
  Tensor valid = kiln::ones(target.shape(), kiln::boolean);
  Tensor safe = target;
  if (c.has_attr("ignore_index")) {
    const Tensor ii = kiln::scalar(static_cast<double>(c.i("ignore_index", 0)), target.dtype());
    valid = kiln::not_equal(target, ii);
    safe = kiln::where(valid, target, kiln::scalar(0.0, target.dtype()));
  }
  const Tensor picked =
      kiln::squeeze(kiln::take_along_axis(input, kiln::expand_dims(safe, 1), 1), {1});
  Tensor weight = kiln::cast(valid, input.dtype());
  if (c.has(2)) weight = kiln::mul(weight, kiln::gather(c.in(2), safe));
  const Tensor loss = kiln::neg(kiln::mul(picked, weight));
  if (reduction == "none") return loss;
  if (reduction == "sum") return kiln::sum(loss);
  if (reduction == "mean") return kiln::div(kiln::sum(loss), kiln::sum(weight));
  throw NotMapped("reduction " + reduction);
}

Outputs softmax_cross_entropy(const Case& c) {
  const Tensor log_prob = kiln::log_softmax(c.in(0), 1);
  return {nll(c, log_prob), log_prob};
}

/// ONNX Resize (opset >= 11; Upsample with scales) when kiln's ResizeOptions hold the case.
Outputs resize(const Case& c) {
  const Tensor& x = c.in(0);
  const auto rank = x.ndim();
  const bool upsample = c.opset < 11;
  if (!upsample && c.i("antialias", 0) != 0) throw NotMapped("Resize antialias");
  if (c.has_attr("keep_aspect_ratio_policy") && c.s("keep_aspect_ratio_policy", "") != "stretch")
    throw NotMapped("Resize keep_aspect_ratio_policy");
  kiln::ResizeOptions o;
  const std::string mode = c.s("mode", "nearest");
  if (mode == "nearest")
    o.mode = kiln::ResizeMode::nearest;
  else if (mode == "linear" || mode == "bilinear")
    o.mode = kiln::ResizeMode::linear;
  else
    throw NotMapped("Resize mode " + mode);
  const std::string coords =
      c.s("coordinate_transformation_mode", upsample ? "asymmetric" : "half_pixel");
  if (coords == "half_pixel")
    o.coordinates = kiln::CoordinateMode::half_pixel;
  else if (coords == "pytorch_half_pixel")
    o.coordinates = kiln::CoordinateMode::pytorch_half_pixel;
  else if (coords == "align_corners")
    o.coordinates = kiln::CoordinateMode::align_corners;
  else if (coords == "asymmetric")
    o.coordinates = kiln::CoordinateMode::asymmetric;
  else
    throw NotMapped("Resize coordinate_transformation_mode " + coords);
  const std::string nearest = c.s("nearest_mode", upsample ? "floor" : "round_prefer_floor");
  if (nearest == "round_prefer_floor")
    o.nearest = kiln::NearestRounding::round_prefer_floor;
  else if (nearest == "round_prefer_ceil")
    o.nearest = kiln::NearestRounding::round_prefer_ceil;
  else if (nearest == "floor")
    o.nearest = kiln::NearestRounding::floor;
  else
    o.nearest = kiln::NearestRounding::ceil;
  std::vector<std::int64_t> axes = c.ints("axes");
  if (axes.empty())
    for (std::int64_t k = 0; k < rank; ++k) axes.push_back(k);
  std::vector<std::int64_t> out(static_cast<std::size_t>(rank));
  for (std::int64_t k = 0; k < rank; ++k) out[static_cast<std::size_t>(k)] = x.dim(k);
  const std::size_t scales_input = upsample ? 1 : 2;
  if (!upsample && c.has(3)) {
    const auto sizes = int_values(c.in(3));
    for (std::size_t k = 0; k < axes.size(); ++k)
      out[static_cast<std::size_t>(normalize_axis(axes[k], rank))] = sizes[k];
  } else if (c.has(scales_input) && c.in(scales_input).size() > 0) {
    const Tensor s = kiln::cast(c.in(scales_input), kiln::f64);
    const auto scales = s.to_vector<double>();
    for (std::size_t k = 0; k < axes.size(); ++k) {
      const auto a = static_cast<std::size_t>(normalize_axis(axes[k], rank));
      const auto size =
          static_cast<std::int64_t>(std::floor(static_cast<double>(out[a]) * scales[k]));
      // kiln maps coordinates with out / in; ONNX with the given scale.
      if (static_cast<double>(size) != static_cast<double>(out[a]) * scales[k])
        throw NotMapped("Resize scale that is not output size / input size");
      out[a] = size;
    }
  } else {
    throw NotMapped("Resize without scales or sizes");
  }
  return {kiln::resize(x, kiln::Shape(out), o)};
}

/// Hann, Hamming and Blackman windows of `size` (periodic or symmetric).
OpFn window(int kind) {
  return [kind](const Case& c) -> Outputs {
    const auto n = static_cast<std::int64_t>(scalar_value(c.in(0)));
    const auto dtype = dtype_from_onnx(c.i("output_datatype", 1));
    const bool periodic = c.i("periodic", 1) != 0;
    const double denom = static_cast<double>(periodic ? n : n - 1);
    const Tensor i = kiln::arange(0.0, static_cast<double>(n), 1.0, kiln::f64);
    const Tensor a = kiln::mul(i, 2 * std::numbers::pi / denom);
    Tensor w;
    if (kind == 0) {  // Hann
      w = kiln::sub(0.5, kiln::mul(kiln::cos(a), 0.5));
    } else if (kind == 1) {  // Hamming
      const double alpha = 25.0 / 46.0;
      w = kiln::sub(alpha, kiln::mul(kiln::cos(a), 1.0 - alpha));
    } else {  // Blackman
      w = kiln::add(kiln::sub(0.42, kiln::mul(kiln::cos(a), 0.5)),
                    kiln::mul(kiln::cos(kiln::mul(a, 2.0)), 0.08));
    }
    return {kiln::cast(w, dtype)};
  };
}

}  // namespace

void add_nn_ops(OpTable& t) {
  t["MatMul"] = [](const Case& c) -> Outputs { return {kiln::matmul(c.in(0), c.in(1))}; };
  t["Gemm"] = gemm;
  t["Einsum"] = [](const Case& c) -> Outputs {
    std::vector<Tensor> xs;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) xs.push_back(c.in(k));
    return {kiln::einsum(c.s("equation", ""), xs)};
  };
  t["Softmax"] = softmax_like(kiln::softmax);
  t["LogSoftmax"] = softmax_like(kiln::log_softmax);
  t["Hardmax"] = softmax_like(hardmax);
  t["LpNormalization"] = lp_normalization;
  t["Conv"] = conv;
  t["CausalConvWithState"] = causal_conv_with_state;
  t["MaxUnpool"] = max_unpool;
  t["AffineGrid"] = affine_grid;
  t["DFT"] = dft;
  t["STFT"] = stft;
  t["LRN"] = lrn;
  t["ConvInteger"] = conv_integer;
  t["MatMulInteger"] = matmul_integer;
  t["QLinearMatMul"] = qlinear_matmul;
  t["QLinearConv"] = qlinear_conv;
  t["ConvTranspose"] = conv_transpose;
  t["MaxPool"] = [](const Case& c) { return pool(c, true); };
  t["AveragePool"] = [](const Case& c) { return pool(c, false); };
  t["GlobalAveragePool"] = [](const Case& c) -> Outputs {
    return {kiln::global_avg_pool(c.in(0), kiln::DataLayout::channels_first, true)};
  };
  t["GlobalMaxPool"] = [](const Case& c) -> Outputs {
    return {kiln::global_max_pool(c.in(0), kiln::DataLayout::channels_first, true)};
  };
  t["LpPool"] = lp_pool;
  t["BatchNormalization"] = batch_norm;
  t["InstanceNormalization"] = [](const Case& c) -> Outputs {
    return {kiln::nn::instance_norm(c.in(0), c.in(1), c.in(2), c.f("epsilon", 1e-5))};
  };
  t["LayerNormalization"] = layer_norm;
  t["GroupNormalization"] = group_norm;
  t["RMSNormalization"] = rms_norm;
  t["MeanVarianceNormalization"] = mean_variance_normalization;
  t["Dropout"] = dropout;
  t["NegativeLogLikelihoodLoss"] = [](const Case& c) -> Outputs { return {nll(c, c.in(0))}; };
  t["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy;
  t["Resize"] = resize;
  t["Upsample"] = resize;
  t["HannWindow"] = window(0);
  t["HammingWindow"] = window(1);
  t["BlackmanWindow"] = window(2);
}

}  // namespace onnx_conformance

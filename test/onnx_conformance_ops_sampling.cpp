// ONNX conformance mapping table, sampling family: GridSample, as a sum over interpolation taps
// of gathered pixels times their weights, written with kiln's ops (see onnx_conformance.hpp).
#include <functional>

#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

Tensor f64(double v) { return kiln::scalar(v, kiln::f64); }

/// u reflected back into [lo, hi] by the near border, as often as it takes (u outside).
Tensor reflect(const Tensor& u, double lo, double hi) {
  const double range = hi - lo;
  const Tensor below = kiln::less(u, f64(lo));
  const Tensor dx = kiln::where(below, kiln::sub(f64(lo), u), kiln::sub(u, f64(hi)));
  const Tensor n = kiln::floor(kiln::div(dx, f64(range)));
  const Tensor r = kiln::sub(dx, kiln::mul(n, f64(range)));
  const Tensor even = kiln::equal(kiln::mod(n, f64(2)), f64(0));
  const Tensor up = kiln::add(f64(lo), r), down = kiln::sub(f64(hi), r);
  return kiln::where(below, kiln::where(even, up, down), kiln::where(even, down, up));
}

/// One interpolation tap along one axis: its (integral) coordinate and weight, [N, Q] each.
struct Tap {
  Tensor at, weight;
};

/// Keys' cubic convolution weights (alpha -0.75) of the taps at -1, 0, 1, 2 from floor(u).
std::vector<Tensor> cubic_weights(const Tensor& t) {
  const double a = -0.75;
  const auto far = [&](const Tensor& s) {  // |s| in [1, 2]
    return kiln::sub(
        kiln::mul(kiln::add(kiln::mul(kiln::sub(kiln::mul(s, f64(a)), f64(5 * a)), s), f64(8 * a)),
                  s),
        f64(4 * a));
  };
  const auto near = [&](const Tensor& s) {  // |s| in [0, 1]
    return kiln::add(kiln::mul(kiln::mul(kiln::sub(kiln::mul(s, f64(a + 2)), f64(a + 3)), s), s),
                     f64(1));
  };
  const Tensor one = f64(1), two = f64(2);
  return {far(kiln::add(t, one)), near(t), near(kiln::sub(one, t)), far(kiln::sub(two, t))};
}

/// ONNX GridSample (opset 16 and 20+): x [N, C, spatial...] sampled at grid [N, out..., r]
/// (normalized coordinates, the last axis in reverse order of x's axes), nearest, linear or
/// cubic, with zeros, border or reflection padding. Computed in f64, as ONNX's reference does.
Outputs grid_sample(const Case& c) {
  c.only({"mode", "padding_mode", "align_corners"});
  const Tensor& x = c.in(0);
  const Tensor& grid = c.in(1);
  std::string mode = c.s("mode", c.opset >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "linear" && mode != "nearest" && mode != "cubic")
    throw NotMapped("GridSample mode " + mode);
  const std::string padding = c.s("padding_mode", "zeros");
  const bool align = c.i("align_corners", 0) != 0;
  const std::int64_t rank = x.ndim() - 2, n = x.dim(0), channels = x.dim(1);
  std::vector<std::int64_t> out_dims = {n, channels};
  std::int64_t points = 1;
  for (std::int64_t a = 1; a < grid.ndim() - 1; ++a) {
    out_dims.push_back(grid.dim(a));
    points *= grid.dim(a);
  }
  const Tensor g = kiln::reshape(kiln::cast(grid, kiln::f64), {n, points, rank});
  // Per axis of x: its taps, and how a tap coordinate becomes a pixel index and validity.
  std::vector<std::vector<Tap>> taps(static_cast<std::size_t>(rank));
  std::vector<std::int64_t> extents;
  for (std::int64_t i = 0; i < rank; ++i) {
    const std::int64_t dim = x.dim(2 + i);
    extents.push_back(dim);
    const Tensor normalized = kiln::squeeze(kiln::slice(g, 2, rank - 1 - i, rank - i), {2});
    Tensor u =
        align
            ? kiln::mul(kiln::add(normalized, f64(1)), f64(0.5 * static_cast<double>(dim - 1)))
            : kiln::mul(
                  kiln::sub(kiln::mul(kiln::add(normalized, f64(1)), f64(static_cast<double>(dim))),
                            f64(1)),
                  f64(0.5));
    if (mode == "nearest") u = kiln::round(u);  // half to even, as the reference's rint
    const double lo = align ? 0.0 : -0.5;
    const double hi = align ? static_cast<double>(dim - 1) : static_cast<double>(dim) - 0.5;
    const Tensor outside = kiln::logical_or(kiln::less(u, f64(lo)), kiln::greater(u, f64(hi)));
    if (padding == "border")
      u = kiln::where(outside, kiln::clip(u, 0, static_cast<double>(dim - 1)), u);
    else if (padding == "reflection")
      u = kiln::where(outside, reflect(u, lo, hi), u);
    else if (padding != "zeros")
      throw NotMapped("GridSample padding_mode " + padding);
    auto& axis_taps = taps[static_cast<std::size_t>(i)];
    if (mode == "nearest") {
      axis_taps.push_back({u, kiln::ones_like(u)});
    } else {
      const Tensor base = kiln::floor(u);
      const Tensor t = kiln::sub(u, base);
      if (mode == "linear") {
        axis_taps.push_back({base, kiln::sub(f64(1), t)});
        axis_taps.push_back({kiln::add(base, f64(1)), t});
      } else {
        const auto w = cubic_weights(t);
        for (int k = 0; k < 4; ++k)
          axis_taps.push_back({kiln::add(base, f64(k - 1)), w[static_cast<std::size_t>(k)]});
      }
    }
  }
  // A tap coordinate's pixel index along axis i (as f64) and whether it reads x (zeros padding).
  const auto pixel = [&](const Tensor& at, std::int64_t i, Tensor& valid) {
    const auto dim = static_cast<double>(extents[static_cast<std::size_t>(i)]);
    if (padding == "zeros") {
      valid = kiln::logical_and(kiln::greater_equal(at, f64(0)), kiln::less(at, f64(dim)));
      return kiln::clip(at, 0, dim - 1);
    }
    if (padding == "border") return kiln::clip(at, 0, dim - 1);
    const double lo = align ? 0.0 : -0.5, hi = align ? dim - 1 : dim - 0.5;
    const Tensor outside = kiln::logical_or(kiln::less(at, f64(lo)), kiln::greater(at, f64(hi)));
    const Tensor r = kiln::where(outside, reflect(at, lo, hi), at);
    return kiln::sub(r, kiln::fmod(r, f64(1)));  // truncated toward zero, as int()
  };
  const Tensor values = kiln::reshape(kiln::cast(x, kiln::f64), {n, channels, -1});
  Tensor sum = kiln::zeros({n, channels, points}, kiln::f64);
  std::vector<std::size_t> pick(static_cast<std::size_t>(rank), 0);
  while (true) {  // every combination of one tap per axis
    Tensor index = kiln::zeros({n, points}, kiln::f64), weight = kiln::ones({n, points}, kiln::f64);
    Tensor valid = kiln::ones({n, points}, kiln::boolean);
    for (std::int64_t i = 0; i < rank; ++i) {
      const Tap& tap = taps[static_cast<std::size_t>(i)][pick[static_cast<std::size_t>(i)]];
      Tensor ok;
      const Tensor p = pixel(tap.at, i, ok);
      if (ok.defined()) valid = kiln::logical_and(valid, ok);
      index = kiln::add(
          kiln::mul(index, f64(static_cast<double>(extents[static_cast<std::size_t>(i)]))), p);
      weight = kiln::mul(weight, tap.weight);
    }
    const Tensor at = kiln::broadcast_to(kiln::expand_dims(kiln::cast(index, kiln::i64), 1),
                                         {n, channels, points});
    const Tensor read = kiln::take_along_axis(values, at, 2);
    const Tensor term = kiln::mul(read, kiln::expand_dims(weight, 1));
    sum = kiln::add(sum, kiln::where(kiln::expand_dims(valid, 1), term, kiln::zeros_like(term)));
    std::int64_t i = rank - 1;
    for (; i >= 0; --i) {
      auto& k = pick[static_cast<std::size_t>(i)];
      if (++k < taps[static_cast<std::size_t>(i)].size()) break;
      k = 0;
    }
    if (i < 0) break;
  }
  return {kiln::cast(kiln::reshape(sum, kiln::Shape(out_dims)), x.dtype())};
}

/// ONNX Col2Im: the blocks of input [N, C * prod(block), L] summed back into an image
/// [N, C, image...]: each block entry added at its position (block origin * stride - pad +
/// offset * dilation) when that lies inside the image. One scatter_add.
Outputs col2im(const Case& c) {
  c.only({"dilations", "pads", "strides"});
  const Tensor& x = c.in(0);
  const auto image = int_values(c.in(1));
  const auto block = int_values(c.in(2));
  const std::size_t rank = image.size();
  const auto dilations = c.ints("dilations", std::vector<std::int64_t>(rank, 1));
  const auto strides = c.ints("strides", std::vector<std::int64_t>(rank, 1));
  const auto pads = c.ints("pads", std::vector<std::int64_t>(2 * rank, 0));
  std::vector<std::int64_t> blocks;  // block positions per axis
  std::int64_t block_size = 1, positions = 1, pixels = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    blocks.push_back(
        (image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1) / strides[d] + 1);
    block_size *= block[d];
    positions *= blocks[d];
    pixels *= image[d];
  }
  const std::int64_t n = x.dim(0), channels = x.dim(1) / block_size;
  if (x.dim(2) != positions) throw NotMapped("Col2Im block count");
  // Target pixel (flat) of every (offset k, position l), k-major as the input's rows; -1 outside.
  std::vector<std::int64_t> target;
  std::vector<bool> inside;
  for (std::int64_t k = 0; k < block_size; ++k)
    for (std::int64_t l = 0; l < positions; ++l) {
      std::int64_t flat = 0, krest = k, lrest = l;
      bool ok = true;
      std::vector<std::int64_t> kd(rank), ld(rank);
      for (std::size_t d = rank; d-- > 0;) {
        kd[d] = krest % block[d];
        krest /= block[d];
        ld[d] = lrest % blocks[d];
        lrest /= blocks[d];
      }
      for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t p = ld[d] * strides[d] - pads[d] + kd[d] * dilations[d];
        ok = ok && p >= 0 && p < image[d];
        flat = flat * image[d] + p;
      }
      target.push_back(ok ? flat : 0);
      inside.push_back(ok);
    }
  const std::int64_t entries = block_size * positions;
  const Tensor index =
      kiln::broadcast_to(kiln::tensor(target, {1, 1, entries}), {n, channels, entries});
  const Tensor keep = kiln::tensor(inside, {1, 1, entries});
  const Tensor values = kiln::reshape(x, {n, channels, entries});
  const Tensor kept = kiln::where(keep, values, kiln::zeros_like(values));
  std::vector<std::int64_t> out_dims = {n, channels};
  out_dims.insert(out_dims.end(), image.begin(), image.end());
  return {kiln::reshape(
      kiln::scatter_add(kiln::zeros({n, channels, pixels}, x.dtype()), index, kept, 2),
      kiln::Shape(out_dims))};
}

}  // namespace

void add_sampling_ops(OpTable& t) {
  t["GridSample"] = grid_sample;
  t["Col2Im"] = col2im;
}

}  // namespace onnx_conformance

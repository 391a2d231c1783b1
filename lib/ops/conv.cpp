// Front ends of convolution and pooling. They resolve the options (strides, dilations, padding)
// into the geometry the primitives carry (kernels/conv.hpp documents the attrs), check the
// shapes, and apply conv, conv_input_grad (the transposed convolution) or a pooling primitive.
// Pooling attrs: the geometry (dilations 1), then window[s], then count_padding (0 or 1).

#include "kiln/conv.hpp"

#include <string>

#include "core/fail.hpp"
#include "kernels/conv.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::ConvGeometry;
using detail::fail;
using detail::Prim;

/// One value per spatial axis: `given` (or `fallback` for each when empty), each >= `least`.
std::vector<std::int64_t> per_axis(const std::vector<std::int64_t>& given, std::size_t spatial,
                                   std::int64_t fallback, std::int64_t least, const char* what,
                                   std::string_view op) {
  if (given.empty()) return std::vector<std::int64_t>(spatial, fallback);
  if (given.size() != spatial)
    fail(op, "{} {} values for {} spatial axes", given.size(), what, spatial);
  for (auto v : given)
    if (v < least) fail(op, "{} must be {} or more, got {}", what, least, v);
  return given;
}

std::size_t spatial_axes(const Tensor& x, std::string_view op) {
  if (x.ndim() < 3 || x.ndim() > 5)
    fail(op, "x of shape {} needs rank 3, 4 or 5 (a batch, 1 to 3 spatial axes, channels)",
         x.shape());
  return static_cast<std::size_t>(x.ndim() - 2);
}

void check_floating(const Tensor& t, std::string_view op, int index) {
  detail::check_defined(t, op, index);
  detail::check_accepts(t.dtype(), detail::Accepts::floating, op);
}

/// Fills the geometry's padding for input extents `in` and kernel extents `k` (after dilation).
void resolve_padding(ConvGeometry& g, ConvPadding padding,
                     const std::vector<std::pair<std::int64_t, std::int64_t>>& pads,
                     const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& k,
                     std::string_view op) {
  g.pads_before.assign(g.spatial, 0);
  g.pads_after.assign(g.spatial, 0);
  if (padding != ConvPadding::explicit_pads && !pads.empty())
    fail(op, "pads are given but padding is not explicit_pads");
  for (std::size_t a = 0; a < g.spatial; ++a) {
    if (padding == ConvPadding::explicit_pads) {
      if (pads.size() != g.spatial) fail(op, "{} pads for {} spatial axes", pads.size(), g.spatial);
      if (pads[a].first < 0 || pads[a].second < 0)
        fail(op, "negative padding ({}, {}) on spatial axis {}", pads[a].first, pads[a].second, a);
      g.pads_before[a] = pads[a].first;
      g.pads_after[a] = pads[a].second;
    } else if (padding == ConvPadding::same) {
      detail::require_static_dim(in[a], op, "a spatial axis with padding same");
      const std::int64_t span = g.dilations[a] * (k[a] - 1) + 1;
      const std::int64_t out = (in[a] + g.strides[a] - 1) / g.strides[a];
      const std::int64_t total = std::max<std::int64_t>((out - 1) * g.strides[a] + span - in[a], 0);
      g.pads_before[a] = total / 2;
      g.pads_after[a] = total - total / 2;
    }
  }
}

/// The checks conv and conv_transpose share, and the geometry's layout, groups, strides and
/// dilations (Options: ConvOptions or ConvTransposeOptions).
template <class Options>
ConvGeometry start_geometry(const Tensor& x, const Tensor& kernel, const Options& options,
                            std::string_view op) {
  check_floating(x, op, 0);
  check_floating(kernel, op, 1);
  detail::check_same_dtype(x, kernel, op);
  ConvGeometry g;
  g.spatial = spatial_axes(x, op);
  g.channels_last = options.layout == DataLayout::channels_last;
  g.groups = options.groups;
  if (kernel.ndim() != x.ndim())
    fail(op, "kernel of shape {} needs the rank of x of shape {}", kernel.shape(), x.shape());
  detail::require_static_shape(kernel.shape(), op, "the kernel's shape");
  g.strides = per_axis(options.strides, g.spatial, 1, 1, "strides", op);
  g.dilations = per_axis(options.dilations, g.spatial, 1, 1, "dilations", op);
  return g;
}

Tensor apply_conv(Prim p, const Tensor& a, const Tensor& b, const ConvGeometry& g, DType dtype,
                  const Shape& out) {
  detail::Attrs attrs;
  g.store(attrs);
  return detail::apply(p, {a, b}, attrs, dtype, out);
}

}  // namespace

Tensor conv(const Tensor& x, const Tensor& kernel, const ConvOptions& options) {
  constexpr std::string_view op = "conv";
  ConvGeometry g = start_geometry(x, kernel, options, op);
  const std::int64_t c = g.channels(x.shape()), o = g.kernel_outputs(kernel.shape());
  detail::require_static_dim(c, op, "the channel axis");
  if (g.groups < 1 || c % g.groups != 0 || o % g.groups != 0)
    fail(op, "groups {} must divide the {} input channels and the {} output channels", g.groups, c,
         o);
  if (g.kernel_inputs(kernel.shape()) != c / g.groups)
    fail(op, "kernel of shape {} needs {} input channels (x of shape {} has {} in {} groups)",
         kernel.shape(), c / g.groups, x.shape(), c, g.groups);
  std::vector<std::int64_t> in, k, out;
  for (std::size_t a = 0; a < g.spatial; ++a) {
    in.push_back(g.extent(x.shape(), a));
    k.push_back(g.kernel_extent(kernel.shape(), a));
    detail::require_static_dim(in.back(), op, "a spatial axis");
  }
  resolve_padding(g, options.padding, options.pads, in, k, op);
  for (std::size_t a = 0; a < g.spatial; ++a) {
    out.push_back(g.output_extent(in[a], k[a], a));
    if (out.back() == 0 && in[a] > 0)
      fail(op, "the kernel of shape {} spans more than x of shape {} along spatial axis {}",
           kernel.shape(), x.shape(), a);
  }
  return apply_conv(Prim::conv, x, kernel, g, x.dtype(), g.activation_shape(x.shape()[0], o, out));
}

namespace {

Tensor conv_of_rank(const Tensor& x, const Tensor& kernel, const ConvOptions& options,
                    std::int64_t rank, std::string_view op) {
  detail::check_defined(x, op, 0);
  if (x.ndim() != rank) fail(op, "x of shape {} needs rank {}", x.shape(), rank);
  return conv(x, kernel, options);
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& kernel, const ConvOptions& options) {
  return conv_of_rank(x, kernel, options, 3, "conv1d");
}
Tensor conv2d(const Tensor& x, const Tensor& kernel, const ConvOptions& options) {
  return conv_of_rank(x, kernel, options, 4, "conv2d");
}
Tensor conv3d(const Tensor& x, const Tensor& kernel, const ConvOptions& options) {
  return conv_of_rank(x, kernel, options, 5, "conv3d");
}

Tensor conv_transpose(const Tensor& x, const Tensor& kernel, const ConvTransposeOptions& options) {
  constexpr std::string_view op = "conv_transpose";
  ConvGeometry g = start_geometry(x, kernel, options, op);
  const std::vector<std::int64_t> extra =
      per_axis(options.output_padding, g.spatial, 0, 0, "output_padding", op);
  // The kernel in conv's layout: its "outputs" are x's channels.
  const std::int64_t c = g.channels(x.shape());
  detail::require_static_dim(c, op, "the channel axis");
  if (g.kernel_outputs(kernel.shape()) != c)
    fail(op, "kernel of shape {} needs {} as its input-channel dim (x of shape {})", kernel.shape(),
         c, x.shape());
  if (g.groups < 1 || c % g.groups != 0)
    fail(op, "groups {} must divide the {} input channels", g.groups, c);
  const std::int64_t o = g.kernel_inputs(kernel.shape()) * g.groups;
  std::vector<std::int64_t> in, k, out;
  for (std::size_t a = 0; a < g.spatial; ++a) {
    in.push_back(g.extent(x.shape(), a));
    k.push_back(g.kernel_extent(kernel.shape(), a));
    detail::require_static_dim(in.back(), op, "a spatial axis");
    if (extra[a] >= std::max(g.strides[a], g.dilations[a]))
      fail(op, "output_padding {} must be below the stride or the dilation on spatial axis {}",
           extra[a], a);
  }
  g.pads_before.assign(g.spatial, 0);
  g.pads_after.assign(g.spatial, 0);
  if (options.padding == ConvPadding::same) {
    for (std::size_t a = 0; a < g.spatial; ++a) {
      const std::int64_t total =
          std::max<std::int64_t>(g.dilations[a] * (k[a] - 1) + 1 - g.strides[a], 0);
      g.pads_before[a] = total / 2;
      g.pads_after[a] = total - total / 2;
    }
  } else {
    resolve_padding(g, options.padding, options.pads, in, k, op);
  }
  for (std::size_t a = 0; a < g.spatial; ++a) {
    const std::int64_t span = g.dilations[a] * (k[a] - 1) + 1;
    out.push_back((in[a] - 1) * g.strides[a] + span - g.pads_before[a] - g.pads_after[a] +
                  extra[a]);
    if (out.back() < 0 || (in[a] > 0 && g.output_extent(out.back(), k[a], a) != in[a]))
      fail(op, "padding ({}, {}) leaves no output on spatial axis {}", g.pads_before[a],
           g.pads_after[a], a);
    if (in[a] == 0) out.back() = 0;
  }
  return apply_conv(Prim::conv_input_grad, x, kernel, g, x.dtype(),
                    g.activation_shape(x.shape()[0], o, out));
}

// ------------------------------------------------------------------------ pooling

namespace {

Tensor pool(Prim p, const Tensor& x, const PoolOptions& options, std::string_view op) {
  if (p == Prim::max_pool) {
    detail::check_defined(x, op, 0);
    detail::check_accepts(x.dtype(), detail::Accepts::numeric, op);  // a maximum needs no float
  } else {
    check_floating(x, op, 0);
  }
  ConvGeometry g;
  g.spatial = spatial_axes(x, op);
  g.channels_last = options.layout == DataLayout::channels_last;
  const std::vector<std::int64_t> window = per_axis(options.window, g.spatial, 0, 1, "window", op);
  if (options.window.empty()) fail(op, "the window is not given");
  g.strides = per_axis(options.strides, g.spatial, 0, 1, "strides", op);
  if (options.strides.empty()) g.strides = window;
  g.dilations = per_axis(options.dilations, g.spatial, 1, 1, "dilations", op);
  std::vector<std::int64_t> in, out;
  for (std::size_t a = 0; a < g.spatial; ++a) {
    in.push_back(g.extent(x.shape(), a));
    detail::require_static_dim(in.back(), op, "a spatial axis");
  }
  resolve_padding(g, options.padding, options.pads, in, window, op);
  for (std::size_t a = 0; a < g.spatial; ++a) {
    if (g.pads_before[a] >= window[a] || g.pads_after[a] >= window[a])
      fail(op, "padding ({}, {}) must be smaller than the window {} on spatial axis {}",
           g.pads_before[a], g.pads_after[a], window[a], a);
    out.push_back(g.output_extent(in[a], window[a], a));
    if (out.back() == 0 && in[a] > 0)
      fail(op, "the window {} spans more than x of shape {} along spatial axis {}", window[a],
           x.shape(), a);
  }
  detail::Attrs attrs;
  g.store(attrs);
  attrs.ints.insert(attrs.ints.end(), window.begin(), window.end());
  attrs.ints.push_back(options.count_padding ? 1 : 0);
  return detail::apply(p, {x}, attrs, x.dtype(),
                       g.activation_shape(x.shape()[0], g.channels(x.shape()), out));
}

std::vector<std::int64_t> spatial_list(const Tensor& x, DataLayout layout, std::string_view op) {
  const std::size_t s = spatial_axes(x, op);
  std::vector<std::int64_t> axes;
  for (std::size_t a = 0; a < s; ++a)
    axes.push_back(static_cast<std::int64_t>(layout == DataLayout::channels_last ? 1 + a : 2 + a));
  return axes;
}

}  // namespace

Tensor max_pool(const Tensor& x, const PoolOptions& options) {
  return pool(Prim::max_pool, x, options, "max_pool");
}

Tensor avg_pool(const Tensor& x, const PoolOptions& options) {
  return pool(Prim::avg_pool, x, options, "avg_pool");
}

Tensor global_avg_pool(const Tensor& x, DataLayout layout, bool keepdims) {
  check_floating(x, "global_avg_pool", 0);
  return mean(x, spatial_list(x, layout, "global_avg_pool"), keepdims);
}

Tensor global_max_pool(const Tensor& x, DataLayout layout, bool keepdims) {
  check_floating(x, "global_max_pool", 0);
  return max(x, spatial_list(x, layout, "global_max_pool"), keepdims);
}

}  // namespace kiln

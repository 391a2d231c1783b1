// resize as a composite, one resized axis at a time: the source index (and for linear the
// weight) of every output position is computed on the host with ONNX Resize's formulas, then
// applied with gather (and a weighted sum of the two neighbours), so the gradient reaches x
// through gather.
#include <algorithm>
#include <cmath>

#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::fail;

constexpr std::string_view op_name = "resize";

/// The input coordinate of output position i along an axis of in -> out elements.
double source_coordinate(std::int64_t i, std::int64_t in, std::int64_t out, CoordinateMode mode) {
  const double x = static_cast<double>(i);
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  switch (mode) {
    case CoordinateMode::half_pixel:
      return (x + 0.5) / scale - 0.5;
    case CoordinateMode::pytorch_half_pixel:
      return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
    case CoordinateMode::align_corners:
      return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    case CoordinateMode::asymmetric:
      return x / scale;
  }
  return x / scale;
}

/// The nearest index of coordinate c (before clamping).
std::int64_t nearest_index(double c, NearestRounding rounding) {
  const double low = std::floor(c), fraction = c - low;
  switch (rounding) {
    case NearestRounding::round_prefer_floor:
      return static_cast<std::int64_t>(fraction <= 0.5 ? low : low + 1);
    case NearestRounding::round_prefer_ceil:
      return static_cast<std::int64_t>(fraction < 0.5 ? low : low + 1);
    case NearestRounding::floor:
      return static_cast<std::int64_t>(low);
    case NearestRounding::ceil:
      return static_cast<std::int64_t>(std::ceil(c));
  }
  return static_cast<std::int64_t>(low);
}

/// x resized along `axis` to `out` elements.
Tensor resize_axis(const Tensor& x, std::size_t axis, std::int64_t out,
                   const ResizeOptions& options) {
  const std::int64_t in = x.shape()[axis];
  const auto a = static_cast<std::int64_t>(axis);
  const auto clamped = [in](std::int64_t i) { return std::clamp<std::int64_t>(i, 0, in - 1); };
  std::vector<std::int64_t> first, second;
  std::vector<double> weight_first, weight_second;
  for (std::int64_t i = 0; i < out; ++i) {
    const double c = source_coordinate(i, in, out, options.coordinates);
    if (options.mode == ResizeMode::nearest) {
      first.push_back(clamped(nearest_index(c, options.nearest)));
      continue;
    }
    const double low = std::floor(c);
    const auto low_index = static_cast<std::int64_t>(low);
    first.push_back(clamped(low_index));
    second.push_back(clamped(low_index + 1));
    weight_second.push_back(c - low);
    weight_first.push_back(1.0 - (c - low));
  }
  if (options.mode == ResizeMode::nearest) return gather(x, tensor(first), a);

  // The weights, shaped [out, 1, ...] to broadcast against the axis' trailing dims.
  Shape weight_shape{out};
  for (std::size_t d = axis + 1; d < x.shape().size(); ++d) weight_shape.push_back(1);
  const Tensor w0 = cast(tensor(weight_first, weight_shape), x.dtype());
  const Tensor w1 = cast(tensor(weight_second, weight_shape), x.dtype());
  return gather(x, tensor(first), a) * w0 + gather(x, tensor(second), a) * w1;
}

}  // namespace

Tensor resize(const Tensor& x, const Shape& out_shape, const ResizeOptions& options) {
  detail::check_defined(x, op_name);
  if (out_shape.size() != x.shape().size())
    fail(op_name, "out_shape {} has rank {}, but x has shape {} of rank {}", out_shape,
         out_shape.size(), x.shape(), x.ndim());
  if (options.mode == ResizeMode::linear && !is_floating(x.dtype()))
    fail(op_name, "linear mode needs a floating-point dtype, got {} (nearest takes any)",
         x.dtype());
  for (std::size_t d = 0; d < out_shape.size(); ++d) {
    const std::int64_t in = x.shape()[d], out = out_shape[d];
    if (out == in) continue;
    if (out < 0 && !is_dynamic_dim(out))
      fail(op_name, "negative size {} for axis {} in out_shape {}", out, d, out_shape);
    detail::require_static_dim(in, op_name, "a resized axis of x");
    detail::require_static_dim(out, op_name, "a resized size in out_shape");
    if (in == 0)
      fail(op_name, "cannot resize the empty axis {} of {} to size {}", d, x.shape(), out);
  }
  Tensor result = x;
  for (std::size_t d = 0; d < out_shape.size(); ++d)
    if (out_shape[d] != x.shape()[d]) result = resize_axis(result, d, out_shape[d], options);
  return result;
}

}  // namespace kiln

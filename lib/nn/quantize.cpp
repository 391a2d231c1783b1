// The quantization grid (nn/quantization_grid.hpp) and quantize / dequantize
// (kiln/quantization.hpp): composites of kiln's primitives, so they run eagerly and traced.
#include <cmath>
#include <string>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "kiln/quantization.hpp"
#include "nn/quantization_grid.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace detail {

QuantizationGrid nudged_grid(const Tensor& min, const Tensor& max, double qmin, double qmax) {
  const Tensor lo = stop_gradient(min), hi = stop_gradient(max);
  const Tensor scale = (hi - lo) / (qmax - qmin);
  const Tensor zero_point_from_min = scalar(qmin, lo.dtype()) - lo / scale;
  // std::round of a value >= 0 (the only ones rounded): half away from zero.
  const Tensor whole = floor(zero_point_from_min);
  const Tensor rounded = where(zero_point_from_min - whole >= 0.5, whole + 1.0, whole);
  const Tensor zero_point =
      where(zero_point_from_min < qmin, scalar(qmin, lo.dtype()),
            where(zero_point_from_min > qmax, scalar(qmax, lo.dtype()), rounded));
  return {scale, zero_point, qmin, qmax};
}

QuantizationGrid shifted(const QuantizationGrid& grid, double offset) {
  return {grid.scale, grid.zero_point + offset, grid.qmin + offset, grid.qmax + offset};
}

Tensor grid_value_of(double level, const QuantizationGrid& grid) {
  return (scalar(level, grid.zero_point.dtype()) - grid.zero_point) * grid.scale;
}

Tensor grid_levels(const Tensor& x, const QuantizationGrid& grid) {
  const Tensor lowest = grid_value_of(grid.qmin, grid);
  const Tensor highest = grid_value_of(grid.qmax, grid);
  const Tensor clamped = maximum(minimum(x, highest), lowest);
  return floor((clamped - lowest) * (1.0 / grid.scale) + 0.5) + grid.qmin;
}

Tensor grid_values(const Tensor& levels, const QuantizationGrid& grid) {
  return (levels - grid.zero_point) * grid.scale;
}

void check_range_order(const Tensor& min, const Tensor& max, std::string_view op) {
  if (min.impl()->is_symbolic() || max.impl()->is_symbolic()) return;
  const TraceSuspension eager;  // known values: compared now, also inside a trace
  if (any(min > max).item<bool>())
    fail(op, "min must not exceed max (min {}, max {})", fmt::format("{}", min),
         fmt::format("{}", max));
}

}  // namespace detail

namespace {

void check_quantize_options(const QuantizeOptions& o, std::string_view op) {
  if (o.dtype != DType::i8 && o.dtype != DType::u8)
    detail::fail(op, "dtype must be i8 or u8, got {}", dtype_name(o.dtype));
  if (o.num_bits < 2 || o.num_bits > 8)
    detail::fail(op, "num_bits must be in [2, 8] for an 8-bit dtype, got {}", o.num_bits);
}

/// The levels of an i8 grid are those of u8 moved down by this much.
double signed_offset(const QuantizeOptions& o) {
  return o.dtype == DType::i8 ? -std::ldexp(1.0, o.num_bits - 1) : 0.0;
}

/// params' grid as floats of its scale's dtype.
detail::QuantizationGrid grid_of(const QuantizationParams& p) {
  return {p.scale, cast(p.zero_point, p.scale.dtype()), static_cast<double>(p.quant_min),
          static_cast<double>(p.quant_max)};
}

/// params must be whole and fit a tensor of `shape` (scalars or one per channel of the last dim).
void check_params(const QuantizationParams& p, const Shape& shape, std::string_view op) {
  if (!p.scale.defined() || !p.zero_point.defined())
    detail::fail(op, "the params' scale or zero_point is an undefined tensor");
  if (!is_floating(p.scale.dtype()))
    detail::fail(op, "scale must be f32 or f64, got {}", dtype_name(p.scale.dtype()));
  if (p.dtype() != DType::i8 && p.dtype() != DType::u8)
    detail::fail(op, "zero_point must be i8 or u8, got {}", dtype_name(p.dtype()));
  if (p.zero_point.shape() != p.scale.shape())
    detail::fail(op, "scale {} and zero_point {} must have one shape", p.scale.shape(),
                 p.zero_point.shape());
  const bool per_channel = p.scale.ndim() == 1 && !shape.empty() && p.scale.dim(0) == shape.back();
  if (p.scale.ndim() != 0 && !per_channel)
    detail::fail(op, "scale {} must be a scalar or one per channel of the last dim of {}",
                 p.scale.shape(), shape);
  const std::int64_t lowest = p.dtype() == DType::i8 ? -128 : 0;
  const std::int64_t highest = p.dtype() == DType::i8 ? 127 : 255;
  if (p.quant_min < lowest || p.quant_max > highest || p.quant_min >= p.quant_max)
    detail::fail(op, "levels [{}, {}] do not fit {} (need {} <= quant_min < quant_max <= {})",
                 p.quant_min, p.quant_max, dtype_name(p.dtype()), lowest, highest);
}

}  // namespace

QuantizationParams quantization_params(const Tensor& min, const Tensor& max,
                                       QuantizeOptions options) {
  constexpr std::string_view op = "quantization_params";
  check_quantize_options(options, op);
  detail::check_defined(min, op, 0);
  detail::check_defined(max, op, 1);
  if (!is_floating(min.dtype()) || max.dtype() != min.dtype())
    detail::fail(op, "min and max must both be f32 or both f64, got {} and {}",
                 dtype_name(min.dtype()), dtype_name(max.dtype()));
  if (min.shape() != max.shape() || min.ndim() > 1)
    detail::fail(op, "min and max must be scalars or one per channel ([d]), got {} and {}",
                 min.shape(), max.shape());
  detail::check_range_order(min, max, op);
  const detail::QuantizationGrid grid =
      detail::shifted(detail::nudged_grid(min, max, options.narrow_range ? 1.0 : 0.0,
                                          std::ldexp(1.0, options.num_bits) - 1.0),
                      signed_offset(options));
  return {grid.scale, cast(grid.zero_point, options.dtype), std::llround(grid.qmin),
          std::llround(grid.qmax)};
}

QuantizationParams quantization_params(double min, double max, QuantizeOptions options) {
  constexpr std::string_view op = "quantization_params";
  if (!std::isfinite(min) || !std::isfinite(max) || !(min < max))
    detail::fail(op, "min must be smaller than max, both finite (got min {}, max {})", min, max);
  return quantization_params(scalar(min, f32), scalar(max, f32), options);
}

Tensor quantize(const Tensor& x, const QuantizationParams& params) {
  constexpr std::string_view op = "quantize";
  detail::check_defined(x, op);
  check_params(params, x.shape(), op);
  if (x.dtype() != params.scale.dtype())
    detail::fail(op, "x must have the scale's dtype {}, got {} (use kiln::cast)",
                 dtype_name(params.scale.dtype()), dtype_name(x.dtype()));
  const Tensor levels = detail::grid_levels(stop_gradient(x), grid_of(params));
  return cast(levels, params.dtype());
}

Tensor dequantize(const Tensor& q, const QuantizationParams& params) {
  constexpr std::string_view op = "dequantize";
  detail::check_defined(q, op);
  check_params(params, q.shape(), op);
  if (q.dtype() != params.dtype())
    detail::fail(op, "q must have the zero point's dtype {}, got {}", dtype_name(params.dtype()),
                 dtype_name(q.dtype()));
  return detail::grid_values(cast(q, params.scale.dtype()), grid_of(params));
}

}  // namespace kiln

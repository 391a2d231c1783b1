// Fake quantization (kiln/quantization.hpp) and the nn::FakeQuant layer. The ops are
// composites of kiln's primitives: the forward value is TensorFlow's rounding on the nudged
// grid, and stop_gradient terms that add exact zeros give the straight-through gradients.
#include "kiln/nn/fake_quant.hpp"

#include <cmath>
#include <limits>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "kiln/quantization.hpp"
#include "nn/quantization_grid.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

void check_options(const FakeQuantOptions& o, std::string_view op) {
  if (o.num_bits < 2 || o.num_bits > 16)
    detail::fail(op, "num_bits must be in [2, 16], got {}", o.num_bits);
}

void check_input(const Tensor& x, std::string_view op) {
  detail::check_defined(x, op, 0);
  if (!is_floating(x.dtype()))
    detail::fail(op, "needs f32 or f64 inputs, got {} {}", dtype_name(x.dtype()), x.shape());
}

/// Fake quantization of x on the range [min, max] (tensors of x's dtype that broadcast against
/// it: scalars or one per channel of the last dim), by the rules in quantization.hpp.
Tensor fake_quant(const Tensor& x, const Tensor& min, const Tensor& max,
                  const FakeQuantOptions& o) {
  const detail::QuantizationGrid grid =
      detail::nudged_grid(min, max, o.narrow_range ? 1.0 : 0.0, std::ldexp(1.0, o.num_bits) - 1.0);
  const Tensor quantized = detail::grid_values(detail::grid_levels(x, grid), grid);
  // Exact zeros whose gradients are TensorFlow's: x's where it is inside the nudged range,
  // min's below it, max's above it.
  const Tensor nudged_min = detail::grid_value_of(grid.qmin, grid);
  const Tensor nudged_max = detail::grid_value_of(grid.qmax, grid);
  const Tensor lo = stop_gradient(min), hi = stop_gradient(max);
  const Tensor zero = zeros({}, x.dtype());
  const Tensor inside = logical_and(x >= nudged_min, x <= nudged_max);
  Tensor y = stop_gradient(quantized) + where(inside, x - stop_gradient(x), zero) +
             where(x < nudged_min, min - lo, zero) + where(x > nudged_max, max - hi, zero);
  return y;
}

/// min and max must be `shape`, of x's dtype; min > max is an error when known now.
void check_range(const Tensor& x, const Tensor& min, const Tensor& max, const Shape& shape,
                 std::string_view op) {
  detail::check_defined(min, op, 1);
  detail::check_defined(max, op, 2);
  for (const Tensor* t : {&min, &max}) {
    if (t->dtype() != x.dtype())
      detail::fail(op, "min and max must have x's dtype {}, got {} (use kiln::cast)",
                   dtype_name(x.dtype()), dtype_name(t->dtype()));
    if (t->shape() != shape)
      detail::fail(op, "min and max must have shape {}, got {}", shape, t->shape());
  }
  detail::check_range_order(min, max, op);
}

/// NaN where min > max (only reachable inside a trace, where the check above cannot run).
Tensor nan_where_inverted(const Tensor& y, const Tensor& min, const Tensor& max) {
  if (!min.impl()->is_symbolic() && !max.impl()->is_symbolic()) return y;
  return where(min > max, scalar(std::numeric_limits<double>::quiet_NaN(), y.dtype()), y);
}

}  // namespace

Tensor fake_quant_with_min_max_args(const Tensor& x, double min, double max,
                                    FakeQuantOptions options) {
  constexpr std::string_view op = "fake_quant_with_min_max_args";
  check_input(x, op);
  check_options(options, op);
  if (!std::isfinite(min) || !std::isfinite(max) || !(min < max))
    detail::fail(op, "min must be smaller than max, both finite (got min {}, max {})", min, max);
  const Tensor lo = scalar(min, x.dtype()), hi = scalar(max, x.dtype());
  return fake_quant(x, lo, hi, options);
}

Tensor fake_quant_with_min_max_vars(const Tensor& x, const Tensor& min, const Tensor& max,
                                    FakeQuantOptions options) {
  constexpr std::string_view op = "fake_quant_with_min_max_vars";
  check_input(x, op);
  check_options(options, op);
  check_range(x, min, max, Shape{}, op);
  return nan_where_inverted(fake_quant(x, min, max, options), min, max);
}

Tensor fake_quant_with_min_max_vars_per_channel(const Tensor& x, const Tensor& min,
                                                const Tensor& max, FakeQuantOptions options) {
  constexpr std::string_view op = "fake_quant_with_min_max_vars_per_channel";
  check_input(x, op);
  check_options(options, op);
  if (x.ndim() < 1) detail::fail(op, "x needs at least one dim (its last holds the channels)");
  check_range(x, min, max, Shape{x.shape().back()}, op);
  return nan_where_inverted(fake_quant(x, min, max, options), min, max);
}

}  // namespace kiln

namespace kiln::nn {

namespace {
constexpr std::string_view fake_quant_op = "nn.FakeQuant";
}  // namespace

FakeQuant::FakeQuant(FakeQuantLayerOptions options)
    : Layer("fake_quant", options.name), options_(std::move(options)) {
  const auto& o = options_;
  check_options({o.num_bits, o.narrow_range}, fake_quant_op);
  if (!(o.ema_decay >= 0.0 && o.ema_decay < 1.0))
    detail::fail(fake_quant_op, "{}: ema_decay must be in [0, 1), got {}", path(), o.ema_decay);
  if (!std::isfinite(o.init_min) || !std::isfinite(o.init_max) || !(o.init_min < o.init_max))
    detail::fail(fake_quant_op, "{}: init_min must be smaller than init_max, got {} and {}", path(),
                 o.init_min, o.init_max);
}

Tensor FakeQuant::operator()(const Tensor& x) { return (*this)(x, learning_phase()); }

Tensor FakeQuant::operator()(const Tensor& x, bool training) {
  const auto& o = options_;
  if (!x.defined()) detail::fail(fake_quant_op, "{}: the input is an undefined tensor", path());
  if (!is_floating(x.dtype()))
    detail::fail(fake_quant_op, "{}: needs f32 or f64 inputs, got {} {}", path(),
                 dtype_name(x.dtype()), x.shape());
  if (o.per_channel && x.ndim() < 1)
    detail::fail(fake_quant_op, "{}: per_channel needs an input with a channel dim", path());
  const Shape range_shape = o.per_channel ? Shape{x.shape().back()} : Shape{};
  const Variable lo = weight("min", range_shape, init::constant(o.init_min), false, x.dtype());
  const Variable hi = weight("max", range_shape, init::constant(o.init_max), false, x.dtype());
  Tensor min = lo.value(), max = hi.value();
  if (training) {
    // Moving averages of the batch's range, widened to hold 0 (TensorFlow's
    // MovingAvgQuantize): min += (batch_min - min)(1 - decay), the same for max.
    std::vector<std::int64_t> axes(static_cast<std::size_t>(x.ndim() - (o.per_channel ? 1 : 0)));
    for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
    const Tensor data = stop_gradient(x);
    const Tensor zero = zeros({}, x.dtype());
    const Tensor batch_min = minimum(kiln::min(data, axes), zero);
    const Tensor batch_max = maximum(kiln::max(data, axes), zero);
    min = min + (batch_min - min) * (1.0 - o.ema_decay);
    max = max + (batch_max - max) * (1.0 - o.ema_decay);
    lo.assign(min);
    hi.assign(max);
  }
  const FakeQuantOptions q{o.num_bits, o.narrow_range};
  return o.per_channel ? fake_quant_with_min_max_vars_per_channel(x, min, max, q)
                       : fake_quant_with_min_max_vars(x, min, max, q);
}

Variable FakeQuant::min() const { return variable("min"); }
Variable FakeQuant::max() const { return variable("max"); }

}  // namespace kiln::nn

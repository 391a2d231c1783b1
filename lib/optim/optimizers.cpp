// SGD, Adam, RMSprop and Adagrad: option checks and the update rules (Keras's formulations),
// dense and for indexed-slices gradients.
#include <cmath>

#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "kiln/optim.hpp"
#include "kiln/sparse.hpp"
#include "ops/rows.hpp"

namespace kiln::optim {

namespace {

void check_range(std::string_view op, std::string_view what, double v, double lo, double hi,
                 bool hi_open) {
  if (!std::isfinite(v) || v < lo || (hi_open ? v >= hi : v > hi))
    detail::fail(op, "{} must be in [{}, {}{}, got {}", what, lo, hi, hi_open ? ")" : "]", v);
}

std::vector<std::string> optional_slot(bool present, std::string name) {
  if (!present) return {};
  return {std::move(name)};
}

/// The rows of an indexed-slices gradient (each once) and the slot rows read and written with
/// them. Slot values are read by take(), never held, so updates stay in place.
struct SparseRows {
  explicit SparseRows(const Tensor& grad)
      : parts(detail::slices_parts(grad)), shape(grad.shape()) {}
  const detail::RowSlices& parts;
  Shape shape;

  const Tensor& values() const { return parts.values; }
  /// Rows of v's value for these rows (zero rows for padding).
  Tensor take(const Variable& v) const {
    return detail::take_rows(v.value(), parts.indices, parts.padded);
  }
  /// An indexed-slices value of these rows holding `rows`.
  Tensor slices(const Tensor& rows) const {
    return detail::make_slices(parts.indices, rows, shape, true, parts.padded);
  }
};

}  // namespace

// ------------------------------------------------------------------ SGD

SGD::SGD(SGDOptions options)
    : Optimizer("optim.SGD", "sgd", options.name, options.learning_rate, options.clipnorm,
                options.global_clipnorm, optional_slot(options.momentum > 0, "momentum")),
      options_(std::move(options)) {
  check_range(kind(), "momentum", options_.momentum, 0.0, 1.0, false);
}

void SGD::update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                 const Tensor& learning_rate, const Tensor&) {
  const Tensor step = grad * learning_rate;
  if (slots.empty()) {
    var.assign_sub(step);
    return;
  }
  const double momentum = options_.momentum;
  const Tensor m = slots[0].value() * momentum - step;
  slots[0].assign(m);
  var.assign_add(options_.nesterov ? m * momentum - step : m);
}

void SGD::update_sparse(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                        const Tensor& learning_rate, const Tensor&) {
  const SparseRows rows(grad);
  const Tensor step = rows.values() * learning_rate;
  if (slots.empty()) {
    var.scatter_sub(rows.slices(step));
    return;
  }
  const double momentum = options_.momentum;
  const Tensor m = rows.take(slots[0]) * momentum - step;
  slots[0].scatter_update(rows.slices(m));
  var.scatter_add(rows.slices(options_.nesterov ? m * momentum - step : m));
}

// ------------------------------------------------------------------ Adam

Adam::Adam(AdamOptions options)
    : Optimizer("optim.Adam", "adam", options.name, options.learning_rate, options.clipnorm,
                options.global_clipnorm, {"m", "v"}),
      options_(std::move(options)) {
  check_range(kind(), "beta1", options_.beta1, 0.0, 1.0, true);
  check_range(kind(), "beta2", options_.beta2, 0.0, 1.0, true);
  check_range(kind(), "epsilon", options_.epsilon, 0.0, HUGE_VAL, false);
}

void Adam::update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                  const Tensor& learning_rate, const Tensor& step) {
  const AdamOptions& o = options_;
  const Tensor m_old = slots[0].value(), v_old = slots[1].value();
  const Tensor m = m_old + (grad - m_old) * (1.0 - o.beta1);
  const Tensor v = v_old + (square(grad) - v_old) * (1.0 - o.beta2);
  const Tensor alpha = learning_rate * sqrt(1.0 - pow(o.beta2, step)) / (1.0 - pow(o.beta1, step));
  slots[0].assign(m);
  slots[1].assign(v);
  var.assign_sub(m * alpha / (sqrt(v) + o.epsilon));
}

void Adam::update_sparse(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                         const Tensor& learning_rate, const Tensor& step) {
  if (!options_.lazy) return update(var, to_dense(grad), slots, learning_rate, step);
  const AdamOptions& o = options_;
  const SparseRows rows(grad);
  const Tensor& g = rows.values();
  const Tensor m_old = rows.take(slots[0]), v_old = rows.take(slots[1]);
  const Tensor m = m_old + (g - m_old) * (1.0 - o.beta1);
  const Tensor v = v_old + (square(g) - v_old) * (1.0 - o.beta2);
  const Tensor alpha = learning_rate * sqrt(1.0 - pow(o.beta2, step)) / (1.0 - pow(o.beta1, step));
  slots[0].scatter_update(rows.slices(m));
  slots[1].scatter_update(rows.slices(v));
  var.scatter_sub(rows.slices(m * alpha / (sqrt(v) + o.epsilon)));
}

// ------------------------------------------------------------------ RMSprop

RMSprop::RMSprop(RMSpropOptions options)
    : Optimizer("optim.RMSprop", "rmsprop", options.name, options.learning_rate, options.clipnorm,
                options.global_clipnorm,
                options.momentum > 0 ? std::vector<std::string>{"velocity", "momentum"}
                                     : std::vector<std::string>{"velocity"}),
      options_(std::move(options)) {
  check_range(kind(), "rho", options_.rho, 0.0, 1.0, true);
  check_range(kind(), "momentum", options_.momentum, 0.0, 1.0, false);
  check_range(kind(), "epsilon", options_.epsilon, 0.0, HUGE_VAL, false);
}

void RMSprop::update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                     const Tensor& learning_rate, const Tensor&) {
  const RMSpropOptions& o = options_;
  const Tensor velocity = slots[0].value() * o.rho + square(grad) * (1.0 - o.rho);
  slots[0].assign(velocity);
  const Tensor increment = grad * learning_rate / sqrt(velocity + o.epsilon);
  if (slots.size() == 1) {
    var.assign_sub(increment);
    return;
  }
  const Tensor m = slots[1].value() * o.momentum + increment;
  slots[1].assign(m);
  var.assign_sub(m);
}

void RMSprop::update_sparse(const Variable& var, const Tensor& grad,
                            std::span<const Variable> slots, const Tensor& learning_rate,
                            const Tensor&) {
  const RMSpropOptions& o = options_;
  const SparseRows rows(grad);
  const Tensor& g = rows.values();
  const Tensor velocity = rows.take(slots[0]) * o.rho + square(g) * (1.0 - o.rho);
  slots[0].scatter_update(rows.slices(velocity));
  const Tensor increment = g * learning_rate / sqrt(velocity + o.epsilon);
  if (slots.size() == 1) {
    var.scatter_sub(rows.slices(increment));
    return;
  }
  const Tensor m = rows.take(slots[1]) * o.momentum + increment;
  slots[1].scatter_update(rows.slices(m));
  var.scatter_sub(rows.slices(m));
}

// ------------------------------------------------------------------ Adagrad

Adagrad::Adagrad(AdagradOptions options)
    : Optimizer("optim.Adagrad", "adagrad", options.name, options.learning_rate, options.clipnorm,
                options.global_clipnorm, {"accumulator"}),
      options_(std::move(options)) {
  check_range(kind(), "initial_accumulator_value", options_.initial_accumulator_value, 0.0,
              HUGE_VAL, false);
  check_range(kind(), "epsilon", options_.epsilon, 0.0, HUGE_VAL, false);
  set_slot_initial_value(options_.initial_accumulator_value);
}

void Adagrad::update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                     const Tensor& learning_rate, const Tensor&) {
  const Tensor accumulator = slots[0].value() + square(grad);
  slots[0].assign(accumulator);
  var.assign_sub(grad * learning_rate / (sqrt(accumulator) + options_.epsilon));
}

void Adagrad::update_sparse(const Variable& var, const Tensor& grad,
                            std::span<const Variable> slots, const Tensor& learning_rate,
                            const Tensor&) {
  const SparseRows rows(grad);
  const Tensor& g = rows.values();
  const Tensor accumulator = rows.take(slots[0]) + square(g);
  slots[0].scatter_update(rows.slices(accumulator));
  var.scatter_sub(rows.slices(g * learning_rate / (sqrt(accumulator) + options_.epsilon)));
}

}  // namespace kiln::optim

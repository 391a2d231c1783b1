// Front ends of the fused recurrences (ops/recurrent.hpp). Prim::lstm_sequence, gru_sequence
// and their _grad take contiguous inputs of one float dtype and no attrs;
// recurrent_weight_grad's attrs.ints are {units, gates, h column, gate column}; their layouts are
// documented in ops/recurrent.hpp, their kernels in lib/kernels/recurrent.cpp.
#include "ops/recurrent.hpp"

#include "core/fail.hpp"
#include "ops/dispatch.hpp"

namespace kiln::detail {

namespace {

void check_float(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  int index = 0;
  for (const Tensor* t : tensors) check_defined(*t, op, index++);
  const DType dtype = (*tensors.begin())->dtype();
  if (dtype != DType::f32 && dtype != DType::f64)
    fail(op, "needs f32 or f64 tensors, got {}", dtype_name(dtype));
  for (const Tensor* t : tensors)
    if (t->dtype() != dtype)
      fail(op, "dtypes differ: {} vs {} (use kiln::cast)", dtype_name(dtype),
           dtype_name(t->dtype()));
}

/// Checks a recurrence's raw inputs x ([T, B, F], or [B, T, F] when batch-major; F static) and
/// their kernel w_in [F, gates U] against h0 [B, U].
void check_inputs(std::string_view op, const Tensor& x, const Tensor& w_in, const Tensor& h0,
                  std::int64_t gates, bool batch_major) {
  const std::int64_t units = h0.dim(1);
  if (x.ndim() != 3 || x.dim(batch_major ? 0 : 1) != h0.dim(0) || is_dynamic_dim(x.dim(2)))
    fail(op, "the input must be {} with static features, got {}",
         batch_major ? fmt::format("[batch, time, features] = [{}, ?, ?]", dim_text(h0.dim(0)))
                     : fmt::format("[time, batch, features] = [?, {}, ?]", dim_text(h0.dim(0))),
         x.shape());
  if (w_in.shape() != Shape{x.dim(2), gates * units})
    fail(op, "the input kernel must be [{}, {}], got {}", x.dim(2), gates * units, w_in.shape());
}

/// Checks the GRU's h0 [B, U] (U static), recurrent kernel [U, 3U] and biases [3U]; returns U.
std::int64_t check_gru_weights(std::string_view op, const Tensor& h0, const Tensor& w,
                               const Tensor& b_in, const Tensor& b_rec) {
  if (h0.ndim() != 2 || is_dynamic_dim(h0.dim(1)))
    fail(op, "h0 must be [batch, units] with static units, got {}", h0.shape());
  const std::int64_t units = h0.dim(1);
  if (w.shape() != Shape{units, 3 * units})
    fail(op, "the recurrent kernel must be [{}, {}], got {}", units, 3 * units, w.shape());
  if (b_in.shape() != Shape{3 * units})
    fail(op, "the input bias must be [{}], got {}", 3 * units, b_in.shape());
  if (b_rec.shape() != Shape{3 * units})
    fail(op, "the recurrent bias must be [{}], got {}", 3 * units, b_rec.shape());
  return units;
}

/// Checks h0 / c0 [B, U] (U static) and w [U, 4U]; returns U.
std::int64_t check_state_and_kernel(std::string_view op, const Tensor& h0, const Tensor& c0,
                                    const Tensor& w) {
  if (h0.ndim() != 2 || is_dynamic_dim(h0.dim(1)))
    fail(op, "h0 must be [batch, units] with static units, got {}", h0.shape());
  const std::int64_t units = h0.dim(1);
  if (c0.shape() != h0.shape())
    fail(op, "c0 must have h0's shape {}, got {}", h0.shape(), c0.shape());
  if (w.shape() != Shape{units, 4 * units})
    fail(op, "the recurrent kernel must be [{}, {}], got {}", units, 4 * units, w.shape());
  return units;
}

}  // namespace

Tensor lstm_sequence(const Tensor& xp, const Tensor& h0, const Tensor& c0, const Tensor& w,
                     const Tensor& b, bool save_gates) {
  constexpr std::string_view op = "lstm_sequence";
  check_float(op, {&xp, &h0, &c0, &w, &b});
  if (h0.ndim() == 2 && !is_dynamic_dim(h0.dim(1)) &&
      (xp.ndim() != 3 || xp.dim(2) != 4 * h0.dim(1) || xp.dim(1) != h0.dim(0)))
    fail(op, "the projected input must be [time, batch, 4 units] = [?, {}, {}], got {}",
         dim_text(h0.dim(0)), 4 * h0.dim(1), xp.shape());
  const std::int64_t units = check_state_and_kernel(op, h0, c0, w);
  if (b.shape() != Shape{4 * units})
    fail(op, "the bias must be [{}], got {}", 4 * units, b.shape());
  const Shape out{xp.dim(0), xp.dim(1), (save_gates ? 6 : 2) * units};
  return apply(Prim::lstm_sequence, {xp, h0, c0, w, b}, Attrs{}, xp.dtype(), out);
}

Tensor lstm_sequence_from_inputs(const Tensor& x, const Tensor& w_x, const Tensor& h0,
                                 const Tensor& c0, const Tensor& w, const Tensor& b,
                                 bool save_gates, bool batch_major) {
  constexpr std::string_view op = "lstm_sequence";
  check_float(op, {&x, &h0, &c0, &w, &b, &w_x});
  const std::int64_t units = check_state_and_kernel(op, h0, c0, w);
  check_inputs(op, x, w_x, h0, 4, batch_major);
  if (b.shape() != Shape{4 * units})
    fail(op, "the bias must be [{}], got {}", 4 * units, b.shape());
  const Shape out{x.dim(batch_major ? 1 : 0), h0.dim(0), (save_gates ? 6 : 2) * units};
  Attrs attrs;
  if (batch_major) attrs.ints = {1};
  return apply(Prim::lstm_sequence, {x, h0, c0, w, b, w_x}, attrs, x.dtype(), out);
}

Tensor lstm_sequence_grad(const Tensor& g, const Tensor& y, const Tensor& h0, const Tensor& c0,
                          const Tensor& w) {
  constexpr std::string_view op = "lstm_sequence_grad";
  check_float(op, {&g, &y, &h0, &c0, &w});
  if (h0.ndim() != 2) fail(op, "h0 must be [batch, units], got {}", h0.shape());
  const std::int64_t units = h0.dim(1);
  if (y.ndim() != 3 || y.dim(2) != 6 * units || g.shape() != Shape{y.dim(0), y.dim(1), 2 * units})
    fail(op,
         "needs the output y [time, batch, 6 units] (saved gates) and the gradient of its h and c "
         "columns [time, batch, 2 units], got {} and {}",
         y.shape(), g.shape());
  if (y.dim(1) != h0.dim(0) || c0.shape() != h0.shape() || w.shape() != Shape{units, 4 * units})
    fail(op, "h0, c0 [batch, units] and w [units, 4 units] do not fit y {}: {}, {}, {}", y.shape(),
         h0.shape(), c0.shape(), w.shape());
  const Shape out{y.dim(0), y.dim(1), 7 * units};
  return apply(Prim::lstm_sequence_grad, {g, y, h0, c0, w}, Attrs{}, y.dtype(), out);
}

Tensor gru_sequence(const Tensor& xp, const Tensor& h0, const Tensor& w, const Tensor& b_in,
                    const Tensor& b_rec, bool save_gates) {
  constexpr std::string_view op = "gru_sequence";
  check_float(op, {&xp, &h0, &w, &b_in, &b_rec});
  if (h0.ndim() == 2 && !is_dynamic_dim(h0.dim(1)) &&
      (xp.ndim() != 3 || xp.dim(2) != 3 * h0.dim(1) || xp.dim(1) != h0.dim(0)))
    fail(op, "the projected input must be [time, batch, 3 units] = [?, {}, {}], got {}",
         dim_text(h0.dim(0)), 3 * h0.dim(1), xp.shape());
  const std::int64_t units = check_gru_weights(op, h0, w, b_in, b_rec);
  const Shape out{xp.dim(0), xp.dim(1), (save_gates ? 5 : 1) * units};
  return apply(Prim::gru_sequence, {xp, h0, w, b_in, b_rec}, Attrs{}, xp.dtype(), out);
}

Tensor gru_sequence_from_inputs(const Tensor& x, const Tensor& w_in, const Tensor& h0,
                                const Tensor& w, const Tensor& b_in, const Tensor& b_rec,
                                bool save_gates, bool batch_major) {
  constexpr std::string_view op = "gru_sequence";
  check_float(op, {&x, &h0, &w, &b_in, &b_rec, &w_in});
  const std::int64_t units = check_gru_weights(op, h0, w, b_in, b_rec);
  check_inputs(op, x, w_in, h0, 3, batch_major);
  const Shape out{x.dim(batch_major ? 1 : 0), h0.dim(0), (save_gates ? 5 : 1) * units};
  Attrs attrs;
  if (batch_major) attrs.ints = {1};
  return apply(Prim::gru_sequence, {x, h0, w, b_in, b_rec, w_in}, attrs, x.dtype(), out);
}

Tensor gru_sequence_grad(const Tensor& g, const Tensor& y, const Tensor& h0, const Tensor& w) {
  constexpr std::string_view op = "gru_sequence_grad";
  check_float(op, {&g, &y, &h0, &w});
  if (h0.ndim() != 2) fail(op, "h0 must be [batch, units], got {}", h0.shape());
  const std::int64_t units = h0.dim(1);
  if (y.ndim() != 3 || y.dim(2) != 5 * units || g.shape() != Shape{y.dim(0), y.dim(1), units})
    fail(op,
         "needs the output y [time, batch, 5 units] (saved gates) and the gradient of its h "
         "columns [time, batch, units], got {} and {}",
         y.shape(), g.shape());
  if (y.dim(1) != h0.dim(0) || w.shape() != Shape{units, 3 * units})
    fail(op, "h0 [batch, units] and w [units, 3 units] do not fit y {}: {}, {}", y.shape(),
         h0.shape(), w.shape());
  const Shape out{y.dim(0), y.dim(1), 8 * units};
  return apply(Prim::gru_sequence_grad, {g, y, h0, w}, Attrs{}, y.dtype(), out);
}

Tensor recurrent_weight_grad(const Tensor& r, std::int64_t units, std::int64_t gates,
                             std::int64_t h_column, std::int64_t gate_column) {
  constexpr std::string_view op = "recurrent_weight_grad";
  check_float(op, {&r});
  if (r.ndim() != 3 || is_dynamic_dim(r.dim(2)) || units <= 0 || gates <= 0 || h_column < 0 ||
      h_column + units > r.dim(2) || gate_column < 0 || gate_column + gates * units > r.dim(2))
    fail(op, "columns [{}, +{}) and [{}, +{}) do not fit {}", h_column, units, gate_column,
         gates * units, r.shape());
  Attrs attrs;
  attrs.ints = {units, gates, h_column, gate_column};
  return apply(Prim::recurrent_weight_grad, {r}, attrs, r.dtype(), Shape{units, gates * units});
}

}  // namespace kiln::detail

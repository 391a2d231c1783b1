// nn::LSTMCell, nn::LSTM and nn::GRU: Keras's weight layouts, unrolled over static time steps.
#include "kiln/nn/recurrent.hpp"

#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view cell_op = "nn.LSTMCell";
constexpr std::string_view lstm_op = "nn.LSTM";
constexpr std::string_view gru_op = "nn.GRU";

/// The LSTM bias initializer: with unit_forget_bias, `base` for the i, c and o parts and ones
/// for the forget gate (Keras's construction); else `base` for all of it.
init::Initializer lstm_bias_initializer(const init::Initializer& base, std::int64_t units,
                                        bool unit_forget_bias) {
  if (!unit_forget_bias) return base;
  return init::Initializer("lstm_unit_forget_bias", [base, units](const Shape&, DType dtype) {
    return concat({base({units}, dtype), ones({units}, dtype), base({2 * units}, dtype)}, 0);
  });
}

/// The LSTM update from the pre-activations z = [z_i, z_f, z_c, z_o] and the cell state c
/// (zero_c: c is zero, so the forget term vanishes).
LSTMState lstm_update(const Tensor& z, const Tensor& c, bool zero_c) {
  const std::vector<Tensor> gates = split(z, 4, -1);
  const Tensor input_gate = sigmoid(gates[0]);
  const Tensor candidate = tanh(gates[2]);
  const Tensor output_gate = sigmoid(gates[3]);
  const Tensor c_new =
      zero_c ? input_gate * candidate : sigmoid(gates[1]) * c + input_gate * candidate;
  return {output_gate * tanh(c_new), c_new};
}

void check_units(std::string_view op, const Module& layer, std::int64_t units) {
  if (units <= 0) detail::fail(op, "{}: units must be positive, got {}", layer.path(), units);
}

/// Checks a [batch, units] state tensor against the input's batch.
void check_state(std::string_view op, const Module& layer, const char* what, const Tensor& s,
                 std::int64_t batch, std::int64_t units, DType dtype) {
  if (!s.defined())
    detail::fail(op, "{}: the initial {} is an undefined tensor", layer.path(), what);
  if (s.dtype() != dtype || s.ndim() != 2 || s.dim(0) != batch || s.dim(1) != units)
    detail::fail(op, "{}: the initial {} must be {} [{},{}], got {} {}", layer.path(), what,
                 dtype_name(dtype), detail::dim_text(batch), units, dtype_name(s.dtype()),
                 s.shape());
}

/// The number of time steps of a [batch, time, features] input (static, > 0).
std::int64_t time_steps(std::string_view op, const Module& layer, const Tensor& x) {
  if (x.ndim() != 3)
    detail::fail(op, "{}: needs [batch, time, features] inputs, got {} {}", layer.path(),
                 dtype_name(x.dtype()), x.shape());
  const std::int64_t steps = x.dim(1);
  if (is_dynamic_dim(steps))
    detail::fail(op,
                 "{}: the time dim of {} is dynamic; the layer unrolls over time steps, so it "
                 "must be static",
                 layer.path(), x.shape());
  if (steps == 0) detail::fail(op, "{}: the input {} has no time steps", layer.path(), x.shape());
  return steps;
}

/// Time step t of a [batch, time, n] tensor: [batch, n].
Tensor step_of(const Tensor& seq, std::int64_t t) { return squeeze(slice(seq, 1, t, t + 1), {1}); }

}  // namespace

// ------------------------------------------------------------------ LSTMCell

LSTMCell::LSTMCell(std::int64_t units, LSTMCellOptions options)
    : Layer("lstm_cell", std::move(options.name)), units_(units), options_(std::move(options)) {
  check_units(cell_op, *this, units);
}

LSTMState LSTMCell::operator()(const Tensor& x, const LSTMState& state) {
  const std::int64_t features = input_size(cell_op, x, 2);
  if (x.ndim() != 2)
    detail::fail(cell_op, "{}: needs [batch, features] inputs, got {} {}", path(),
                 dtype_name(x.dtype()), x.shape());
  check_state(cell_op, *this, "h", state.h, x.dim(0), units_, x.dtype());
  check_state(cell_op, *this, "c", state.c, x.dim(0), units_, x.dtype());
  const Variable kernel =
      input_weight(cell_op, x, "kernel", {features, 4 * units_}, options_.kernel_initializer);
  const Variable recurrent = weight("recurrent_kernel", {units_, 4 * units_},
                                    options_.recurrent_initializer, true, x.dtype());
  const Variable bias =
      weight("bias", {4 * units_},
             lstm_bias_initializer(options_.bias_initializer, units_, options_.unit_forget_bias),
             true, x.dtype());
  const Tensor z = matmul(x, kernel.value()) + matmul(state.h, recurrent.value()) + bias.value();
  return lstm_update(z, state.c, false);
}

Tensor LSTMCell::operator()(const Tensor& x) {
  input_size(cell_op, x, 2);
  const Tensor zero = zeros({x.dim(0), units_}, x.dtype());
  return (*this)(x, LSTMState{zero, zero}).h;
}

Variable LSTMCell::kernel() const { return variable("kernel"); }
Variable LSTMCell::recurrent_kernel() const { return variable("recurrent_kernel"); }
Variable LSTMCell::bias() const { return variable("bias"); }

// ------------------------------------------------------------------ shared by LSTM and GRU

namespace {

/// The carried state variable `name` of a stateful layer ([batch, units], non-trainable),
/// created on the first call; the batch must be static and the same on every call.
Variable carried_state(std::string_view op, Module& layer, std::string_view name,
                       std::int64_t batch, std::int64_t units, DType dtype) {
  if (is_dynamic_dim(batch))
    detail::fail(op,
                 "{} is stateful, so it needs a static batch size (its state is a variable of "
                 "shape [batch, {}]); the input's batch dim is dynamic",
                 layer.path(), units);
  if (layer.has_variable(name)) {
    Variable v = layer.variable(name);
    if (v.shape()[0] != batch)
      detail::fail(op, "{} is stateful and was built for batch {}; called with batch {}",
                   layer.path(), v.shape()[0], batch);
    return v;
  }
  return layer.add_variable(name, {batch, units}, init::zeros(), /*trainable*/ false, dtype);
}

void zero_state(Module& layer, std::string_view name) {
  if (!layer.has_variable(name)) return;
  const Variable v = layer.variable(name);
  v.assign(zeros(v.shape(), v.dtype()));
}

}  // namespace

// ------------------------------------------------------------------ LSTM

LSTM::LSTM(std::int64_t units, LSTMOptions options)
    : Layer("lstm", std::move(options.name)), units_(units), options_(std::move(options)) {
  check_units(lstm_op, *this, units);
}

Tensor LSTM::operator()(const Tensor& x) { return call(x).front(); }

std::vector<Tensor> LSTM::call(const Tensor& x, const std::vector<Tensor>& initial_state) {
  const std::int64_t features = input_size(lstm_op, x, 3);
  const std::int64_t steps = time_steps(lstm_op, *this, x);
  const std::int64_t batch = x.dim(0);
  const DType dtype = x.dtype();
  const Variable kernel =
      input_weight(lstm_op, x, "kernel", {features, 4 * units_}, options_.kernel_initializer);
  const Variable recurrent =
      weight("recurrent_kernel", {units_, 4 * units_}, options_.recurrent_initializer, true, dtype);
  const Variable bias =
      weight("bias", {4 * units_},
             lstm_bias_initializer(options_.bias_initializer, units_, options_.unit_forget_bias),
             true, dtype);

  LSTMState state;
  bool zero = false;
  Variable carried_h, carried_c;
  if (!initial_state.empty()) {
    if (initial_state.size() != 2)
      detail::fail(lstm_op, "{}: initial_state must be {{h, c}}, got {} tensors", path(),
                   initial_state.size());
    check_state(lstm_op, *this, "h", initial_state[0], batch, units_, dtype);
    check_state(lstm_op, *this, "c", initial_state[1], batch, units_, dtype);
    state = {initial_state[0], initial_state[1]};
  } else if (options_.stateful) {
    carried_h = carried_state(lstm_op, *this, "state_h", batch, units_, dtype);
    carried_c = carried_state(lstm_op, *this, "state_c", batch, units_, dtype);
    state = {carried_h.value(), carried_c.value()};
  } else {
    zero = true;
  }

  // The input projection of every step in one matmul: [batch, time, 4 * units].
  const Tensor projected = matmul(x, kernel.value()) + bias.value();
  const Tensor r = recurrent.value();
  std::vector<Tensor> outputs;
  for (std::int64_t k = 0; k < steps; ++k) {
    const std::int64_t t = options_.go_backwards ? steps - 1 - k : k;
    const Tensor xt = step_of(projected, t);
    state = lstm_update(zero ? xt : xt + matmul(state.h, r), state.c, zero);
    zero = false;
    if (options_.return_sequences) outputs.push_back(state.h);
  }
  if (carried_h.defined()) {
    carried_h.assign(state.h);
    carried_c.assign(state.c);
  }
  Tensor output = options_.return_sequences ? stack(outputs, 1) : state.h;
  if (options_.return_state) return {output, state.h, state.c};
  return {output};
}

void LSTM::reset_states() {
  zero_state(*this, "state_h");
  zero_state(*this, "state_c");
}

Variable LSTM::kernel() const { return variable("kernel"); }
Variable LSTM::recurrent_kernel() const { return variable("recurrent_kernel"); }
Variable LSTM::bias() const { return variable("bias"); }

// ------------------------------------------------------------------ GRU

GRU::GRU(std::int64_t units, GRUOptions options)
    : Layer("gru", std::move(options.name)), units_(units), options_(std::move(options)) {
  check_units(gru_op, *this, units);
}

Tensor GRU::operator()(const Tensor& x) { return call(x).front(); }

std::vector<Tensor> GRU::call(const Tensor& x, const std::vector<Tensor>& initial_state) {
  const std::int64_t features = input_size(gru_op, x, 3);
  const std::int64_t steps = time_steps(gru_op, *this, x);
  const std::int64_t batch = x.dim(0);
  const DType dtype = x.dtype();
  const Variable kernel =
      input_weight(gru_op, x, "kernel", {features, 3 * units_}, options_.kernel_initializer);
  const Variable recurrent =
      weight("recurrent_kernel", {units_, 3 * units_}, options_.recurrent_initializer, true, dtype);
  const Variable bias = weight("bias", {2, 3 * units_}, options_.bias_initializer, true, dtype);

  Tensor h;
  bool zero = false;
  Variable carried;
  if (!initial_state.empty()) {
    if (initial_state.size() != 1)
      detail::fail(gru_op, "{}: initial_state must be {{h}}, got {} tensors", path(),
                   initial_state.size());
    check_state(gru_op, *this, "h", initial_state[0], batch, units_, dtype);
    h = initial_state[0];
  } else if (options_.stateful) {
    carried = carried_state(gru_op, *this, "state_h", batch, units_, dtype);
    h = carried.value();
  } else {
    zero = true;
  }

  const std::vector<Tensor> biases = unstack(bias.value(), 0);  // input bias, recurrent bias
  const Tensor projected = matmul(x, kernel.value()) + biases[0];
  const Tensor r = recurrent.value();
  std::vector<Tensor> outputs;
  for (std::int64_t k = 0; k < steps; ++k) {
    const std::int64_t t = options_.go_backwards ? steps - 1 - k : k;
    const std::vector<Tensor> xs = split(step_of(projected, t), 3, -1);
    const std::vector<Tensor> hs = split(zero ? biases[1] : matmul(h, r) + biases[1], 3, -1);
    const Tensor update_gate = sigmoid(xs[0] + hs[0]);
    const Tensor reset_gate = sigmoid(xs[1] + hs[1]);
    const Tensor candidate = tanh(xs[2] + reset_gate * hs[2]);
    h = zero ? (1.0 - update_gate) * candidate : update_gate * h + (1.0 - update_gate) * candidate;
    zero = false;
    if (options_.return_sequences) outputs.push_back(h);
  }
  if (carried.defined()) carried.assign(h);
  Tensor output = options_.return_sequences ? stack(outputs, 1) : h;
  if (options_.return_state) return {output, h};
  return {output};
}

void GRU::reset_states() { zero_state(*this, "state_h"); }

Variable GRU::kernel() const { return variable("kernel"); }
Variable GRU::recurrent_kernel() const { return variable("recurrent_kernel"); }
Variable GRU::bias() const { return variable("bias"); }

}  // namespace kiln::nn

// nn::LSTMCell, nn::LSTM, nn::GRU and nn::SimpleRNN: Keras's weight layouts; the sequence layers
// run their step in a kiln::scan over time (or, with unroll, once per static time step).
#include "kiln/nn/recurrent.hpp"

#include <fmt/ranges.h>

#include <functional>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/checkpointing.hpp"
#include "kiln/control_flow.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "nn/time_reverse.hpp"
#include "ops/dispatch.hpp"
#include "ops/recurrent.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view cell_op = "nn.LSTMCell";
constexpr std::string_view lstm_op = "nn.LSTM";
constexpr std::string_view gru_op = "nn.GRU";
constexpr std::string_view rnn_op = "nn.SimpleRNN";

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

/// The number of time steps of a [batch, time, features] input: static and > 0 when the layer
/// unrolls; a scan also takes a dynamic time dim.
std::int64_t time_steps(std::string_view op, const Module& layer, const Tensor& x, bool unroll) {
  if (x.ndim() != 3)
    detail::fail(op, "{}: needs [batch, time, features] inputs, got {} {}", layer.path(),
                 dtype_name(x.dtype()), x.shape());
  const std::int64_t steps = x.dim(1);
  if (is_dynamic_dim(steps)) {
    if (unroll)
      detail::fail(op,
                   "{}: the time dim of {} is dynamic; with unroll = true the layer unrolls over "
                   "time steps, so it must be static (or construct it with unroll = false)",
                   layer.path(), x.shape());
    return steps;
  }
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

// ------------------------------------------------------------------ shared by the sequence layers

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

/// The initial state of a sequence layer whose state is the tensors `names` (each [batch,
/// units]): `given` when not empty (checked), else the carried state of a stateful layer (its
/// variables in `carried`), else empty, which means zeros.
std::vector<Tensor> initial_state_of(std::string_view op, Module& layer,
                                     const std::vector<const char*>& names,
                                     const std::vector<Tensor>& given, bool stateful,
                                     std::int64_t batch, std::int64_t units, DType dtype,
                                     std::vector<Variable>& carried) {
  if (!given.empty()) {
    if (given.size() != names.size())
      detail::fail(op, "{}: initial_state must be {{{}}}, got {} tensors", layer.path(),
                   fmt::join(names, ", "), given.size());
    for (std::size_t i = 0; i < names.size(); ++i)
      check_state(op, layer, names[i], given[i], batch, units, dtype);
    return given;
  }
  if (!stateful) return {};
  std::vector<Tensor> state;
  for (const char* name : names) {
    carried.push_back(carried_state(op, layer, std::string("state_") + name, batch, units, dtype));
    state.push_back(carried.back().value());
  }
  return state;
}

/// One step of a recurrence: the step's projected input [batch, n] and the state (h first;
/// empty for the zero state) -> the new state. It must not hold references to locals of the
/// layer's call: a traced scan keeps it for the gradient, which may run after the call.
using Step = std::function<std::vector<Tensor>(const Tensor& xt, const std::vector<Tensor>& s)>;

/// The step indices 0, ..., T-1 (i64 [T]) of a time-major [time, ...] tensor whose time dim may
/// be dynamic (a counting scan, as in reverse_time).
Tensor step_indices(const Tensor& seq) {
  if (!is_dynamic_dim(seq.dim(0))) return arange(seq.dim(0), DType::i64);
  const auto count = [](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
    return std::pair<std::vector<Tensor>, std::vector<Tensor>>{{c[0] + 1}, {c[0]}};
  };
  return scan(count, {scalar(0.0, DType::i64)}, {stop_gradient(seq)}).second[0];
}

/// The checked mask of a call: undefined (no masking) or boolean [batch, time], from
/// options.mask or options.sequence_lengths.
Tensor mask_of(std::string_view op, const Module& layer, const Tensor& x,
               const RecurrentCallOptions& options) {
  const auto dims_agree = [](std::int64_t a, std::int64_t b) {
    return a == b || is_dynamic_dim(a) || is_dynamic_dim(b);
  };
  if (options.mask.defined() && options.sequence_lengths.defined())
    detail::fail(op, "{}: give a mask or sequence_lengths, not both", layer.path());
  if (options.mask.defined()) {
    const Tensor& m = options.mask;
    if (m.dtype() != DType::boolean || m.ndim() != 2 || !dims_agree(m.dim(0), x.dim(0)) ||
        !dims_agree(m.dim(1), x.dim(1)))
      detail::fail(op,
                   "{}: the mask must be bool [batch, time] = bool [{},{}] for the input {}, got "
                   "{} {}",
                   layer.path(), detail::dim_text(x.dim(0)), detail::dim_text(x.dim(1)), x.shape(),
                   dtype_name(m.dtype()), m.shape());
    return m;
  }
  if (!options.sequence_lengths.defined()) return {};
  const Tensor& n = options.sequence_lengths;
  if ((n.dtype() != DType::i32 && n.dtype() != DType::i64) || n.ndim() != 1 ||
      !dims_agree(n.dim(0), x.dim(0)))
    detail::fail(op, "{}: sequence_lengths must be i32 or i64 [batch] = [{}], got {} {}",
                 layer.path(), detail::dim_text(x.dim(0)), dtype_name(n.dtype()), n.shape());
  // [1, time] < [batch, 1]: step t of sequence b is real when t < n[b].
  const Tensor steps = step_indices(stop_gradient(transpose(x, {1, 0, 2})));
  return less(expand_dims(steps, 0), expand_dims(cast(n, DType::i64), 1));
}

/// A masked step: where m ([batch, 1]) is false, the state `prev` and the output `prev_out`
/// carry through; else the step's new state `next` and output next[0]. Returns the state,
/// then the output.
std::vector<Tensor> masked_step(const Tensor& m, std::vector<Tensor> next,
                                const std::vector<Tensor>& prev, const Tensor& prev_out) {
  const Tensor out = where(m, next[0], prev_out);
  for (std::size_t i = 0; i < next.size(); ++i) next[i] = where(m, next[i], prev[i]);
  next.push_back(out);
  return next;
}

/// checkpoint_every of a layer's options, checked.
std::int64_t segment_steps(std::string_view op, std::int64_t k, bool unroll) {
  if (k < 1) detail::fail(op, "checkpoint_every must be at least 1, got {}", k);
  if (k > 1 && unroll)
    detail::fail(
        op, "checkpoint_every = {} needs the scan form; it cannot be used with unroll = true", k);
  return k;
}

/// A segment's recurrence run as one fused primitive instead of a scan: (state, the segment's
/// projected inputs, reverse) -> (final state, ys at their inputs' positions), as scan(body).
using SegmentRun = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(
    const std::vector<Tensor>&, const std::vector<Tensor>&, bool)>;

/// recur's scan in segments of k steps (static time above k): a scan over segments whose body
/// projects the segment's raw inputs (xs[0], time-major) with `projected` and scans them (or runs
/// fused_segment on them; the fused LSTM's projects inside its recurrence, so its `projected` is
/// the identity), then one segment of the remaining steps. Traced under a tape the outer
/// scan keeps one state per segment; its gradient replays a segment's projection and inner scan.
/// Eagerly each segment is a kiln::checkpoint.

std::pair<std::vector<Tensor>, std::vector<Tensor>> segmented_recurrence(
    const ScanBody& body, const std::function<Tensor(const Tensor&)>& projected,
    const std::vector<Tensor>& state, const std::vector<Tensor>& xs, std::int64_t k, bool reverse,
    const SegmentRun& fused_segment) {
  using Tensors = std::vector<Tensor>;
  const std::int64_t steps = xs[0].dim(0), segments = steps / k, rest = steps % k;
  const std::size_t ns = state.size();
  const auto run = [&](const Tensors& s, Tensors x) {
    x[0] = projected(x[0]);
    if (fused_segment) return fused_segment(s, x, reverse);
    return scan(body, s, x, {.reverse = reverse});
  };
  // Steps [from, from + count * size) of xs as `count` segments of `size` steps, run from s.
  const auto over_segments = [&](const Tensors& s, std::int64_t from, std::int64_t count,
                                 std::int64_t size) {
    Tensors seg_xs;
    for (const Tensor& x : xs) {
      Shape shape{count, size};
      for (std::size_t d = 1; d < x.shape().size(); ++d) shape.push_back(x.shape()[d]);
      seg_xs.push_back(reshape(slice(x, 0, from, from + count * size), shape));
    }
    std::pair<Tensors, Tensors> out;
    // Each segment projects its own inputs: hoisting that out would hold every step's again.
    const detail::StepWorkStaysInside keep;
    if (detail::active_trace() != nullptr) {
      out = scan(run, s, seg_xs, {.reverse = reverse});
    } else {
      const Checkpointed segment = checkpoint([&](const Tensors& a) {
        auto [next, ys] = run(Tensors(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(ns)),
                              Tensors(a.begin() + static_cast<std::ptrdiff_t>(ns), a.end()));
        next.insert(next.end(), ys.begin(), ys.end());
        return next;
      });
      out = scan(
          [&](const Tensors& c, const Tensors& x) {
            Tensors in = c;
            in.insert(in.end(), x.begin(), x.end());
            Tensors r = segment(in);
            Tensors ys(r.begin() + static_cast<std::ptrdiff_t>(ns), r.end());
            r.resize(ns);
            return std::pair<Tensors, Tensors>{r, ys};
          },
          s, seg_xs, {.reverse = reverse});
    }
    for (Tensor& y : out.second) {
      Shape shape{count * size};
      for (std::size_t d = 2; d < y.shape().size(); ++d) shape.push_back(y.shape()[d]);
      y = reshape(y, shape);
    }
    return out;
  };
  // Reversed, the remainder is at the front (it runs last).
  auto main = over_segments(state, reverse ? rest : 0, segments, k);
  if (rest == 0) return main;
  auto [final_state, tail_ys] = over_segments(main.first, reverse ? 0 : segments * k, 1, rest);
  for (std::size_t i = 0; i < tail_ys.size(); ++i)
    main.second[i] =
        reverse ? concat({tail_ys[i], main.second[i]}, 0) : concat({main.second[i], tail_ys[i]}, 0);
  return {final_state, main.second};
}

/// The recurrence of a sequence layer over x [batch, time, features]: `projected(x)` is the
/// input projection x @ kernel + bias of every step in one matmul, then `step` runs per time
/// step, from `state` (empty: zeros, `state_size` tensors [batch, units]). `mask` is undefined
/// or boolean [batch, time] (see "Padding and masking" in nn/recurrent.hpp). Returns the final
/// state followed by the output: the output sequence [batch, time, units] (in processing
/// order) with return_sequences, else the last step's output.
std::vector<Tensor> recur(const Tensor& x, const std::function<Tensor(const Tensor&)>& projected,
                          const Step& step, std::vector<Tensor> state, std::size_t state_size,
                          std::int64_t units, bool unroll, bool go_backwards, bool return_sequences,
                          const Tensor& mask, std::int64_t checkpoint_every,
                          const SegmentRun& fused_segment = {}) {
  const bool masked = mask.defined();
  // A masked step needs the previous state to carry through, so it starts from explicit zeros
  // (the batch may be dynamic); the output before the first real step is zeros.
  if ((masked || !unroll) && state.empty())
    state.assign(state_size, zeros({x.dim(0), units}, x.dtype()));
  if (unroll) {
    const std::int64_t steps = x.dim(1);
    const Tensor p = projected(x);  // [batch, time, n]
    Tensor out = masked ? zeros({x.dim(0), units}, x.dtype()) : Tensor();
    std::vector<Tensor> outputs;
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::int64_t t = go_backwards ? steps - 1 - k : k;
      std::vector<Tensor> next = step(step_of(p, t), state);
      if (masked) {
        next = masked_step(slice(mask, 1, t, t + 1), std::move(next), state, out);
        out = next.back();
        next.pop_back();
      } else {
        out = next[0];
      }
      state = std::move(next);
      if (return_sequences) outputs.push_back(out);
    }
    state.push_back(return_sequences ? stack(outputs, 1) : out);
    return state;
  }
  // The scan runs over the leading axis: project the time-major input [time, batch, n] (per
  // segment when checkpointing).
  const std::int64_t time = x.dim(1);
  const bool segmented = checkpoint_every > 1 && !is_dynamic_dim(time) && time > checkpoint_every;
  const Tensor time_major = transpose(x, {1, 0, 2});
  std::vector<Tensor> xs{segmented ? time_major : projected(time_major)};
  if (masked) {
    xs.push_back(transpose(mask, {1, 0}));                 // [time, batch]
    state.push_back(zeros({x.dim(0), units}, x.dtype()));  // the previous output
  }
  const auto body = [step, return_sequences, masked, state_size](const std::vector<Tensor>& carry,
                                                                 const std::vector<Tensor>& xt) {
    std::vector<Tensor> next;
    if (masked) {
      const std::vector<Tensor> prev(carry.begin(), carry.begin() + state_size);
      next = masked_step(expand_dims(xt[1], 1), step(xt[0], prev), prev, carry.back());
    } else {
      next = step(xt[0], carry);
    }
    std::vector<Tensor> y;
    if (return_sequences) y.push_back(masked ? next.back() : next[0]);
    return std::pair<std::vector<Tensor>, std::vector<Tensor>>{std::move(next), std::move(y)};
  };
  auto [final_state, ys] = segmented
                               ? segmented_recurrence(body, projected, state, xs, checkpoint_every,
                                                      go_backwards, fused_segment)
                               : scan(body, state, xs, {.reverse = go_backwards});
  if (!masked) final_state.push_back(final_state[0]);  // the last output is h
  if (return_sequences) {
    // A reversed scan leaves each step's output at its input's position; Keras's go_backwards
    // sequence is in processing order.
    const Tensor seq = go_backwards ? reverse_time(ys[0]) : ys[0];
    final_state.back() = transpose(seq, {1, 0, 2});
  }
  return final_state;
}

/// The last step of each time-major sequence [time, ...], or of `initial` when there are no
/// steps (a dynamic time dim of 0). A dynamic time dim cannot be sliced while tracing: there the
/// steps are counted from the end (a reversed counting scan, as in reverse_time) and the sum over
/// time keeps the step whose count is 0 (one pass over the sequence; its gradient is the same
/// mask).
std::vector<Tensor> last_steps(const std::vector<Tensor>& seqs,
                               const std::vector<Tensor>& initial) {
  const std::int64_t steps = seqs[0].dim(0);
  std::vector<Tensor> out;
  if (!is_dynamic_dim(steps)) {
    for (const Tensor& seq : seqs) out.push_back(squeeze(slice(seq, 0, steps - 1, steps), {0}));
    return out;
  }
  const auto count = [](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
    return std::pair<std::vector<Tensor>, std::vector<Tensor>>{{c[0] + 1}, {c[0]}};
  };
  const Tensor from_end =
      scan(count, {scalar(0.0, DType::i64)}, {stop_gradient(seqs[0])}, {.reverse = true}).second[0];
  const Tensor is_last = equal(from_end, scalar(0.0, DType::i64));
  const Tensor any_step = any(is_last);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Shape mask_shape{steps};
    for (std::size_t d = 1; d < seqs[i].shape().size(); ++d) mask_shape.push_back(1);
    const Tensor last = sum(where(reshape(is_last, mask_shape), seqs[i], zeros_like(seqs[i])), {0});
    out.push_back(where(any_step, last, initial[i]));
  }
  return out;
}

/// Whether a fused recurrence keeps its gate activations for a gradient: while a tape records,
/// and while a trace runs (it may be differentiated later: a kiln::checkpoint replays its graph
/// under a tape); simplify drops them again where nothing reads them.
bool keep_gates_for_gradient() {
  return detail::any_tape_recording() || detail::active_trace() != nullptr;
}

/// lstm_sequence over x (time-major inputs in processing order, or the layer's batch-major ones
/// where `batch_major`) and the input kernel (each step's projection is summed inside the
/// recurrence: lstm_sequence_from_inputs) from state {h, c}: every step's h [T, B, U] and the
/// final {h, c} (last_steps). It keeps the gate activations for the gradient while a tape
/// records or a trace runs.
std::pair<Tensor, std::vector<Tensor>> run_fused_lstm(const Tensor& x, const Tensor& kernel,
                                                      const std::vector<Tensor>& state,
                                                      const Tensor& recurrent, const Tensor& bias,
                                                      std::int64_t units,
                                                      bool batch_major = false) {
  const Tensor y = detail::lstm_sequence_from_inputs(x, kernel, state[0], state[1], recurrent, bias,
                                                     keep_gates_for_gradient(), batch_major);
  const Tensor hs = slice(y, 2, 0, units);
  return {hs, last_steps({hs, slice(y, 2, units, 2 * units)}, state)};
}

/// nn::LSTM's recurrence as one fused primitive: the result of recur() for an input without a
/// mask, in the scan form.
std::vector<Tensor> fused_lstm(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                               const Tensor& recurrent, std::vector<Tensor> state,
                               std::int64_t units, bool go_backwards, bool return_sequences) {
  if (state.empty()) state.assign(2, zeros({x.dim(0), units}, x.dtype()));
  // Keras's go_backwards sequence is in processing order: the recurrence of the reversed input
  // (time-major, reversed); forwards the primitive reads x's rows where they are.
  const auto [hs, last] = go_backwards
                              ? run_fused_lstm(reverse_time(transpose(x, {1, 0, 2})), kernel, state,
                                               recurrent, bias, units)
                              : run_fused_lstm(x, kernel, state, recurrent, bias, units, true);
  return {last[0], last[1], return_sequences ? transpose(hs, {1, 0, 2}) : last[0]};
}

/// A checkpointing segment of nn::LSTM as one fused recurrence (recur's SegmentRun): xs[0] is
/// the segment's raw inputs (time-major), which the primitive projects step by step.
SegmentRun fused_lstm_segment(const Tensor& kernel, const Tensor& recurrent, const Tensor& bias,
                              std::int64_t units, bool return_sequences) {
  return [kernel, recurrent, bias, units, return_sequences](
             const std::vector<Tensor>& s, const std::vector<Tensor>& xs, bool reverse) {
    auto [hs, last] =
        run_fused_lstm(reverse ? reverse_time(xs[0]) : xs[0], kernel, s, recurrent, bias, units);
    std::vector<Tensor> ys;
    if (return_sequences) ys.push_back(reverse ? reverse_time(hs) : hs);
    return std::pair<std::vector<Tensor>, std::vector<Tensor>>{std::move(last), std::move(ys)};
  };
}

/// nn::GRU's recurrence as one fused primitive (detail::gru_sequence), as fused_lstm.
std::vector<Tensor> fused_gru(const Tensor& x, const Tensor& kernel, const Tensor& input_bias,
                              const Tensor& recurrent, const Tensor& recurrent_bias,
                              std::vector<Tensor> state, std::int64_t units, bool go_backwards,
                              bool return_sequences) {
  if (state.empty()) state.push_back(zeros({x.dim(0), units}, x.dtype()));
  const bool keep_gates = keep_gates_for_gradient();
  // The primitive projects the inputs itself, reading x in place when not reversed.
  const Tensor y =
      go_backwards ? detail::gru_sequence_from_inputs(reverse_time(transpose(x, {1, 0, 2})), kernel,
                                                      state[0], recurrent, input_bias,
                                                      recurrent_bias, keep_gates)
                   : detail::gru_sequence_from_inputs(x, kernel, state[0], recurrent, input_bias,
                                                      recurrent_bias, keep_gates, true);
  const Tensor hs = slice(y, 2, 0, units);
  const Tensor h = last_steps({hs}, state).front();
  return {h, return_sequences ? transpose(hs, {1, 0, 2}) : h};
}

/// The layer's outputs from recur's result: {output} or, with return_state, {output, state...}.
std::vector<Tensor> layer_outputs(std::vector<Tensor> result, std::size_t state_size,
                                  bool return_state, const std::vector<Variable>& carried) {
  for (std::size_t i = 0; i < carried.size(); ++i) carried[i].assign(result[i]);
  Tensor output = result[state_size];
  if (!return_state) return {output};
  result.resize(state_size);
  result.insert(result.begin(), output);
  return result;
}

}  // namespace

// ------------------------------------------------------------------ LSTM

LSTM::LSTM(std::int64_t units, LSTMOptions options)
    : Layer("lstm", std::move(options.name)), units_(units), options_(std::move(options)) {
  check_units(lstm_op, *this, units);
}

Tensor LSTM::operator()(const Tensor& x) { return call(x).front(); }

std::vector<Tensor> LSTM::call(const Tensor& x, const std::vector<Tensor>& initial_state) {
  return call(x, RecurrentCallOptions{.initial_state = initial_state});
}

std::vector<Tensor> LSTM::call(const Tensor& x, const std::vector<Tensor>& initial_state,
                               const Tensor& mask) {
  return call(x, RecurrentCallOptions{.initial_state = initial_state, .mask = mask});
}

std::vector<Tensor> LSTM::call(const Tensor& x, const RecurrentCallOptions& call_options) {
  const std::vector<Tensor>& initial_state = call_options.initial_state;
  const std::int64_t features = input_size(lstm_op, x, 3);
  time_steps(lstm_op, *this, x, options_.unroll);
  segment_steps(lstm_op, options_.checkpoint_every, options_.unroll);
  const Tensor mask = mask_of(lstm_op, *this, x, call_options);
  const DType dtype = x.dtype();
  const Variable kernel =
      input_weight(lstm_op, x, "kernel", {features, 4 * units_}, options_.kernel_initializer);
  const Variable recurrent =
      weight("recurrent_kernel", {units_, 4 * units_}, options_.recurrent_initializer, true, dtype);
  const Variable bias =
      weight("bias", {4 * units_},
             lstm_bias_initializer(options_.bias_initializer, units_, options_.unit_forget_bias),
             true, dtype);
  std::vector<Variable> carried;
  std::vector<Tensor> state = initial_state_of(lstm_op, *this, {"h", "c"}, initial_state,
                                               options_.stateful, x.dim(0), units_, dtype, carried);

  const Tensor k = kernel.value(), b = bias.value(), r = recurrent.value();
  const std::int64_t time = x.dim(1);
  const bool segmented =
      options_.checkpoint_every > 1 && !is_dynamic_dim(time) && time > options_.checkpoint_every;
  const bool fused = options_.fused && !options_.unroll && !mask.defined() &&
                     (dtype == DType::f32 || dtype == DType::f64);
  if (fused && !segmented)
    return layer_outputs(fused_lstm(x, k, b, r, std::move(state), units_, options_.go_backwards,
                                    options_.return_sequences),
                         2, options_.return_state, carried);
  if (fused)  // checkpointing segments, each one fused recurrence that projects its inputs
    return layer_outputs(
        recur(
            x, [](const Tensor& in) { return in; }, Step(), std::move(state), 2, units_, false,
            options_.go_backwards, options_.return_sequences, mask, options_.checkpoint_every,
            fused_lstm_segment(k, r, b, units_, options_.return_sequences)),
        2, options_.return_state, carried);
  const Step step = [r](const Tensor& xt, const std::vector<Tensor>& s) {
    // The zero state: no h @ recurrent_kernel, and the forget term vanishes.
    const LSTMState next = s.empty() ? lstm_update(xt, Tensor(), true)
                                     : lstm_update(xt + matmul(s[0], r), s[1], false);
    return std::vector<Tensor>{next.h, next.c};
  };
  return layer_outputs(recur(
                           x, [&](const Tensor& in) { return matmul(in, k) + b; }, step,
                           std::move(state), 2, units_, options_.unroll, options_.go_backwards,
                           options_.return_sequences, mask, options_.checkpoint_every),
                       2, options_.return_state, carried);
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
  return call(x, RecurrentCallOptions{.initial_state = initial_state});
}

std::vector<Tensor> GRU::call(const Tensor& x, const std::vector<Tensor>& initial_state,
                              const Tensor& mask) {
  return call(x, RecurrentCallOptions{.initial_state = initial_state, .mask = mask});
}

std::vector<Tensor> GRU::call(const Tensor& x, const RecurrentCallOptions& call_options) {
  const std::vector<Tensor>& initial_state = call_options.initial_state;
  const std::int64_t features = input_size(gru_op, x, 3);
  time_steps(gru_op, *this, x, options_.unroll);
  segment_steps(gru_op, options_.checkpoint_every, options_.unroll);
  const Tensor mask = mask_of(gru_op, *this, x, call_options);
  const DType dtype = x.dtype();
  const Variable kernel =
      input_weight(gru_op, x, "kernel", {features, 3 * units_}, options_.kernel_initializer);
  const Variable recurrent =
      weight("recurrent_kernel", {units_, 3 * units_}, options_.recurrent_initializer, true, dtype);
  const Variable bias = weight("bias", {2, 3 * units_}, options_.bias_initializer, true, dtype);
  std::vector<Variable> carried;
  std::vector<Tensor> state = initial_state_of(gru_op, *this, {"h"}, initial_state,
                                               options_.stateful, x.dim(0), units_, dtype, carried);

  const std::vector<Tensor> biases = unstack(bias.value(), 0);  // input bias, recurrent bias
  const Tensor k = kernel.value(), r = recurrent.value(), input_bias = biases[0];
  const Tensor recurrent_bias = biases[1];
  const std::int64_t time = x.dim(1);
  const bool segmented =
      options_.checkpoint_every > 1 && !is_dynamic_dim(time) && time > options_.checkpoint_every;
  if (options_.fused && !options_.unroll && !mask.defined() && !segmented &&
      (dtype == DType::f32 || dtype == DType::f64))
    return layer_outputs(fused_gru(x, k, input_bias, r, recurrent_bias, std::move(state), units_,
                                   options_.go_backwards, options_.return_sequences),
                         1, options_.return_state, carried);
  const Step step = [r, recurrent_bias](const Tensor& xt, const std::vector<Tensor>& s) {
    const bool zero = s.empty();
    const std::vector<Tensor> xs = split(xt, 3, -1);
    const std::vector<Tensor> hs =
        split(zero ? recurrent_bias : matmul(s[0], r) + recurrent_bias, 3, -1);
    const Tensor update_gate = sigmoid(xs[0] + hs[0]);
    const Tensor reset_gate = sigmoid(xs[1] + hs[1]);
    const Tensor candidate = tanh(xs[2] + reset_gate * hs[2]);
    return std::vector<Tensor>{zero ? (1.0 - update_gate) * candidate
                                    : update_gate * s[0] + (1.0 - update_gate) * candidate};
  };
  return layer_outputs(recur(
                           x, [&](const Tensor& in) { return matmul(in, k) + input_bias; }, step,
                           std::move(state), 1, units_, options_.unroll, options_.go_backwards,
                           options_.return_sequences, mask, options_.checkpoint_every),
                       1, options_.return_state, carried);
}

void GRU::reset_states() { zero_state(*this, "state_h"); }

Variable GRU::kernel() const { return variable("kernel"); }
Variable GRU::recurrent_kernel() const { return variable("recurrent_kernel"); }
Variable GRU::bias() const { return variable("bias"); }

// ------------------------------------------------------------------ SimpleRNN

SimpleRNN::SimpleRNN(std::int64_t units, SimpleRNNOptions options)
    : Layer("simple_rnn", std::move(options.name)), units_(units), options_(std::move(options)) {
  check_units(rnn_op, *this, units);
}

Tensor SimpleRNN::operator()(const Tensor& x) { return call(x).front(); }

std::vector<Tensor> SimpleRNN::call(const Tensor& x, const std::vector<Tensor>& initial_state) {
  return call(x, RecurrentCallOptions{.initial_state = initial_state});
}

std::vector<Tensor> SimpleRNN::call(const Tensor& x, const std::vector<Tensor>& initial_state,
                                    const Tensor& mask) {
  return call(x, RecurrentCallOptions{.initial_state = initial_state, .mask = mask});
}

std::vector<Tensor> SimpleRNN::call(const Tensor& x, const RecurrentCallOptions& call_options) {
  const std::vector<Tensor>& initial_state = call_options.initial_state;
  const std::int64_t features = input_size(rnn_op, x, 3);
  time_steps(rnn_op, *this, x, options_.unroll);
  segment_steps(rnn_op, options_.checkpoint_every, options_.unroll);
  const Tensor mask = mask_of(rnn_op, *this, x, call_options);
  const DType dtype = x.dtype();
  const Variable kernel =
      input_weight(rnn_op, x, "kernel", {features, units_}, options_.kernel_initializer);
  const Variable recurrent =
      weight("recurrent_kernel", {units_, units_}, options_.recurrent_initializer, true, dtype);
  const Variable bias = weight("bias", {units_}, options_.bias_initializer, true, dtype);
  std::vector<Variable> carried;
  std::vector<Tensor> state = initial_state_of(rnn_op, *this, {"h"}, initial_state,
                                               options_.stateful, x.dim(0), units_, dtype, carried);

  const Tensor k = kernel.value(), b = bias.value(), r = recurrent.value();
  const Activation activation = options_.activation;
  const Step step = [r, activation](const Tensor& xt, const std::vector<Tensor>& s) {
    return std::vector<Tensor>{activate(activation, s.empty() ? xt : xt + matmul(s[0], r))};
  };
  return layer_outputs(recur(
                           x, [&](const Tensor& in) { return matmul(in, k) + b; }, step,
                           std::move(state), 1, units_, options_.unroll, options_.go_backwards,
                           options_.return_sequences, mask, options_.checkpoint_every),
                       1, options_.return_state, carried);
}

void SimpleRNN::reset_states() { zero_state(*this, "state_h"); }

Variable SimpleRNN::kernel() const { return variable("kernel"); }
Variable SimpleRNN::recurrent_kernel() const { return variable("recurrent_kernel"); }
Variable SimpleRNN::bias() const { return variable("bias"); }

}  // namespace kiln::nn

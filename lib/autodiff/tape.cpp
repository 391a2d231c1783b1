#include "autodiff/tape.hpp"

#include <algorithm>
#include <unordered_map>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"
#include "ops/rows.hpp"

namespace kiln::detail {

namespace {

// The layers below call the tape through these (see core/hooks.hpp); installed at load time.
[[maybe_unused]] const bool tape_hooks_installed = [] {
  tape_hooks.record_op = &record;
  tape_hooks.note_variable_read = &note_variable_read;
  return true;
}();

thread_local std::vector<TapeState*> tape_stack;

bool tracks(const TapeState& tape, const Tensor& t) {
  return t.defined() && tape.tracked.count(t.impl().get()) != 0;
}

void set_recording(TapeState& tape, bool on) {
  if (tape.recording == on) return;
  tape.recording = on;
  recording_tapes += on ? 1 : -1;
}

/// Adds `entry` to every recording tape that tracks one of its inputs, and tracks `outputs`
/// (the floating ones) there.
void record_entry(const TapeEntry& entry, std::span<const Tensor> outputs) {
  for (TapeState* tape : tape_stack) {
    if (!tape->recording) continue;
    if (std::none_of(entry.inputs.begin(), entry.inputs.end(),
                     [&](const Tensor& t) { return tracks(*tape, t); }))
      continue;
    for (const Tensor& o : outputs)
      if (is_floating(o.dtype())) tape->tracked.insert(o.impl().get());
    tape->entries.push_back(entry);
  }
}

/// Records a custom-gradient call on every recording tape that tracks an input.
void record_custom(std::span<const Tensor> inputs, const Tensor& output, const GradFn& rule) {
  TapeEntry e;
  e.inputs.assign(inputs.begin(), inputs.end());
  e.output = output;
  e.custom = rule;
  record_entry(e, std::span<const Tensor>(&output, 1));
}

}  // namespace

namespace {
/// Tracks `value` on `tape` as a read of v.
void track_variable_read(TapeState& tape, const Variable& v, const Tensor& value) {
  if (!is_floating(value.dtype())) return;
  if (tape.tracked.insert(value.impl().get()).second) tape.watched.push_back(value);
  auto [reads, first] = tape.variable_reads.try_emplace(v.id());
  if (first) tape.variables.push_back(v);
  for (const Tensor& t : reads->second)
    if (t.impl() == value.impl()) return;
  reads->second.push_back(value);
}
}  // namespace

PauseAllTapes::PauseAllTapes() {
  for (TapeState* t : tape_stack) {
    was_.push_back(t->recording);
    set_recording(*t, false);
  }
}

PauseAllTapes::~PauseAllTapes() {
  for (std::size_t i = 0; i < tape_stack.size() && i < was_.size(); ++i)
    set_recording(*tape_stack[i], was_[i]);
}

bool any_recording_tape_tracks(const Tensor& t) {
  return std::any_of(tape_stack.begin(), tape_stack.end(),
                     [&](const TapeState* tape) { return tape->recording && tracks(*tape, t); });
}

void note_variable_read(const Variable& v, const Tensor& value) {
  for (TapeState* tape : tape_stack)
    if (tape->recording && tape->options.watch_accessed_variables && v.trainable())
      track_variable_read(*tape, v, value);
}

void record_multi_output(std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                         const MultiGradFn& rule) {
  TapeEntry e;
  e.inputs.assign(inputs.begin(), inputs.end());
  e.outputs.assign(outputs.begin(), outputs.end());
  e.multi = rule;
  record_entry(e, outputs);
}

void record(Prim p, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor& output) {
  if (!is_floating(output.dtype()) || !is_differentiable(p)) return;
  for (TapeState* tape : tape_stack) {
    if (!tape->recording) continue;
    if (std::none_of(inputs.begin(), inputs.end(),
                     [&](const Tensor& t) { return tracks(*tape, t); }))
      continue;
    TapeEntry e;
    e.prim = p;
    e.inputs.assign(inputs.begin(), inputs.end());
    e.attrs = attrs;
    e.output = output;
    tape->tracked.insert(output.impl().get());
    tape->entries.push_back(std::move(e));
  }
}

}  // namespace kiln::detail

namespace kiln {

using detail::TapeState;

GradientTape::GradientTape() : GradientTape(TapeOptions{}) {}

GradientTape::GradientTape(TapeOptions options) : state_(std::make_unique<TapeState>()) {
  state_->options = options;
  detail::tape_stack.push_back(state_.get());
  ++detail::recording_tapes;
}

GradientTape::~GradientTape() {
  detail::set_recording(*state_, false);
  auto& stack = detail::tape_stack;
  stack.erase(std::remove(stack.begin(), stack.end(), state_.get()), stack.end());
}

void GradientTape::watch(const Tensor& t) {
  detail::check_defined(t, "GradientTape.watch");
  if (state_->released)
    detail::fail("GradientTape.watch", "the tape was released by its gradient() call");
  if (!is_floating(t.dtype()))
    detail::fail("GradientTape.watch",
                 "cannot watch a tensor of dtype {}: gradients need f32 or f64",
                 dtype_name(t.dtype()));
  if (state_->tracked.insert(t.impl().get()).second) state_->watched.push_back(t);
}

void GradientTape::watch(const Variable& v) {
  if (!v.defined()) detail::fail("GradientTape.watch", "empty Variable handle");
  if (state_->released)
    detail::fail("GradientTape.watch", "the tape was released by its gradient() call");
  if (!is_floating(v.dtype()))
    detail::fail("GradientTape.watch",
                 "cannot watch variable '{}' of dtype {}: gradients need f32 or f64", v.name(),
                 dtype_name(v.dtype()));
  const Tensor value = v.value();
  detail::track_variable_read(*state_, v, value);
}

std::vector<Variable> GradientTape::watched_variables() const { return state_->variables; }

std::vector<Tensor> GradientTape::gradient(const Tensor& target,
                                           const std::vector<Variable>& variables,
                                           const Tensor& output_gradient) {
  constexpr const char* op = "GradientTape.gradient";
  std::vector<Tensor> sources;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // per variable: first source, count
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    if (!v.defined()) detail::fail(op, "variable {} is an empty Variable handle", i);
    if (!is_floating(v.dtype()))
      detail::fail(op, "variable '{}' has dtype {}; gradients exist only for f32 and f64", v.name(),
                   dtype_name(v.dtype()));
    const std::size_t first = sources.size();
    auto found = state_->variable_reads.find(v.id());
    if (found != state_->variable_reads.end())
      sources.insert(sources.end(), found->second.begin(), found->second.end());
    ranges.emplace_back(first, sources.size() - first);
  }
  const std::vector<Tensor> grads = gradient(target, sources, output_gradient);
  std::vector<Tensor> result;
  result.reserve(variables.size());
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const auto [first, count] = ranges[i];
    if (count == 0) {
      result.push_back(zeros(variables[i].shape(), variables[i].dtype()));
      continue;
    }
    Tensor sum = grads[first];
    for (std::size_t k = 1; k < count; ++k) sum = detail::add_gradients(sum, grads[first + k]);
    result.push_back(sum);
  }
  return result;
}

void GradientTape::stop_recording() { detail::set_recording(*state_, false); }
void GradientTape::resume_recording() {
  if (!state_->released) detail::set_recording(*state_, true);
}

Tensor GradientTape::gradient(const Tensor& target, const Tensor& source,
                              const Tensor& output_gradient) {
  return gradient(target, std::vector<Tensor>{source}, output_gradient).front();
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_gradient) {
  constexpr const char* op = "GradientTape.gradient";
  TapeState& tape = *state_;
  if (tape.released)
    detail::fail(op,
                 "this tape was released by an earlier gradient() call; create it with "
                 "TapeOptions{{.persistent = true}} to call gradient() more than once");
  detail::check_defined(target, op, 0);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    detail::check_defined(sources[i], op, static_cast<int>(i) + 1);
    if (!is_floating(sources[i].dtype()))
      detail::fail(op, "source {} has dtype {}; gradients exist only for f32 and f64 sources", i,
                   dtype_name(sources[i].dtype()));
  }
  if (!is_floating(target.dtype()))
    detail::fail(op, "target has dtype {}; it must be f32 or f64", dtype_name(target.dtype()));
  Tensor seed;
  if (output_gradient.defined()) {
    if (output_gradient.shape() != target.shape() || output_gradient.dtype() != target.dtype())
      detail::fail(op, "output_gradient is {} {} but the target is {} {}",
                   dtype_name(output_gradient.dtype()), output_gradient.shape(),
                   dtype_name(target.dtype()), target.shape());
    seed = output_gradient;
  } else {
    if (target.size() != 1)
      detail::fail(op,
                   "target of shape {} is not a scalar; pass output_gradient (the vector in the "
                   "vector-Jacobian product) or reduce the target first",
                   target.shape());
    seed = ones_like(target);
  }

  // Walk back with this tape paused; outer tapes keep recording (higher-order gradients).
  const bool was_recording = tape.recording;
  detail::set_recording(tape, false);
  std::unordered_map<const detail::TensorImpl*, Tensor> grads;
  grads.emplace(target.impl().get(), seed);
  detail::WantedInputs wanted;
  try {
    for (auto it = tape.entries.rbegin(); it != tape.entries.rend(); ++it) {
      // The gradients that reach the entry's outputs (none: it contributes nothing).
      std::vector<Tensor> output_grads;
      Tensor g;
      if (it->multi) {
        bool any = false;
        for (const Tensor& o : it->outputs) {
          auto found = grads.find(o.impl().get());
          output_grads.push_back(found != grads.end() ? found->second : Tensor());
          any = any || found != grads.end();
        }
        if (!any) continue;
      } else {
        auto found = grads.find(it->output.impl().get());
        if (found == grads.end()) continue;
        g = found->second;
      }
      // Only the inputs this tape tracks get gradients; primitive rules skip the others.
      wanted.assign(it->inputs.size(), false);
      for (std::size_t i = 0; i < it->inputs.size(); ++i)
        wanted[i] = detail::tracks(tape, it->inputs[i]);
      const std::vector<Tensor> input_grads = it->multi    ? it->multi(output_grads)
                                              : it->custom ? it->custom(g)
                                                           : detail::primitive_vjp(*it, g, wanted);
      for (std::size_t i = 0; i < it->inputs.size() && i < input_grads.size(); ++i) {
        if (!wanted[i] || !input_grads[i].defined()) continue;
        const Tensor& in = it->inputs[i];
        auto [slot, inserted] = grads.try_emplace(in.impl().get(), input_grads[i]);
        if (!inserted) slot->second = detail::add_gradients(slot->second, input_grads[i]);
      }
    }
  } catch (...) {
    detail::set_recording(tape, was_recording);
    throw;
  }
  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (const Tensor& s : sources) {
    auto found = grads.find(s.impl().get());
    result.push_back(found != grads.end() ? cast(found->second, s.dtype()) : zeros_like(s));
  }
  if (tape.options.persistent) {
    detail::set_recording(tape, was_recording);
  } else {
    tape.released = true;
    tape.entries.clear();
    tape.tracked.clear();
    tape.watched.clear();
    tape.variables.clear();
    tape.variable_reads.clear();
  }
  return result;
}

Tensor stop_gradient(const Tensor& x) {
  detail::check_defined(x, "stop_gradient");
  const auto& impl = *x.impl();
  Tensor out = detail::make_view(x, impl.shape, impl.strides, impl.offset);
  // While tracing, the new handle names the same graph value (tapes tell tensors apart by
  // handle, so it is still cut from the gradient).
  out.impl()->trace_id = impl.trace_id;
  out.impl()->node = impl.node;
  return out;
}

namespace detail {

std::pair<Tensor, std::vector<Tensor>> value_and_grad_impl(const TensorFn& f,
                                                           const std::vector<std::int64_t>& argnums,
                                                           const std::vector<Tensor>& args) {
  std::vector<std::size_t> which;
  const auto n = static_cast<std::int64_t>(args.size());
  if (argnums.empty()) {
    for (std::size_t i = 0; i < args.size(); ++i) which.push_back(i);
  } else {
    for (auto a : argnums) {
      if (a < -n || a >= n) fail("value_and_grad", "argnum {} out of range for {} arguments", a, n);
      which.push_back(static_cast<std::size_t>(a < 0 ? a + n : a));
    }
  }
  GradientTape tape;
  std::vector<Tensor> sources;
  for (auto i : which) {
    tape.watch(args[i]);
    sources.push_back(args[i]);
  }
  Tensor value = f(args);
  std::vector<Tensor> grads = tape.gradient(value, sources);
  return {value, std::move(grads)};
}

}  // namespace detail

std::pair<Tensor, std::vector<Tensor>> vjp(const TensorFn& f, const std::vector<Tensor>& primals,
                                           const Tensor& cotangent) {
  GradientTape tape;
  for (const Tensor& p : primals) tape.watch(p);
  Tensor value = f(primals);
  std::vector<Tensor> grads = tape.gradient(value, primals, cotangent);
  return {value, std::move(grads)};
}

std::function<Tensor(const std::vector<Tensor>&)> custom_gradient(
    std::function<std::pair<Tensor, GradFn>(const std::vector<Tensor>&)> f) {
  return [f = std::move(f)](const std::vector<Tensor>& args) {
    std::pair<Tensor, GradFn> result;
    {
      detail::PauseAllTapes pause;
      result = f(args);
    }
    detail::check_defined(result.first, "custom_gradient");
    // A fresh handle for the output, so that tapes do not confuse it with an input f returned.
    Tensor out = stop_gradient(result.first);
    GradFn rule = std::move(result.second);
    const std::size_t n = args.size();
    detail::record_custom(args, out, [rule, n](const Tensor& g) {
      std::vector<Tensor> grads = rule(g);
      if (grads.size() != n)
        detail::fail("custom_gradient", "the gradient function returned {} gradients for {} inputs",
                     grads.size(), n);
      return grads;
    });
    return out;
  };
}

}  // namespace kiln

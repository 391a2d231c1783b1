// Recomputation: kiln::checkpoint, and the segmented form of kiln::scan that
// ScanOptions::checkpoint_every selects. Both keep a forward's inputs for the backward pass and
// recompute the rest by replaying a traced graph (never the user's C++ again). See
// include/kiln/checkpointing.hpp and docs/architecture.md, "Recomputation".

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "jit/control_flow.hpp"
#include "jit/graph.hpp"
#include "jit/trace.hpp"
#include "kiln/checkpointing.hpp"
#include "kiln/creation.hpp"
#include "kiln/function.hpp"
#include "kiln/ops.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

namespace {

using Compiled = Function<Branch>;

Tensors part(const Tensors& v, std::size_t from, std::size_t count) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(from + count)};
}

Tensors joined(Tensors a, const Tensors& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool floating(const Tensor& t) { return is_floating(t.dtype()); }

void check_results(const Tensors& results) {
  if (results.empty()) fail("checkpoint", "f returned no tensors");
  for (std::size_t i = 0; i < results.size(); ++i)
    if (!results[i].defined()) fail("checkpoint", "f returned an undefined tensor as result {}", i);
}

std::string signature_of(const Tensors& args) {
  std::string key;
  for (const Tensor& a : args) key += type_text(a) + ";";
  return key;
}

bool has_control_flow(const GraphData& g) {
  for (const Node& n : g.nodes)
    if (n.is_control_flow()) return true;
  return false;
}

}  // namespace

/// f traced at the top level for one input signature, and the compiled functions that run its
/// forward and its recomputing backward.
struct CheckpointTrace {
  std::shared_ptr<const GraphData> graph;
  std::size_t num_args = 0;
  std::vector<std::weak_ptr<VariableImpl>> variables;  // by slot
  std::vector<std::shared_ptr<VariableImpl>> owned;    // created by the trace
  std::vector<std::int32_t> floating_constants;        // node indices
  std::vector<bool> floating_results;
  std::shared_ptr<Compiled> forward;  // (args, variable values) -> results

  std::mutex mutex;
  // By which floating constants are differentiated, then which results have cotangents:
  // (args, variable values, those constants, those cotangents) -> gradients of the inputs.
  std::map<std::vector<bool>, std::shared_ptr<Compiled>> backward;

  /// f's graph replayed on (args, variable values, the constants at `constants`, in order).
  Tensors run(const Tensors& in, const std::vector<std::int32_t>& constants) const {
    ReplayBindings bindings;
    bindings.variables = part(in, num_args, variables.size());
    for (std::size_t k = 0; k < constants.size(); ++k)
      bindings.constants[constants[k]] = in[num_args + variables.size() + k];
    return replay(*graph, part(in, 0, num_args), &bindings);
  }

  std::shared_ptr<Compiled> backward_for(const std::vector<bool>& key) {
    std::lock_guard lock(mutex);
    auto& slot = backward[key];
    if (slot) return slot;
    std::vector<std::int32_t> constants;
    for (std::size_t k = 0; k < floating_constants.size(); ++k)
      if (key[k]) constants.push_back(floating_constants[k]);
    std::vector<std::size_t> with_cotangent;
    for (std::size_t k = 0; k < floating_results.size(); ++k)
      if (key[floating_constants.size() + k]) with_cotangent.push_back(k);
    const std::size_t n = num_args + variables.size() + constants.size();
    const std::size_t results = floating_results.size();
    slot = std::make_shared<Compiled>(
        Branch([this, constants, with_cotangent, n, results](const Tensors& in) {
          Tensors cotangents(results);
          for (std::size_t k = 0; k < with_cotangent.size(); ++k)
            cotangents[with_cotangent[k]] = in[n + k];
          const Branch forward_again = [&](const Tensors& a) { return run(a, constants); };
          return region_vjp(forward_again, part(in, 0, n), {}, cotangents);
        }),
        FunctionOptions{.name = "checkpoint (backward)", .max_traces = 1});
    return slot;
  }
};

struct CheckpointedImpl {
  Branch f;
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<CheckpointTrace>> cache;
  int traces = 0;

  std::shared_ptr<CheckpointTrace> trace_for(const Tensors& args) {
    const std::string key = signature_of(args);
    bool first = false;
    {
      std::lock_guard lock(mutex);
      auto found = cache.find(key);
      if (found != cache.end()) return found->second;
      first = traces == 0;
    }
    auto t = std::make_shared<CheckpointTrace>();
    t->num_args = args.size();
    {
      PauseAllTapes pause;  // the trace's symbolic values are no tape's business
      TraceContext trace("checkpoint", /*allow_variable_creation=*/first);
      trace.set_lift_constants(true);
      {
        TraceScope scope(&trace);
        Tensors params;
        for (std::size_t i = 0; i < args.size(); ++i)
          params.push_back(
              trace.add_parameter(args[i].dtype(), args[i].shape(), static_cast<std::int32_t>(i)));
        const Tensors results = f(params);
        check_results(results);
        for (std::size_t k = 0; k < results.size(); ++k) {
          const std::string what = fmt::format("result {} of f", k);
          trace.graph().outputs.push_back(trace.node_of(results[k], what.c_str()));
          t->floating_results.push_back(floating(results[k]));
        }
      }
      GraphData& g = trace.graph();
      if (!g.side_effects.empty())
        fail("checkpoint",
             "f assigns variable '{}'; a checkpointed function must not assign variables (return "
             "the new value and assign it outside)",
             g.variable_names[static_cast<std::size_t>(
                 g.nodes[static_cast<std::size_t>(g.side_effects[0])].index)]);
      t->variables = g.variables;
      for (std::size_t i = 0; i < g.nodes.size(); ++i)
        if (g.nodes[i].kind == Node::Kind::constant && floating(g.nodes[i].constant))
          t->floating_constants.push_back(static_cast<std::int32_t>(i));
      t->owned = std::move(trace.owned_variables());
      t->graph = std::make_shared<GraphData>(std::move(g));
      trace.commit();
    }
    CheckpointTrace* raw = t.get();  // the Compiled functions live inside *t
    t->forward =
        std::make_shared<Compiled>(Branch([raw](const Tensors& in) { return raw->run(in, {}); }),
                                   FunctionOptions{.name = "checkpoint", .max_traces = 1});
    std::lock_guard lock(mutex);
    auto [it, inserted] = cache.emplace(key, t);
    if (inserted) ++traces;
    return it->second;
  }
};

namespace {

/// Under a tape in a trace: f as a one-step scan over nothing, its inputs captured, so f runs
/// as a region of its own and the scan's gradient replays that region from the inputs.
Tensors traced_checkpoint(const Branch& f, const Tensors& args) {
  auto [unused, ys] = kiln::scan(
      [&](const Tensors&, const Tensors&) {
        Tensors results = f(args);
        check_results(results);
        return std::pair<Tensors, Tensors>{{}, std::move(results)};
      },
      {}, {}, {.length = 1});
  for (Tensor& y : ys) y = squeeze(y, {0});
  return ys;
}

/// Under a tape, eagerly: f's cached graph runs compiled with the tapes paused, and one tape
/// entry (inputs: args, the variable values, captured tensors a tape tracks) holds the
/// recomputing backward.
Tensors eager_checkpoint(CheckpointedImpl& impl, const Tensors& args) {
  const std::shared_ptr<CheckpointTrace> t = impl.trace_for(args);
  Tensors values;  // read while the tapes record: the reads gradients reach
  for (std::size_t slot = 0; slot < t->variables.size(); ++slot) {
    auto v = t->variables[slot].lock();
    if (!v)
      fail("checkpoint", "variable '{}' that f reads was destroyed",
           t->graph->variable_names[slot]);
    values.push_back(Variable(std::move(v)).value());
  }
  Tensors results;
  {
    PauseAllTapes pause;
    results = (*t->forward)(joined(args, values));
  }
  for (Tensor& r : results) r = stop_gradient(r);  // fresh handles, even for a returned input
  std::vector<bool> tracked;
  Tensors constants;
  for (std::int32_t node : t->floating_constants) {
    const Tensor& c = t->graph->nodes[static_cast<std::size_t>(node)].constant;
    tracked.push_back(any_recording_tape_tracks(c));
    if (tracked.back()) constants.push_back(c);
  }
  const Tensors inputs = joined(joined(args, values), constants);
  record_multi_output(inputs, results, [t, inputs, tracked](const Tensors& output_grads) {
    if (any_tape_recording() && has_control_flow(*t->graph))
      fail("checkpoint",
           "a gradient of a gradient through an eager kiln::checkpoint of a function with scan, "
           "while_loop or cond is not supported; call it inside kiln::function");
    std::vector<bool> key = tracked;
    Tensors in = inputs;
    for (std::size_t k = 0; k < output_grads.size(); ++k) {
      const bool used = output_grads[k].defined() && t->floating_results[k];
      key.push_back(used);
      if (used) in.push_back(output_grads[k]);
    }
    Tensors grads = (*t->backward_for(key))(in);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (!floating(inputs[i])) grads[i] = Tensor();
    return grads;
  });
  return results;
}

}  // namespace

}  // namespace kiln::detail

namespace kiln {

using detail::Tensors;

Checkpointed checkpoint(std::function<std::vector<Tensor>(const std::vector<Tensor>&)> f) {
  if (!f) detail::fail("checkpoint", "f is empty");
  auto impl = std::make_shared<detail::CheckpointedImpl>();
  impl->f = std::move(f);
  return Checkpointed(std::move(impl));
}

Checkpointed checkpoint(std::function<Tensor(const Tensor&)> f) {
  if (!f) detail::fail("checkpoint", "f is empty");
  return checkpoint([f = std::move(f)](const Tensors& args) {
    if (args.size() != 1)
      detail::fail("checkpoint", "f takes one tensor but was called with {}", args.size());
    return Tensors{f(args[0])};
  });
}

std::vector<Tensor> Checkpointed::operator()(const std::vector<Tensor>& args) const {
  detail::check_all_defined(args, "checkpoint", "argument");
  detail::CheckpointedImpl& impl = *impl_;
  if (!detail::any_tape_recording()) {
    Tensors results = impl.f(args);
    detail::check_results(results);
    return results;
  }
  if (detail::active_trace() != nullptr) return detail::traced_checkpoint(impl.f, args);
  return detail::eager_checkpoint(impl, args);
}

Tensor Checkpointed::operator()(const Tensor& x) const {
  Tensors results = (*this)(Tensors{x});
  if (results.size() != 1)
    detail::fail("checkpoint",
                 "f returned {} tensors; call the checkpointed function with a std::vector to "
                 "get them all",
                 results.size());
  return results[0];
}

int Checkpointed::tracing_count() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->traces;
}

}  // namespace kiln

namespace kiln::detail {

std::pair<Tensors, Tensors> segmented_scan(const ScanBody& body, const Tensors& init,
                                           const Tensors& xs, std::int64_t length,
                                           const ScanOptions& options) {
  const std::int64_t k = options.checkpoint_every, segments = length / k, rest = length % k;
  const bool reverse = options.reverse;
  const std::size_t nc = init.size();
  // Reversed, the remainder is at the front (it runs last); else at the back.
  const std::int64_t main_from = reverse ? rest : 0, main_to = main_from + segments * k;
  const std::int64_t tail_from = reverse ? 0 : main_to, tail_to = reverse ? rest : length;
  Tensors main_xs, tail_xs;
  for (const Tensor& x : xs) {
    Shape shape{segments, k};
    for (std::size_t d = 1; d < x.shape().size(); ++d) shape.push_back(x.shape()[d]);
    main_xs.push_back(reshape(slice(x, 0, main_from, main_to), shape));
    if (rest > 0) tail_xs.push_back(slice(x, 0, tail_from, tail_to));
  }
  const auto segment = [body, k, reverse, has_xs = !xs.empty()](const Tensors& carry,
                                                                const Tensors& x) {
    return kiln::scan(body, carry, x, {.length = has_xs ? -1 : k, .reverse = reverse});
  };
  const ScanOptions outer{.length = xs.empty() ? segments : -1, .reverse = reverse};
  const StepWorkStaysInside keep;  // a segment's work stacked over segments is every step's
  std::pair<Tensors, Tensors> main;
  if (active_trace() != nullptr) {
    // The outer scan keeps one carry per segment; its gradient replays the inner scan, which
    // keeps the segment's k carries.
    main = kiln::scan(segment, init, main_xs, outer);
  } else {
    // Eagerly the tape would keep every op of every step: each segment is a checkpoint.
    const Checkpointed step = checkpoint([segment, nc](const Tensors& a) {
      auto [carry, ys] = segment(part(a, 0, nc), part(a, nc, a.size() - nc));
      return joined(carry, ys);
    });
    main = kiln::scan(
        [step, nc](const Tensors& carry, const Tensors& x) {
          const Tensors r = step(joined(carry, x));
          return std::pair<Tensors, Tensors>{part(r, 0, nc), part(r, nc, r.size() - nc)};
        },
        init, main_xs, outer);
  }
  Tensors ys;
  for (const Tensor& y : main.second) {
    Shape shape{segments * k};
    for (std::size_t d = 2; d < y.shape().size(); ++d) shape.push_back(y.shape()[d]);
    ys.push_back(reshape(y, shape));
  }
  if (rest == 0) return {main.first, ys};
  auto [carry, tail_ys] =
      kiln::scan(body, main.first, tail_xs, {.length = xs.empty() ? rest : -1, .reverse = reverse});
  for (std::size_t i = 0; i < ys.size(); ++i)
    ys[i] = reverse ? concat({tail_ys[i], ys[i]}, 0) : concat({ys[i], tail_ys[i]}, 0);
  return {carry, ys};
}

}  // namespace kiln::detail

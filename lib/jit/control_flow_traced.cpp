// Traced control flow: each body is traced once into a region (a subgraph) of a scan,
// while_loop or cond node. Gradient rules replay the region graphs in the trace being recorded
// (so a body's C++ closure is never called again), under a tape, and take vector-Jacobian
// products there. See docs/architecture.md, "Control flow (regions)".

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "jit/control_flow.hpp"
#include "jit/trace.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

namespace {

bool floating(const Tensor& t) { return is_floating(t.dtype()); }

Tensors part(const Tensors& v, std::size_t from, std::size_t count) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(from + count)};
}

Tensors joined(Tensors a, const Tensors& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Types {
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  void add(DType d, const Shape& s) {
    dtypes.push_back(d);
    shapes.push_back(s);
  }
  void add(const Tensor& t) { add(t.dtype(), t.shape()); }
};

/// A traced region: its graph and the enclosing trace's tensors its captures stand for.
struct Region {
  std::shared_ptr<const GraphData> graph;
  Tensors captures;
};

TraceContext& current_trace(const char* op) {
  auto* trace = dynamic_cast<TraceContext*>(active_trace());
  if (trace == nullptr) fail(op, "internal: no trace is being recorded");
  return *trace;
}

using VariableList = std::vector<std::shared_ptr<VariableImpl>>;

/// A region just traced, before the variables its body assigned are bound (bind_variables).
struct TracedRegion {
  struct Touched {  // a variable the body read or assigned
    std::shared_ptr<VariableImpl> variable;
    std::int32_t entry = -1;        // the parameter node of its value on entry, or -1
    std::size_t entry_capture = 0;  // that parameter's position in captures
    std::int32_t final_value = -1;  // the node of its value at the end, if the body assigned it
  };
  std::shared_ptr<GraphData> graph;
  Tensors captures;
  std::size_t num_arguments = 0;  // parameters before the captures
  std::vector<Touched> variables;

  VariableList assigned() const {
    VariableList out;
    for (const auto& t : variables)
      if (t.final_value >= 0) out.push_back(t.variable);
    return out;
  }
};

/// Traces fn once on parameters of the given types into a region of `parent`; `check` sees
/// fn's results before they become the region's outputs.
TracedRegion trace_region(TraceContext& parent, const Types& params, const Branch& fn,
                          const std::function<void(const Tensors&)>& check) {
  TraceContext child(parent);
  Tensors args;
  for (std::size_t i = 0; i < params.dtypes.size(); ++i)
    args.push_back(
        child.add_parameter(params.dtypes[i], params.shapes[i], static_cast<std::int32_t>(i)));
  TracedRegion region;
  {
    TraceScope scope(&child);
    const Tensors results = fn(args);
    check(results);
    for (std::size_t k = 0; k < results.size(); ++k) {
      const std::string what = fmt::format("result {} of the body", k);
      child.graph().outputs.push_back(child.node_of(results[k], what.c_str()));
    }
    for (const auto& r : child.region_variables()) {
      TracedRegion::Touched t;
      t.variable = r.variable;
      t.entry = r.entry;
      t.entry_capture = r.entry_capture;
      if (r.assigned) {
        const std::string what =
            fmt::format("the value assigned to variable '{}'", r.variable->name);
        t.final_value = child.node_of(r.current, what.c_str());
      }
      region.variables.push_back(std::move(t));
    }
  }
  child.commit();
  region.graph = std::make_shared<GraphData>(std::move(child.graph()));
  region.captures = child.captures();
  region.num_arguments = params.dtypes.size();
  return region;
}

/// The variables any of the regions assigned, in the order first touched.
VariableList assigned_in(std::initializer_list<const TracedRegion*> regions) {
  VariableList out;
  for (const TracedRegion* r : regions)
    for (const auto& v : r->assigned())
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

/// Makes `vars` parameters [at, at + n) of the region, moving the parameters from `at` on
/// up: each variable's entry value (taken out of the captures, or a new parameter if the body
/// never read it). With `results_at`, their values at the end of the body (the entry value
/// where the body did not assign one) become the region's outputs [*results_at, ... + n).
Region bind_variables(TracedRegion r, const VariableList& vars, std::size_t at,
                      std::optional<std::size_t> results_at) {
  if (vars.empty()) return Region{std::move(r.graph), std::move(r.captures)};
  GraphData& g = *r.graph;
  const std::size_t nv = vars.size(), na = r.num_arguments;
  std::vector<std::int32_t> entry(nv, -1), final_value(nv, -1);
  std::vector<bool> moved(r.captures.size(), false);
  for (std::size_t k = 0; k < nv; ++k) {
    for (const auto& t : r.variables)
      if (t.variable == vars[k]) {
        entry[k] = t.entry;
        final_value[k] = t.final_value;
        if (t.entry >= 0) moved[t.entry_capture] = true;
      }
    if (entry[k] < 0) {
      Node n;
      n.kind = Node::Kind::parameter;
      n.dtype = vars[k]->dtype;
      n.shape = vars[k]->shape;
      g.nodes.push_back(std::move(n));
      ++g.num_parameters;
      entry[k] = static_cast<std::int32_t>(g.nodes.size() - 1);
    }
  }
  std::vector<std::size_t> position(r.captures.size());  // old capture -> new one
  Tensors captures;
  for (std::size_t p = 0; p < r.captures.size(); ++p)
    if (!moved[p]) {
      position[p] = captures.size();
      captures.push_back(r.captures[p]);
    }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind != Node::Kind::parameter) continue;
    const auto index = static_cast<std::size_t>(n.index);
    if (std::find(entry.begin(), entry.end(), static_cast<std::int32_t>(i)) != entry.end())
      continue;
    n.index = static_cast<std::int32_t>(index < at   ? index
                                        : index < na ? index + nv
                                                     : na + nv + position[index - na]);
  }
  for (std::size_t k = 0; k < nv; ++k)
    g.nodes[static_cast<std::size_t>(entry[k])].index = static_cast<std::int32_t>(at + k);
  if (results_at)
    for (std::size_t k = 0; k < nv; ++k)
      g.outputs.insert(g.outputs.begin() + static_cast<std::ptrdiff_t>(*results_at + k),
                       final_value[k] >= 0 ? final_value[k] : entry[k]);
  return Region{std::move(r.graph), std::move(captures)};
}

/// A region whose body may not assign variables (a gradient rule's, or a while_loop's cond).
Region unbound(TracedRegion r, const char* op, const char* body) {
  const VariableList assigned = r.assigned();
  if (!assigned.empty())
    fail(op, "{} assigns variable '{}'; it may only read variables", body, assigned[0]->name);
  return bind_variables(std::move(r), {}, 0, std::nullopt);
}

/// Aliases of the variables' values in `trace` (a scan's carries or a cond's operands).
Tensors entry_values(TraceContext& trace, const VariableList& vars) {
  Tensors out;
  for (const auto& v : vars) out.push_back(trace.variable_alias(v));
  return out;
}

/// Assigns each variable the value the op computed for it, in `trace`.
void assign_results(TraceContext& trace, const VariableList& vars, const Tensors& values) {
  for (std::size_t k = 0; k < vars.size(); ++k) trace.assign_variable(vars[k], values[k]);
}

void add_inputs(TraceContext& trace, Node& node, const Tensors& ts, const char* what) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::string text = fmt::format("{} {}", what, i);
    node.inputs.push_back(trace.node_of(ts[i], text.c_str()));
  }
}

const Node& output_node(const GraphData& g, std::size_t k) {
  return g.nodes[static_cast<std::size_t>(g.outputs[k])];
}

}  // namespace

Tensors region_vjp(const Branch& fn, const Tensors& args, const Tensors& captures,
                   const Tensors& cotangents) {
  auto* region = dynamic_cast<TraceContext*>(active_trace());
  GradientTape tape;
  Tensors uses = args;  // args, then per capture: the outer tensor and the region's tensor
  for (const Tensor& p : captures) {
    uses.push_back(p);
    uses.push_back(region != nullptr ? region->captured(p, "a capture") : p);
  }
  Tensors sources;
  for (const Tensor& t : uses)
    if (floating(t)) {
      tape.watch(t);
      sources.push_back(t);
    }
  const Tensors out = fn(args);
  Tensor target;
  for (std::size_t k = 0; k < out.size() && k < cotangents.size(); ++k) {
    if (!cotangents[k].defined() || !floating(out[k])) continue;
    Tensor term = sum(out[k] * cotangents[k]);
    target = target.defined() ? target + term : term;
  }
  Tensors grads;
  if (target.defined()) grads = tape.gradient(target, sources);
  std::size_t next = 0;
  Tensors per_use;
  for (const Tensor& t : uses)
    per_use.push_back(floating(t) && target.defined() ? grads[next++] : zeros_like(t));
  Tensors result = part(per_use, 0, args.size());
  for (std::size_t k = 0; k < captures.size(); ++k) {
    const Tensor& a = per_use[args.size() + 2 * k];
    const Tensor& b = per_use[args.size() + 2 * k + 1];
    result.push_back(floating(captures[k]) ? a + b : a);
  }
  return result;
}

namespace {

std::pair<Tensors, Tensors> add_scan(TraceContext& trace,
                                     const std::shared_ptr<const GraphData>& body, std::size_t nc,
                                     const Tensors& init, const Tensors& xs,
                                     const Tensors& captures, std::int64_t length, bool reverse,
                                     bool save_residuals, Tensors* residuals_out = nullptr);

/// The gradient rule of a traced scan (one multi-output tape entry): a scan the other way whose
/// body replays the forward body at each step's saved carry and takes the vector-Jacobian
/// product there. The saved carries (the carry entering each step, hidden outputs of the
/// forward scan) are all it keeps: one carry per step.
struct ScanGradient {
  std::shared_ptr<const GraphData> body;  // outputs: nc carries, then the ys
  Tensors init, xs, captures, residuals, carry_out;
  bool reverse = false;

  Tensors operator()(const Tensors& output_grads) const {
    const std::size_t nc = init.size(), nx = xs.size(), ncap = captures.size();
    const std::size_t ny = output_grads.size() - nc;
    Tensors carry_b;  // d carry, then d capture accumulators
    for (std::size_t i = 0; i < nc; ++i)
      carry_b.push_back(output_grads[i].defined() && floating(init[i]) ? output_grads[i]
                                                                       : zeros_like(carry_out[i]));
    for (const Tensor& c : captures) carry_b.push_back(zeros_like(c));
    Tensors xs_b = joined(xs, residuals);  // x, the saved carry, then d ys (where defined)
    std::vector<std::size_t> dy_index;
    for (std::size_t j = 0; j < ny; ++j)
      if (output_grads[nc + j].defined()) {
        dy_index.push_back(j);
        xs_b.push_back(output_grads[nc + j]);
      }
    const ScanBody backward = [body = body, captures = captures, nc, nx, ny, ncap, dy_index](
                                  const Tensors& cb, const Tensors& xb) {
      const Tensors x = part(xb, 0, nx), c = part(xb, nx, nc);
      Tensors cot(nc + ny);
      for (std::size_t i = 0; i < nc; ++i) cot[i] = cb[i];
      for (std::size_t k = 0; k < dy_index.size(); ++k) cot[nc + dy_index[k]] = xb[nx + nc + k];
      const Branch forward = [body, captures](const Tensors& a) {
        return replay(*body, joined(a, captures));
      };
      const Tensors g = region_vjp(forward, joined(c, x), captures, cot);
      Tensors carry;
      for (std::size_t i = 0; i < nc; ++i) carry.push_back(floating(c[i]) ? g[i] : cb[i]);
      for (std::size_t k = 0; k < ncap; ++k)
        carry.push_back(floating(captures[k]) ? cb[nc + k] + g[nc + nx + k] : cb[nc + k]);
      return std::pair<Tensors, Tensors>{carry, part(g, nc, nx)};
    };
    // Per step it recomputes the forward step and its vjp: stacking that work over all steps
    // would hold a value per step the forward never kept.
    const StepWorkStaysInside keep;
    auto [final_b, dxs] = kiln::scan(backward, carry_b, xs_b, {.reverse = !reverse});
    Tensors grads;
    for (std::size_t i = 0; i < nc; ++i) grads.push_back(floating(init[i]) ? final_b[i] : Tensor());
    for (std::size_t i = 0; i < nx; ++i) grads.push_back(floating(xs[i]) ? dxs[i] : Tensor());
    for (std::size_t k = 0; k < ncap; ++k)
      grads.push_back(floating(captures[k]) ? final_b[nc + k] : Tensor());
    return grads;
  }
};

/// Adds a scan node over region `body` (outputs: nc carries, then ys) to `trace`; returns the
/// carries and the stacked ys. With save_residuals the region also outputs its carry
/// parameters (stacked: the carry entering each step) and, if a tape records, the node is
/// recorded with its ScanGradient.
std::pair<Tensors, Tensors> add_scan(TraceContext& trace,
                                     const std::shared_ptr<const GraphData>& body, std::size_t nc,
                                     const Tensors& init, const Tensors& xs,
                                     const Tensors& captures, std::int64_t length, bool reverse,
                                     bool save_residuals, Tensors* residuals_out) {
  std::shared_ptr<const GraphData> region = body;
  if (save_residuals) {
    auto with = std::make_shared<GraphData>(*body);
    for (std::size_t k = 0; k < nc; ++k)
      for (std::size_t i = 0; i < with->nodes.size(); ++i)
        if (with->nodes[i].kind == Node::Kind::parameter &&
            with->nodes[i].index == static_cast<std::int32_t>(k))
          with->outputs.push_back(static_cast<std::int32_t>(i));
    region = std::move(with);
  }
  const std::int64_t steps = xs.empty() ? length : xs[0].shape()[0];
  Types results;
  for (std::size_t k = 0; k < region->outputs.size(); ++k) {
    const Node& out = output_node(*region, k);
    if (k < nc) {
      results.add(out.dtype, out.shape);
      continue;
    }
    Shape stacked{steps};
    for (auto d : out.shape) stacked.push_back(d);
    results.add(out.dtype, stacked);
  }
  Node node;
  node.kind = Node::Kind::scan;
  add_inputs(trace, node, init, "init");
  add_inputs(trace, node, xs, "xs");
  add_inputs(trace, node, captures, "capture");
  node.attrs.ints = {static_cast<std::int64_t>(nc), static_cast<std::int64_t>(xs.size()),
                     reverse ? 1 : 0, save_residuals ? static_cast<std::int64_t>(nc) : 0,
                     StepWorkStaysInside::active() ? 1 : 0};
  node.attrs.axis = xs.empty() ? length : -1;
  node.regions = {region};
  const Tensors out = trace.add_control_flow(std::move(node), results.dtypes, results.shapes);
  const std::size_t ny = body->outputs.size() - nc;
  Tensors carry = part(out, 0, nc), ys = part(out, nc, ny);
  Tensors residuals = save_residuals ? part(out, nc + ny, nc) : Tensors{};
  if (save_residuals && any_tape_recording()) {
    ScanGradient rule{body, init, xs, captures, residuals, carry, reverse};
    record_multi_output(joined(joined(init, xs), captures), joined(carry, ys), rule);
  }
  if (residuals_out != nullptr) *residuals_out = residuals;
  return {carry, ys};
}

Tensors add_cond(TraceContext& trace, const Tensor& pred, const Region& on_true,
                 const Region& on_false, const Tensors& operands);

/// The gradient rule of a traced cond: a cond on the same pred whose branches replay their
/// forward branch and take its vector-Jacobian product (zeros for the other's captures).
struct CondGradient {
  Tensor pred;
  Region on_true, on_false;
  Tensors operands, results;

  Tensors operator()(const Tensors& output_grads) const {
    Tensors args = operands;  // operands, then the results' gradients
    std::vector<std::size_t> with_grad;
    for (std::size_t k = 0; k < output_grads.size(); ++k)
      if (output_grads[k].defined() && floating(results[k])) {
        with_grad.push_back(k);
        args.push_back(output_grads[k]);
      }
    const std::size_t no = operands.size(), nr = results.size();
    const auto branch = [&](bool first) -> Branch {
      return [no, nr, with_grad, first, t = on_true, f = on_false](const Tensors& a) {
        const Region& own = first ? t : f;
        const Region& other = first ? f : t;
        Tensors cot(nr);
        for (std::size_t i = 0; i < with_grad.size(); ++i) cot[with_grad[i]] = a[no + i];
        const Branch forward = [own](const Tensors& ops) {
          return replay(*own.graph, joined(ops, own.captures));
        };
        const Tensors g = region_vjp(forward, part(a, 0, no), own.captures, cot);
        Tensors other_d;
        for (const Tensor& c : other.captures) other_d.push_back(zeros_like(c));
        const Tensors own_d = part(g, no, own.captures.size());
        Tensors d = part(g, 0, no);
        d = joined(d, first ? own_d : other_d);
        return joined(d, first ? other_d : own_d);
      };
    };
    Types params;
    for (const Tensor& a : args) params.add(a);
    TraceContext& trace = current_trace("cond");
    const Region t = unbound(trace_region(trace, params, branch(true), [](const Tensors&) {}),
                             "cond", "a gradient");
    const Region f = unbound(trace_region(trace, params, branch(false), [](const Tensors&) {}),
                             "cond", "a gradient");
    Tensors g = add_cond(trace, pred, t, f, args);
    const Tensors inputs = joined(joined(operands, on_true.captures), on_false.captures);
    for (std::size_t i = 0; i < g.size(); ++i)
      if (!floating(inputs[i])) g[i] = Tensor();
    return g;
  }
};

/// Adds a cond node to `trace`; records its CondGradient if a tape records.
Tensors add_cond(TraceContext& trace, const Tensor& pred, const Region& on_true,
                 const Region& on_false, const Tensors& operands) {
  Node node;
  node.kind = Node::Kind::cond;
  node.inputs.push_back(trace.node_of(pred, "pred"));
  add_inputs(trace, node, operands, "operand");
  add_inputs(trace, node, on_true.captures, "capture");
  add_inputs(trace, node, on_false.captures, "capture");
  node.attrs.ints = {static_cast<std::int64_t>(operands.size()),
                     static_cast<std::int64_t>(on_true.captures.size()),
                     static_cast<std::int64_t>(on_false.captures.size())};
  node.regions = {on_true.graph, on_false.graph};
  Types results;
  for (std::size_t k = 0; k < on_true.graph->outputs.size(); ++k) {
    const Node& out = output_node(*on_true.graph, k);
    results.add(out.dtype, out.shape);
  }
  const Tensors out = trace.add_control_flow(std::move(node), results.dtypes, results.shapes);
  if (any_tape_recording())
    record_multi_output(joined(joined(operands, on_true.captures), on_false.captures), out,
                        CondGradient{pred, on_true, on_false, operands, out});
  return out;
}

/// Replays control-flow node `node` of a region graph on `inputs` in the trace being recorded.
Tensors replay_control_flow(const Node& node, const Tensors& inputs) {
  TraceContext& trace = current_trace("scan");
  const auto& ints = node.attrs.ints;
  switch (node.kind) {
    case Node::Kind::scan: {
      const auto nc = static_cast<std::size_t>(ints[0]), nx = static_cast<std::size_t>(ints[1]);
      const auto saved = static_cast<std::size_t>(ints[3]);
      auto body = std::make_shared<GraphData>(*node.regions[0]);  // without the saved carries
      body->outputs.resize(body->outputs.size() - saved);
      Tensors residuals;
      auto [carry, ys] = add_scan(trace, body, nc, part(inputs, 0, nc), part(inputs, nc, nx),
                                  part(inputs, nc + nx, inputs.size() - nc - nx), node.attrs.axis,
                                  ints[2] != 0, saved > 0 || any_tape_recording(), &residuals);
      Tensors results = joined(carry, ys);
      if (saved > 0) results = joined(results, residuals);
      return results;
    }
    case Node::Kind::cond: {
      const auto no = static_cast<std::size_t>(ints[0]), nt = static_cast<std::size_t>(ints[1]);
      const Region t{node.regions[0], part(inputs, 1 + no, nt)};
      const Region f{node.regions[1], part(inputs, 1 + no + nt, inputs.size() - 1 - no - nt)};
      return add_cond(trace, inputs[0], t, f, part(inputs, 1, no));
    }
    default: {  // while_loop: made only where no tape recorded, so it has no gradient rule
      if (any_tape_recording())
        fail("while_loop",
             "a gradient through a while_loop inside kiln::function needs "
             "options.maximum_iterations");
      Node copy = node;
      copy.inputs.clear();
      add_inputs(trace, copy, inputs, "input");
      Types results;
      for (std::size_t k = 0; k < node.regions[1]->outputs.size(); ++k) {
        const Node& out = output_node(*node.regions[1], k);
        results.add(out.dtype, out.shape);
      }
      return trace.add_control_flow(std::move(copy), results.dtypes, results.shapes);
    }
  }
}

}  // namespace

Tensors replay(const GraphData& g, const Tensors& args, const ReplayBindings* bindings) {
  Tensors values(g.nodes.size());
  std::vector<Tensors> results(g.nodes.size());  // control-flow nodes' results
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Tensors ins;
    for (auto in : n.inputs) ins.push_back(values[static_cast<std::size_t>(in)]);
    switch (n.kind) {
      case Node::Kind::parameter:
        values[i] = args[static_cast<std::size_t>(n.index)];
        break;
      case Node::Kind::constant:
        values[i] = n.constant;
        if (bindings != nullptr) {
          auto bound = bindings->constants.find(static_cast<std::int32_t>(i));
          if (bound != bindings->constants.end()) values[i] = bound->second;
        }
        break;
      case Node::Kind::primitive:
        values[i] = apply(n.prim, std::span<const Tensor>(ins), n.attrs, n.dtype, n.shape);
        break;
      case Node::Kind::output:
        values[i] =
            results[static_cast<std::size_t>(n.inputs[0])][static_cast<std::size_t>(n.index)];
        break;
      case Node::Kind::scan:
      case Node::Kind::while_loop:
      case Node::Kind::cond:
        results[i] = replay_control_flow(n, ins);
        break;
      case Node::Kind::variable:
        if (bindings != nullptr) {
          values[i] = bindings->variables.at(static_cast<std::size_t>(n.index));
          break;
        }
        [[fallthrough]];
      case Node::Kind::assign:
      case Node::Kind::assign_rows:
      case Node::Kind::fused:
        fail("gradient", "internal: a region graph has a {} node",
             n.kind == Node::Kind::fused ? "fused" : "variable");
    }
  }
  Tensors out;
  for (auto o : g.outputs) out.push_back(values[static_cast<std::size_t>(o)]);
  return out;
}

std::pair<Tensors, Tensors> traced_scan(const ScanBody& body, const Tensors& init,
                                        const Tensors& xs, std::int64_t length, bool reverse) {
  TraceContext& trace = current_trace("scan");
  Types params;
  for (const Tensor& c : init) params.add(c);
  for (const Tensor& x : xs) {
    Shape slice;
    for (std::size_t d = 1; d < x.shape().size(); ++d) slice.push_back(x.shape()[d]);
    params.add(x.dtype(), slice);
  }
  const std::size_t nc = init.size();
  TracedRegion traced = trace_region(
      trace, params,
      [&](const Tensors& args) {
        auto [next, y] = body(part(args, 0, nc), part(args, nc, args.size() - nc));
        check_same_types(init, next, "scan", "carry", "the body");
        for (std::size_t i = 0; i < y.size(); ++i)
          if (!y[i].defined()) fail("scan", "the body returned an undefined tensor as y {}", i);
        return joined(next, y);
      },
      [](const Tensors&) {});
  // Variables the body assigns become carries after the user's (their value on entry to each
  // step in, their value at its end out), assigned once after the loop.
  const VariableList vars = traced.assigned();
  const Region region = bind_variables(std::move(traced), vars, nc, nc);
  auto [carry, ys] =
      add_scan(trace, region.graph, nc + vars.size(), joined(init, entry_values(trace, vars)), xs,
               region.captures, length, reverse, any_tape_recording());
  assign_results(trace, vars, part(carry, nc, vars.size()));
  carry.resize(nc);
  return {carry, ys};
}

Tensors traced_while_loop(const std::function<Tensor(const Tensors&)>& cond_fn, const Branch& body,
                          const Tensors& init, std::int64_t maximum_iterations) {
  if (any_tape_recording()) {
    // Differentiable form: a scan of maximum_iterations steps whose body runs the loop body
    // (through cond) only while the loop is still going.
    if (maximum_iterations < 0)
      fail("while_loop",
           "a gradient through a while_loop inside kiln::function needs "
           "options.maximum_iterations (the loop then keeps one carry per iteration for the "
           "backward pass)");
    const std::size_t nv = init.size();
    Tensors carry = init;
    carry.push_back(full(Shape{}, 1.0, DType::boolean));  // still looping
    auto [final_carry, unused] = kiln::scan(
        [&](const Tensors& c, const Tensors&) {
          const Tensors values = part(c, 0, nv);
          const Tensor go = logical_and(c[nv], cond_fn(values));
          Tensors next = kiln::cond(
              go,
              [&](const Tensors& v) {
                Tensors r = body(v);
                check_same_types(v, r, "while_loop", "value", "the body");
                return r;
              },
              [](const Tensors& v) { return v; }, values);
          next.push_back(go);
          return std::pair<Tensors, Tensors>{next, {}};
        },
        carry, {}, {.length = maximum_iterations});
    final_carry.pop_back();
    return final_carry;
  }
  TraceContext& trace = current_trace("while_loop");
  Types params;
  for (const Tensor& v : init) params.add(v);
  TracedRegion cond_traced = trace_region(
      trace, params, [&](const Tensors& args) { return Tensors{cond_fn(args)}; },
      [](const Tensors& r) {
        if (!r[0].defined()) fail("while_loop", "the result of cond is an undefined tensor");
        if (r[0].dtype() != DType::boolean || r[0].ndim() != 0)
          fail("while_loop", "the result of cond must be a boolean scalar, got {}",
               type_text(r[0]));
      });
  TracedRegion traced_body = trace_region(trace, params, body, [&](const Tensors& r) {
    check_same_types(init, r, "while_loop", "value", "the body");
  });
  // Variables the body assigns become loop values after the user's; cond sees them too.
  if (const VariableList in_cond = cond_traced.assigned(); !in_cond.empty())
    fail("while_loop", "cond assigns variable '{}'; it may only read variables", in_cond[0]->name);
  const std::size_t nv = init.size();
  const VariableList vars = traced_body.assigned();
  const Region cond_region = bind_variables(std::move(cond_traced), vars, nv, std::nullopt);
  const Region body_region = bind_variables(std::move(traced_body), vars, nv, nv);
  for (const auto& v : vars) params.add(v->dtype, v->shape);
  Node node;
  node.kind = Node::Kind::while_loop;
  add_inputs(trace, node, joined(init, entry_values(trace, vars)), "init");
  add_inputs(trace, node, cond_region.captures, "capture");
  add_inputs(trace, node, body_region.captures, "capture");
  node.attrs.ints = {static_cast<std::int64_t>(nv + vars.size()),
                     static_cast<std::int64_t>(cond_region.captures.size()),
                     static_cast<std::int64_t>(body_region.captures.size()), maximum_iterations};
  node.regions = {cond_region.graph, body_region.graph};
  Tensors values = trace.add_control_flow(std::move(node), params.dtypes, params.shapes);
  assign_results(trace, vars, part(values, nv, vars.size()));
  values.resize(nv);
  return values;
}

Tensors traced_cond(const Tensor& pred, const Branch& true_fn, const Branch& false_fn,
                    const Tensors& operands) {
  if (!pred.impl()->is_symbolic())  // known while tracing: only that branch is traced
    return truth(pred, "cond", "pred") ? true_fn(operands) : false_fn(operands);
  TraceContext& trace = current_trace("cond");
  Types params;
  for (const Tensor& v : operands) params.add(v);
  Tensors true_results;
  TracedRegion traced_true = trace_region(trace, params, true_fn, [&](const Tensors& r) {
    check_all_defined(r, "cond", "result of true_fn");
    true_results = r;
  });
  TracedRegion traced_false = trace_region(trace, params, false_fn, [&](const Tensors& r) {
    check_same_types(true_results, r, "cond", "result", "false_fn (against true_fn)");
  });
  // Variables either branch assigns become operands and results after the user's; a branch
  // that does not assign one passes its value through.
  const std::size_t no = operands.size(), nr = true_results.size();
  const VariableList vars = assigned_in({&traced_true, &traced_false});
  const Region on_true = bind_variables(std::move(traced_true), vars, no, nr);
  const Region on_false = bind_variables(std::move(traced_false), vars, no, nr);
  Tensors results =
      add_cond(trace, pred, on_true, on_false, joined(operands, entry_values(trace, vars)));
  assign_results(trace, vars, part(results, nr, vars.size()));
  results.resize(nr);
  return results;
}

}  // namespace kiln::detail

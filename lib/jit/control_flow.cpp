// scan, while_loop and cond: eager loops when nothing traces, region nodes (bodies traced once
// into subgraphs) inside a traced function. See include/kiln/control_flow.hpp.

#include "kiln/control_flow.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "jit/trace.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::fail;

std::string type_text(const Tensor& t) {
  return fmt::format("{} {}", dtype_name(t.dtype()), t.shape().to_string());
}

void check_all_defined(const std::vector<Tensor>& ts, const char* op, const char* what) {
  for (std::size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].defined()) fail(op, "{} {} is an undefined tensor", what, i);
}

/// Fails unless `now` has the shapes and dtypes of `before` (the loop's carry or a branch's
/// results).
void check_same_types(const std::vector<Tensor>& before, const std::vector<Tensor>& now,
                      const char* op, const char* what, const char* who) {
  if (now.size() != before.size())
    fail(op, "{} returned {} {}s, expected {}", who, now.size(), what, before.size());
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (!now[i].defined()) fail(op, "{} returned an undefined tensor as {} {}", who, what, i);
    if (now[i].dtype() != before[i].dtype() || now[i].shape() != before[i].shape())
      fail(op, "{} changed {} {} from {} to {}", who, what, i, type_text(before[i]),
           type_text(now[i]));
  }
}

/// A boolean scalar's value (pred of cond, the result of while_loop's cond).
bool truth(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) fail(op, "{} is an undefined tensor", what);
  if (t.dtype() != DType::boolean || t.size() != 1 || t.ndim() != 0)
    fail(op, "{} must be a boolean scalar, got {}", what, type_text(t));
  return t.item<bool>();
}

/// The number of steps of a scan over xs, checking that every x has it as its leading dim.
std::int64_t scan_length(const std::vector<Tensor>& xs, const ScanOptions& options) {
  if (xs.empty()) {
    if (options.length < 0) fail("scan", "needs options.length when xs is empty");
    return options.length;
  }
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i].ndim() == 0) fail("scan", "xs {} is a scalar; scan runs over the leading axis", i);
  const std::int64_t n = xs[0].shape()[0];
  for (std::size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape()[0] != n)
      fail("scan", "xs {} has {} steps along its leading axis, but xs 0 has {}", i,
           detail::dim_text(xs[i].shape()[0]), detail::dim_text(n));
  if (options.length >= 0 && options.length != n)
    fail("scan", "options.length is {} but xs have {} steps", options.length, detail::dim_text(n));
  return n;
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> eager_scan(const ScanBody& body,
                                                               const std::vector<Tensor>& init,
                                                               const std::vector<Tensor>& xs,
                                                               std::int64_t length, bool reverse) {
  std::vector<Tensor> carry = init;
  std::vector<std::vector<Tensor>> ys;  // per output, per step
  for (std::int64_t k = 0; k < length; ++k) {
    const std::int64_t t = reverse ? length - 1 - k : k;
    std::vector<Tensor> x;
    x.reserve(xs.size());
    for (const Tensor& s : xs) x.push_back(squeeze(slice(s, 0, t, t + 1), {0}));
    auto [next, y] = body(carry, x);
    check_same_types(carry, next, "scan", "carry", "the body");
    if (k == 0) {
      ys.resize(y.size());
      for (std::size_t i = 0; i < y.size(); ++i)
        if (!y[i].defined()) fail("scan", "the body returned an undefined tensor as y {}", i);
    } else if (y.size() != ys.size()) {
      fail("scan", "the body returned {} ys at step {}, {} at the first step", y.size(), t,
           ys.size());
    }
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (k > 0 && (y[i].dtype() != ys[i][0].dtype() || y[i].shape() != ys[i][0].shape()))
        fail("scan", "the body changed y {} from {} to {} at step {}", i, type_text(ys[i][0]),
             type_text(y[i]), t);
      ys[i].push_back(y[i]);
    }
    carry = std::move(next);
  }
  std::vector<Tensor> stacked;
  for (auto& per_step : ys) {
    if (reverse) std::reverse(per_step.begin(), per_step.end());
    stacked.push_back(stack(per_step, 0));
  }
  return {carry, stacked};
}

}  // namespace

// ------------------------------------------------------------------ traced: region nodes

namespace detail {

namespace {

struct Types {
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  void add(DType d, const Shape& s) {
    dtypes.push_back(d);
    shapes.push_back(s);
  }
  void add(const Tensor& t) { add(t.dtype(), t.shape()); }
};

/// One traced region: its graph and the parent tensors its capture parameters stand for.
struct Region {
  std::shared_ptr<GraphData> graph;
  std::vector<Tensor> captures;
};

TraceContext& current_trace(const char* op, bool differentiable = false) {
  auto* trace = dynamic_cast<TraceContext*>(active_trace());
  if (trace == nullptr) fail(op, "internal: no trace is being recorded");
  if (!differentiable && any_tape_recording())
    fail(op,
         "gradients through a {} inside kiln::function are not supported yet; record the tape "
         "outside the function, or run it eagerly (kiln::run_functions_eagerly)",
         op);
  return *trace;
}

/// Traces fn once on parameters of the given types into a region of `parent`; its results are
/// checked by `check` and become the region's outputs.
Region trace_region(TraceContext& parent, const Types& params,
                    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                    const std::function<void(const std::vector<Tensor>&)>& check) {
  TraceContext child(parent);
  std::vector<Tensor> args;
  for (std::size_t i = 0; i < params.dtypes.size(); ++i)
    args.push_back(
        child.add_parameter(params.dtypes[i], params.shapes[i], static_cast<std::int32_t>(i)));
  std::vector<Tensor> results;
  {
    TraceScope scope(&child);
    results = fn(args);
    check(results);
    for (std::size_t k = 0; k < results.size(); ++k) {
      const std::string what = fmt::format("result {} of the body", k);
      child.graph().outputs.push_back(child.node_of(results[k], what.c_str()));
    }
  }
  child.commit();
  Region region{std::make_shared<GraphData>(std::move(child.graph())), child.captures()};
  return region;
}

void add_inputs(TraceContext& trace, Node& node, const std::vector<Tensor>& ts, const char* what) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::string text = fmt::format("{} {}", what, i);
    node.inputs.push_back(trace.node_of(ts[i], text.c_str()));
  }
}

}  // namespace

/// The gradient rule of a traced scan (recorded on tapes as one multi-output entry): a scan in
/// the other direction whose body re-runs the forward body at each step's saved carry under a
/// tape and takes the vector-Jacobian product there. Residuals are the carries entering each
/// step (stacked by the forward scan as hidden outputs), so memory is one carry per step.
struct ScanGradient {
  ScanBody body;
  std::vector<Tensor> init, xs, captures, residuals, carry_out;
  bool reverse = false;

  static bool floating(const Tensor& t) { return is_floating(t.dtype()); }

  std::vector<Tensor> operator()(const std::vector<Tensor>& output_grads) const {
    const std::size_t nc = init.size(), nx = xs.size(), ncap = captures.size();
    const std::size_t ny = output_grads.size() - nc;
    std::vector<Tensor> carry_b;  // d carry (per carry), then d capture accumulators
    for (std::size_t i = 0; i < nc; ++i)
      carry_b.push_back(output_grads[i].defined() && floating(init[i]) ? output_grads[i]
                                                                       : zeros_like(carry_out[i]));
    for (const Tensor& c : captures) carry_b.push_back(zeros_like(c));
    std::vector<Tensor> xs_b = xs;  // x, then the saved carries, then d ys (where defined)
    xs_b.insert(xs_b.end(), residuals.begin(), residuals.end());
    std::vector<std::size_t> dy_index;  // which ys have a gradient
    for (std::size_t j = 0; j < ny; ++j)
      if (output_grads[nc + j].defined()) {
        dy_index.push_back(j);
        xs_b.push_back(output_grads[nc + j]);
      }
    // By value: an outer tape may record this backward scan and run it again later.
    const ScanBody backward = [body = body, captures = captures, nc, nx, ncap, dy_index](
                                  const std::vector<Tensor>& cb, const std::vector<Tensor>& xb) {
      auto* region = dynamic_cast<TraceContext*>(active_trace());
      std::vector<Tensor> x(xb.begin(), xb.begin() + static_cast<std::ptrdiff_t>(nx));
      std::vector<Tensor> c(xb.begin() + static_cast<std::ptrdiff_t>(nx),
                            xb.begin() + static_cast<std::ptrdiff_t>(nx + nc));
      GradientTape tape;
      std::vector<Tensor> sources;
      for (const Tensor& t : c)
        if (floating(t)) tape.watch(t);
      for (const Tensor& t : x)
        if (floating(t)) tape.watch(t);
      std::vector<Tensor> capture_uses;  // per capture: the outer tensor and its region tensor
      for (const Tensor& p : captures) {
        capture_uses.push_back(p);
        capture_uses.push_back(region != nullptr ? region->captured(p, "a capture") : p);
        for (std::size_t k = capture_uses.size() - 2; k < capture_uses.size(); ++k)
          if (floating(capture_uses[k])) tape.watch(capture_uses[k]);
      }
      auto [c_next, y] = body(c, x);
      Tensor target;
      const auto add_term = [&](const Tensor& v, const Tensor& g) {
        if (!floating(v)) return;
        Tensor term = sum(v * g);
        target = target.defined() ? target + term : term;
      };
      for (std::size_t i = 0; i < nc; ++i) add_term(c_next[i], cb[i]);
      for (std::size_t k = 0; k < dy_index.size(); ++k) add_term(y[dy_index[k]], xb[nx + nc + k]);
      std::vector<Tensor> all = c;
      all.insert(all.end(), x.begin(), x.end());
      all.insert(all.end(), capture_uses.begin(), capture_uses.end());
      for (const Tensor& t : all)
        if (floating(t)) sources.push_back(t);
      std::vector<Tensor> grads;
      if (target.defined()) grads = tape.gradient(target, sources);
      std::size_t next = 0;
      const auto grad_of = [&](const Tensor& t) -> Tensor {
        if (!floating(t)) return zeros_like(t);
        return target.defined() ? grads[next++] : zeros_like(t);
      };
      std::vector<Tensor> carry;
      for (std::size_t i = 0; i < nc; ++i) {
        Tensor g = grad_of(c[i]);
        carry.push_back(floating(c[i]) ? g : cb[i]);
      }
      std::vector<Tensor> dx;
      for (const Tensor& t : x) dx.push_back(grad_of(t));
      for (std::size_t k = 0; k < ncap; ++k) {
        Tensor g = grad_of(capture_uses[2 * k]);
        Tensor h = grad_of(capture_uses[2 * k + 1]);
        carry.push_back(floating(captures[k]) ? cb[nc + k] + g + h : cb[nc + k]);
      }
      return std::pair<std::vector<Tensor>, std::vector<Tensor>>{carry, dx};
    };
    auto [final_b, dxs] = kiln::scan(backward, carry_b, xs_b, {.reverse = !reverse});
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < nc; ++i) grads.push_back(floating(init[i]) ? final_b[i] : Tensor());
    for (std::size_t i = 0; i < nx; ++i) grads.push_back(floating(xs[i]) ? dxs[i] : Tensor());
    for (std::size_t k = 0; k < ncap; ++k)
      grads.push_back(floating(captures[k]) ? final_b[nc + k] : Tensor());
    return grads;
  }
};

std::pair<std::vector<Tensor>, std::vector<Tensor>> traced_scan(const ScanBody& body,
                                                                const std::vector<Tensor>& init,
                                                                const std::vector<Tensor>& xs,
                                                                std::int64_t length, bool reverse) {
  TraceContext& trace = current_trace("scan", /*differentiable=*/true);
  // Under a tape the scan also returns the carry entering each step (the gradient's residuals).
  const bool save_residuals = any_tape_recording();
  Types params;
  for (const Tensor& c : init) params.add(c);
  for (const Tensor& x : xs) {
    Shape slice_shape;
    for (std::size_t d = 1; d < x.shape().size(); ++d) slice_shape.push_back(x.shape()[d]);
    params.add(x.dtype(), slice_shape);
  }
  const std::size_t nc = init.size(), nx = xs.size();
  const std::int64_t steps = xs.empty() ? length : xs[0].shape()[0];
  std::size_t ny = 0;
  Types ys;
  const auto stacked_type = [&](const Tensor& t) {
    Shape stacked{steps};
    for (auto d : t.shape()) stacked.push_back(d);
    ys.add(t.dtype(), stacked);
  };
  Region region = trace_region(
      trace, params,
      [&](const std::vector<Tensor>& args) {
        const std::vector<Tensor> carry(args.begin(),
                                        args.begin() + static_cast<std::ptrdiff_t>(nc));
        const std::vector<Tensor> x(args.begin() + static_cast<std::ptrdiff_t>(nc), args.end());
        auto [next, y] = body(carry, x);
        check_same_types(init, next, "scan", "carry", "the body");
        ny = y.size();
        for (std::size_t i = 0; i < y.size(); ++i)
          if (!y[i].defined()) fail("scan", "the body returned an undefined tensor as y {}", i);
        next.insert(next.end(), y.begin(), y.end());
        for (const Tensor& t : y) stacked_type(t);
        if (save_residuals) {
          next.insert(next.end(), carry.begin(), carry.end());
          for (const Tensor& t : carry) stacked_type(t);
        }
        return next;
      },
      [](const std::vector<Tensor>&) {});
  Node node;
  node.kind = Node::Kind::scan;
  add_inputs(trace, node, init, "init");
  add_inputs(trace, node, xs, "xs");
  add_inputs(trace, node, region.captures, "capture");
  node.attrs.ints = {static_cast<std::int64_t>(nc), static_cast<std::int64_t>(nx), reverse ? 1 : 0};
  node.attrs.axis = xs.empty() ? length : -1;
  node.regions = {std::move(region.graph)};
  Types results;
  for (const Tensor& c : init) results.add(c);
  for (std::size_t i = 0; i < ys.dtypes.size(); ++i) results.add(ys.dtypes[i], ys.shapes[i]);
  std::vector<Tensor> out = trace.add_control_flow(std::move(node), results.dtypes, results.shapes);
  std::vector<Tensor> carry(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(nc));
  std::vector<Tensor> stacked(out.begin() + static_cast<std::ptrdiff_t>(nc),
                              out.begin() + static_cast<std::ptrdiff_t>(nc + ny));
  if (save_residuals) {
    ScanGradient rule{
        body,
        init,
        xs,
        region.captures,
        std::vector<Tensor>(out.begin() + static_cast<std::ptrdiff_t>(nc + ny), out.end()),
        carry,
        reverse};
    std::vector<Tensor> inputs = init;
    inputs.insert(inputs.end(), xs.begin(), xs.end());
    inputs.insert(inputs.end(), rule.captures.begin(), rule.captures.end());
    std::vector<Tensor> outputs = carry;
    outputs.insert(outputs.end(), stacked.begin(), stacked.end());
    record_multi_output(inputs, outputs, rule);
  }
  return {carry, stacked};
}

std::vector<Tensor> traced_while_loop(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body,
    const std::vector<Tensor>& init, std::int64_t maximum_iterations) {
  if (any_tape_recording()) {
    // Differentiable form: a scan of maximum_iterations steps whose body runs the loop body
    // (through cond) only while the loop is still going, so each step's carry is kept for the
    // gradient like any scan's.
    if (maximum_iterations < 0)
      fail("while_loop",
           "a gradient through a while_loop inside kiln::function needs "
           "options.maximum_iterations (the loop then keeps one carry per iteration for the "
           "backward pass)");
    std::vector<Tensor> carry = init;
    carry.push_back(full(Shape{}, 1.0, DType::boolean));  // still looping
    const std::size_t nv = init.size();
    // Everything is captured by value: the tape runs these again in the backward pass.
    auto [final_carry, unused] = kiln::scan(
        [cond_fn, body, nv](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
          const std::vector<Tensor> values(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(nv));
          const Tensor go = logical_and(c[nv], cond_fn(values));
          std::vector<Tensor> next = kiln::cond(
              go,
              [body](const std::vector<Tensor>& v) {
                std::vector<Tensor> r = body(v);
                check_same_types(v, r, "while_loop", "value", "the body");
                return r;
              },
              [](const std::vector<Tensor>& v) { return v; }, values);
          next.push_back(go);
          return std::pair<std::vector<Tensor>, std::vector<Tensor>>{next, {}};
        },
        carry, {}, {.length = maximum_iterations});
    final_carry.pop_back();
    return final_carry;
  }
  TraceContext& trace = current_trace("while_loop");
  Types params;
  for (const Tensor& v : init) params.add(v);
  Region cond_region = trace_region(
      trace, params,
      [&](const std::vector<Tensor>& args) { return std::vector<Tensor>{cond_fn(args)}; },
      [](const std::vector<Tensor>& r) {
        if (!r[0].defined()) fail("while_loop", "the result of cond is an undefined tensor");
        if (r[0].dtype() != DType::boolean || r[0].ndim() != 0)
          fail("while_loop", "the result of cond must be a boolean scalar, got {}",
               type_text(r[0]));
      });
  Region body_region = trace_region(trace, params, body, [&](const std::vector<Tensor>& r) {
    check_same_types(init, r, "while_loop", "value", "the body");
  });
  Node node;
  node.kind = Node::Kind::while_loop;
  add_inputs(trace, node, init, "init");
  add_inputs(trace, node, cond_region.captures, "capture");
  add_inputs(trace, node, body_region.captures, "capture");
  node.attrs.ints = {static_cast<std::int64_t>(init.size()),
                     static_cast<std::int64_t>(cond_region.captures.size()),
                     static_cast<std::int64_t>(body_region.captures.size()), maximum_iterations};
  node.regions = {std::move(cond_region.graph), std::move(body_region.graph)};
  return trace.add_control_flow(std::move(node), params.dtypes, params.shapes);
}

/// In the trace being recorded: the gradients of sum_k <fn(args)_k, cotangents_k> (undefined
/// cotangents count as zero) with respect to args and to `captures` (tensors of an enclosing
/// trace that fn uses: directly, or through the region's captured tensors). Non-floating ones
/// get zeros.
std::vector<Tensor> region_vjp(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& args, const std::vector<Tensor>& captures,
    const std::vector<Tensor>& cotangents) {
  const auto floating = [](const Tensor& t) { return is_floating(t.dtype()); };
  auto* region = dynamic_cast<TraceContext*>(active_trace());
  GradientTape tape;
  std::vector<Tensor> uses = args;  // args, then per capture: the outer tensor, the region's
  for (const Tensor& p : captures) {
    uses.push_back(p);
    uses.push_back(region != nullptr ? region->captured(p, "a capture") : p);
  }
  std::vector<Tensor> sources;
  for (const Tensor& t : uses)
    if (floating(t)) {
      tape.watch(t);
      sources.push_back(t);
    }
  const std::vector<Tensor> out = fn(args);
  Tensor target;
  for (std::size_t k = 0; k < out.size() && k < cotangents.size(); ++k) {
    if (!cotangents[k].defined() || !floating(out[k])) continue;
    Tensor term = sum(out[k] * cotangents[k]);
    target = target.defined() ? target + term : term;
  }
  std::vector<Tensor> grads;
  if (target.defined()) grads = tape.gradient(target, sources);
  std::size_t next = 0;
  std::vector<Tensor> per_use;
  for (const Tensor& t : uses)
    per_use.push_back(!floating(t)       ? zeros_like(t)
                      : target.defined() ? grads[next++]
                                         : zeros_like(t));
  std::vector<Tensor> result(per_use.begin(),
                             per_use.begin() + static_cast<std::ptrdiff_t>(args.size()));
  for (std::size_t k = 0; k < captures.size(); ++k) {
    const Tensor& a = per_use[args.size() + 2 * k];
    const Tensor& b = per_use[args.size() + 2 * k + 1];
    result.push_back(floating(captures[k]) ? a + b : a);
  }
  return result;
}

/// The gradient rule of a traced cond: a cond on the same pred whose branches take the
/// vector-Jacobian product of their forward branch (zeros for the other branch's captures).
struct CondGradient {
  using Branch = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  Tensor pred;
  Branch true_fn, false_fn;
  std::vector<Tensor> operands, true_captures, false_captures, results;

  std::vector<Tensor> operator()(const std::vector<Tensor>& output_grads) const {
    std::vector<Tensor> args = operands;  // operands, then the results' gradients
    std::vector<std::size_t> with_grad;
    for (std::size_t k = 0; k < output_grads.size(); ++k)
      if (output_grads[k].defined() && is_floating(results[k].dtype())) {
        with_grad.push_back(k);
        args.push_back(output_grads[k]);
      }
    const std::size_t no = operands.size();
    // By value: an outer tape may record this backward cond and run it again later.
    const auto branch = [this, no, with_grad](const Branch& fn, bool first) {
      return [no, with_grad, fn, first, results = results, true_captures = true_captures,
              false_captures = false_captures](const std::vector<Tensor>& a) {
        const std::vector<Tensor> ops(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(no));
        std::vector<Tensor> cot(results.size());
        for (std::size_t i = 0; i < with_grad.size(); ++i) cot[with_grad[i]] = a[no + i];
        const std::vector<Tensor>& own = first ? true_captures : false_captures;
        const std::vector<Tensor>& other = first ? false_captures : true_captures;
        std::vector<Tensor> g = region_vjp(fn, ops, own, cot);
        std::vector<Tensor> d(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(no));
        std::vector<Tensor> own_d(g.begin() + static_cast<std::ptrdiff_t>(no), g.end());
        std::vector<Tensor> other_d;
        for (const Tensor& t : other) other_d.push_back(zeros_like(t));
        const std::vector<Tensor>& td = first ? own_d : other_d;
        const std::vector<Tensor>& fd = first ? other_d : own_d;
        d.insert(d.end(), td.begin(), td.end());
        d.insert(d.end(), fd.begin(), fd.end());
        return d;
      };
    };
    std::vector<Tensor> g = kiln::cond(pred, branch(true_fn, true), branch(false_fn, false), args);
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Tensor& input = i < no ? operands[i]
                            : i < no + true_captures.size()
                                ? true_captures[i - no]
                                : false_captures[i - no - true_captures.size()];
      if (!is_floating(input.dtype())) g[i] = Tensor();
    }
    return g;
  }
};

std::vector<Tensor> traced_cond(
    const Tensor& pred,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& true_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& false_fn,
    const std::vector<Tensor>& operands) {
  if (!pred.impl()->is_symbolic())  // known while tracing: only that branch is traced
    return truth(pred, "cond", "pred") ? true_fn(operands) : false_fn(operands);
  TraceContext& trace = current_trace("cond", /*differentiable=*/true);
  Types params;
  for (const Tensor& v : operands) params.add(v);
  std::vector<Tensor> true_results;
  Region true_region = trace_region(trace, params, true_fn, [&](const std::vector<Tensor>& r) {
    check_all_defined(r, "cond", "result of true_fn");
    true_results = r;
  });
  Region false_region = trace_region(trace, params, false_fn, [&](const std::vector<Tensor>& r) {
    check_same_types(true_results, r, "cond", "result", "false_fn (against true_fn)");
  });
  Node node;
  node.kind = Node::Kind::cond;
  node.inputs.push_back(trace.node_of(pred, "pred"));
  add_inputs(trace, node, operands, "operand");
  add_inputs(trace, node, true_region.captures, "capture");
  add_inputs(trace, node, false_region.captures, "capture");
  node.attrs.ints = {static_cast<std::int64_t>(operands.size()),
                     static_cast<std::int64_t>(true_region.captures.size()),
                     static_cast<std::int64_t>(false_region.captures.size())};
  node.regions = {std::move(true_region.graph), std::move(false_region.graph)};
  Types results;
  for (const Tensor& t : true_results) results.add(t);
  std::vector<Tensor> out = trace.add_control_flow(std::move(node), results.dtypes, results.shapes);
  if (any_tape_recording()) {
    CondGradient rule{
        pred, true_fn, false_fn, operands, true_region.captures, false_region.captures, out};
    std::vector<Tensor> inputs = operands;
    inputs.insert(inputs.end(), rule.true_captures.begin(), rule.true_captures.end());
    inputs.insert(inputs.end(), rule.false_captures.begin(), rule.false_captures.end());
    record_multi_output(inputs, out, rule);
  }
  return out;
}

}  // namespace detail

std::pair<std::vector<Tensor>, std::vector<Tensor>> scan(const ScanBody& body,
                                                         const std::vector<Tensor>& init,
                                                         const std::vector<Tensor>& xs,
                                                         const ScanOptions& options) {
  if (!body) fail("scan", "body is empty");
  check_all_defined(init, "scan", "init");
  check_all_defined(xs, "scan", "xs");
  const std::int64_t length = scan_length(xs, options);
  if (detail::active_trace() != nullptr)
    return detail::traced_scan(body, init, xs, length, options.reverse);
  return eager_scan(body, init, xs, length, options.reverse);
}

std::pair<Tensor, Tensor> scan(
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& body,
    const Tensor& init, const Tensor& xs, const ScanOptions& options) {
  if (!body) fail("scan", "body is empty");
  auto [carry, ys] = scan(
      [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        auto [next, y] = body(c[0], x[0]);
        return std::pair<std::vector<Tensor>, std::vector<Tensor>>{{next}, {y}};
      },
      {init}, {xs}, options);
  return {carry[0], ys[0]};
}

std::vector<Tensor> while_loop(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body,
    const std::vector<Tensor>& init, const WhileOptions& options) {
  if (!cond_fn) fail("while_loop", "cond is empty");
  if (!body) fail("while_loop", "body is empty");
  check_all_defined(init, "while_loop", "init");
  if (detail::active_trace() != nullptr)
    return detail::traced_while_loop(cond_fn, body, init, options.maximum_iterations);
  std::vector<Tensor> values = init;
  for (std::int64_t i = 0; options.maximum_iterations < 0 || i < options.maximum_iterations; ++i) {
    if (!truth(cond_fn(values), "while_loop", "the result of cond")) break;
    std::vector<Tensor> next = body(values);
    check_same_types(values, next, "while_loop", "value", "the body");
    values = std::move(next);
  }
  return values;
}

std::vector<Tensor> cond(
    const Tensor& pred,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& true_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& false_fn,
    const std::vector<Tensor>& operands) {
  if (!true_fn) fail("cond", "true_fn is empty");
  if (!false_fn) fail("cond", "false_fn is empty");
  if (!pred.defined()) fail("cond", "pred is an undefined tensor");
  if (pred.dtype() != DType::boolean || pred.ndim() != 0)
    fail("cond", "pred must be a boolean scalar, got {}", type_text(pred));
  check_all_defined(operands, "cond", "operand");
  if (detail::active_trace() != nullptr)
    return detail::traced_cond(pred, true_fn, false_fn, operands);
  return truth(pred, "cond", "pred") ? true_fn(operands) : false_fn(operands);
}

}  // namespace kiln

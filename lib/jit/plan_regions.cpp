// Running a control-flow step of a compiled plan (and bind_shapes, the node shapes for a set of
// dynamic sizes, which a region plan is built with): its regions' own plans, once per iteration
// (scan, while_loop) or for the chosen branch (cond). A region plan is built once, for the
// node shapes of the plan it is in. A loop allocates its body's arena once and reuses it every
// iteration; a scan's body writes each step's y straight into its slot of the stacked result
// and its carry into one of two buffers it alternates between (the last step's is the result).

#include <algorithm>
#include <array>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "jit/plan.hpp"
#include "kernels/kernel.hpp"

namespace kiln::detail {

namespace {

/// A region's plan with its arena, allocated once for every run of it in one control-flow step.
struct RegionRunner {
  const Plan& plan;
  const GraphData& region;
  const std::string& function_name;
  Tensor arena;

  RegionRunner(const Plan& p, const GraphData& g, const std::string& name)
      : plan(p), region(g), function_name(name) {
    if (plan.arena_bytes > 0) arena = make_arena(plan.arena_bytes);
  }

  /// Runs the plan on `args`, writing output i into destinations[i] where defined; returns
  /// the outputs.
  std::vector<Tensor> run(const std::vector<Tensor>& args,
                          std::span<const Tensor> destinations = {}) {
    ptrs_.clear();
    for (const Tensor& t : args) ptrs_.push_back(&t);
    const RunBuffers buffers{arena.defined() ? &arena : nullptr, destinations};
    std::vector<Tensor> outputs;
    run_plan(plan, region, ptrs_, function_name, outputs, {}, &buffers);
    return outputs;
  }

 private:
  std::vector<const Tensor*> ptrs_;
};

/// Step t of x (its leading axis), as a view.
Tensor step_of(const Tensor& x, std::int64_t t) {
  const TensorImpl& impl = *x.impl();
  Shape shape, strides;
  for (std::size_t d = 1; d < impl.shape.size(); ++d) {
    shape.push_back(impl.shape[d]);
    strides.push_back(impl.strides[d]);
  }
  return make_view(x, shape, strides, impl.offset + t * impl.strides[0]);
}

std::vector<Tensor> slice_of(const std::vector<Tensor>& v, std::size_t from, std::size_t count) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(from + count)};
}

/// Captures are the same at every iteration: one that is not contiguous (a transposed weight)
/// is copied once per loop here rather than by the body's steps at every iteration.
std::vector<Tensor> contiguous_once(std::vector<Tensor> captures) {
  for (Tensor& c : captures)
    if (!c.is_contiguous()) c = c.contiguous();
  return captures;
}

/// destinations[k], or an undefined tensor past its end.
Tensor destination(std::span<const Tensor> destinations, std::size_t k) {
  return k < destinations.size() ? destinations[k] : Tensor();
}

void run_scan(const Node& node, const Plan& body_plan, const std::vector<Tensor>& inputs,
              std::span<const Tensor> destinations, const std::string& name) {
  const GraphData& body = *node.regions[0];
  const auto nc = static_cast<std::size_t>(node.attrs.ints[0]);
  const auto nx = static_cast<std::size_t>(node.attrs.ints[1]);
  const bool reverse = node.attrs.ints[2] != 0;
  const std::vector<Tensor> xs = slice_of(inputs, nc, nx);
  const std::vector<Tensor> captures =
      contiguous_once(slice_of(inputs, nc + nx, inputs.size() - nc - nx));
  const std::int64_t length = xs.empty() ? node.attrs.axis : xs[0].shape()[0];
  const std::size_t ny = body.outputs.size() - nc;
  const std::vector<Tensor> init = slice_of(inputs, 0, nc);
  // Two buffers per carry: step k writes buffers[(length - 1 - k) % 2], so the last step writes
  // set 0, the result (a destination when one is read).
  std::array<std::vector<Tensor>, 2> buffers;
  for (std::size_t i = 0; i < nc; ++i) {
    const Plan::Value& c = body_plan.values[static_cast<std::size_t>(body.outputs[i])];
    Tensor result = destination(destinations, i);
    buffers[0].push_back(result.defined() ? result : empty(c.shape, c.dtype, "scan"));
    buffers[1].push_back(length > 1 ? empty(c.shape, c.dtype, "scan") : Tensor());
  }
  if (length == 0) {
    for (std::size_t i = 0; i < nc; ++i) copy_strided(array_ref(init[i]), array_ref(buffers[0][i]));
    return;
  }
  RegionRunner runner(body_plan, body, name);
  std::vector<Tensor> args, step_destinations(nc + ny);
  const std::vector<Tensor>* carry = &init;
  for (std::int64_t k = 0; k < length; ++k) {
    const std::int64_t t = reverse ? length - 1 - k : k;
    args = *carry;
    for (const Tensor& x : xs) args.push_back(step_of(x, t));
    args.insert(args.end(), captures.begin(), captures.end());
    const std::vector<Tensor>& next = buffers[static_cast<std::size_t>((length - 1 - k) % 2)];
    for (std::size_t i = 0; i < nc; ++i) step_destinations[i] = next[i];
    for (std::size_t j = 0; j < ny; ++j) {
      const Tensor stacked = destination(destinations, nc + j);
      step_destinations[nc + j] = stacked.defined() ? step_of(stacked, t) : Tensor();
    }
    runner.run(args, step_destinations);
    carry = &next;
  }
}

void run_while(const Node& node, const Plan& cond_plan, const Plan& body_plan,
               const std::vector<Tensor>& inputs, std::span<const Tensor> destinations,
               const std::string& name) {
  const auto nv = static_cast<std::size_t>(node.attrs.ints[0]);
  const auto nc = static_cast<std::size_t>(node.attrs.ints[1]);
  const auto nb = static_cast<std::size_t>(node.attrs.ints[2]);
  const std::int64_t maximum = node.attrs.ints[3];
  const std::vector<Tensor> cond_captures = contiguous_once(slice_of(inputs, nv, nc));
  const std::vector<Tensor> body_captures = contiguous_once(slice_of(inputs, nv + nc, nb));
  std::vector<Tensor> values = slice_of(inputs, 0, nv);
  RegionRunner cond_runner(cond_plan, *node.regions[0], name);
  RegionRunner body_runner(body_plan, *node.regions[1], name);
  std::vector<Tensor> args;
  for (std::int64_t i = 0; maximum < 0 || i < maximum; ++i) {
    args = values;
    args.insert(args.end(), cond_captures.begin(), cond_captures.end());
    if (!cond_runner.run(args)[0].item<bool>()) break;
    args = values;
    args.insert(args.end(), body_captures.begin(), body_captures.end());
    values = body_runner.run(args);
  }
  for (std::size_t k = 0; k < nv; ++k) {
    const Tensor result = destination(destinations, k);
    if (result.defined()) copy_strided(array_ref(values[k]), array_ref(result));
  }
}

void run_cond(const Node& node, std::span<const std::shared_ptr<const Plan>> plans,
              const std::vector<Tensor>& inputs, std::span<const Tensor> destinations,
              const std::string& name) {
  const auto no = static_cast<std::size_t>(node.attrs.ints[0]);
  const auto nt = static_cast<std::size_t>(node.attrs.ints[1]);
  const auto nf = static_cast<std::size_t>(node.attrs.ints[2]);
  const bool pred = inputs[0].item<bool>();
  std::vector<Tensor> args = slice_of(inputs, 1, no);
  const std::vector<Tensor> captures =
      pred ? slice_of(inputs, 1 + no, nt) : slice_of(inputs, 1 + no + nt, nf);
  args.insert(args.end(), captures.begin(), captures.end());
  const std::size_t r = pred ? 0 : 1;
  RegionRunner(*plans[r], *node.regions[r], name).run(args, destinations);
}

}  // namespace

void run_control_flow(const Node& node, std::span<const std::shared_ptr<const Plan>> region_plans,
                      const std::vector<Tensor>& inputs, std::span<const Tensor> destinations,
                      const std::string& function_name) {
  switch (node.kind) {
    case Node::Kind::scan:
      return run_scan(node, *region_plans[0], inputs, destinations, function_name);
    case Node::Kind::while_loop:
      return run_while(node, *region_plans[0], *region_plans[1], inputs, destinations,
                       function_name);
    case Node::Kind::cond:
      return run_cond(node, region_plans, inputs, destinations, function_name);
    default:
      fail(function_name, "internal: {} is not a control-flow node", static_cast<int>(node.kind));
  }
}

std::vector<Shape> bind_shapes(const GraphData& g, const std::vector<std::int64_t>& values) {
  std::vector<Shape> shapes;
  shapes.reserve(g.nodes.size());
  for (const Node& n : g.nodes) {
    Shape s = n.shape;
    for (auto& d : s)
      if (is_dynamic_dim(d)) d = values[static_cast<std::size_t>(dynamic_dim_id(d))];
    shapes.push_back(s);
  }
  return shapes;
}

}  // namespace kiln::detail

// Running a control-flow step of a compiled plan: its regions' own plans, once per iteration
// (scan, while_loop) or for the chosen branch (cond). A region plan is built once, for the
// node shapes of the plan it is in; each run allocates its own arena.

#include <algorithm>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "jit/plan.hpp"
#include "kernels/kernel.hpp"

namespace kiln::detail {

namespace {

/// Runs region plan `plan` of graph `region` on `args`; returns its outputs.
std::vector<Tensor> run_region(const Plan& plan, const GraphData& region,
                               const std::vector<Tensor>& args, const std::string& function_name) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(args.size());
  for (const Tensor& t : args) ptrs.push_back(&t);
  std::vector<Tensor> outputs;
  run_plan(plan, region, ptrs, function_name, outputs);
  return outputs;
}

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

std::vector<Tensor> run_scan(const Node& node, const Plan& body_plan,
                             const std::vector<Tensor>& inputs, const std::string& name) {
  const GraphData& body = *node.regions[0];
  const auto nc = static_cast<std::size_t>(node.attrs.ints[0]);
  const auto nx = static_cast<std::size_t>(node.attrs.ints[1]);
  const bool reverse = node.attrs.ints[2] != 0;
  const std::vector<Tensor> xs = slice_of(inputs, nc, nx);
  const std::vector<Tensor> captures = slice_of(inputs, nc + nx, inputs.size() - nc - nx);
  const std::int64_t length = xs.empty() ? node.attrs.axis : xs[0].shape()[0];
  const std::size_t ny = body.outputs.size() - nc;
  std::vector<Tensor> carry = slice_of(inputs, 0, nc);
  // Each y goes straight into its stacked result (allocated once), so a step's outputs are
  // released before the next step runs.
  std::vector<Tensor> results;
  std::vector<Tensor> stacked;
  for (std::size_t j = 0; j < ny; ++j) {
    const Plan::Value& y = body_plan.values[static_cast<std::size_t>(body.outputs[nc + j])];
    Shape shape{length};
    for (auto d : y.shape) shape.push_back(d);
    stacked.push_back(empty(shape, y.dtype, "scan"));
  }
  std::vector<Tensor> args;
  for (std::int64_t k = 0; k < length; ++k) {
    const std::int64_t t = reverse ? length - 1 - k : k;
    args = carry;
    for (const Tensor& x : xs) args.push_back(step_of(x, t));
    args.insert(args.end(), captures.begin(), captures.end());
    std::vector<Tensor> out = run_region(body_plan, body, args, name);
    for (std::size_t j = 0; j < ny; ++j)
      copy_strided(array_ref(out[nc + j]), array_ref(step_of(stacked[j], t)));
    out.resize(nc);
    carry = std::move(out);
  }
  results = std::move(carry);
  results.insert(results.end(), stacked.begin(), stacked.end());
  return results;
}

std::vector<Tensor> run_while(const Node& node, const Plan& cond_plan, const Plan& body_plan,
                              const std::vector<Tensor>& inputs, const std::string& name) {
  const auto nv = static_cast<std::size_t>(node.attrs.ints[0]);
  const auto nc = static_cast<std::size_t>(node.attrs.ints[1]);
  const auto nb = static_cast<std::size_t>(node.attrs.ints[2]);
  const std::int64_t maximum = node.attrs.ints[3];
  const std::vector<Tensor> cond_captures = slice_of(inputs, nv, nc);
  const std::vector<Tensor> body_captures = slice_of(inputs, nv + nc, nb);
  std::vector<Tensor> values = slice_of(inputs, 0, nv);
  std::vector<Tensor> args;
  for (std::int64_t i = 0; maximum < 0 || i < maximum; ++i) {
    args = values;
    args.insert(args.end(), cond_captures.begin(), cond_captures.end());
    if (!run_region(cond_plan, *node.regions[0], args, name)[0].item<bool>()) break;
    args = values;
    args.insert(args.end(), body_captures.begin(), body_captures.end());
    values = run_region(body_plan, *node.regions[1], args, name);
  }
  return values;
}

std::vector<Tensor> run_cond(const Node& node, std::span<const std::shared_ptr<const Plan>> plans,
                             const std::vector<Tensor>& inputs, const std::string& name) {
  const auto no = static_cast<std::size_t>(node.attrs.ints[0]);
  const auto nt = static_cast<std::size_t>(node.attrs.ints[1]);
  const auto nf = static_cast<std::size_t>(node.attrs.ints[2]);
  const bool pred = inputs[0].item<bool>();
  std::vector<Tensor> args = slice_of(inputs, 1, no);
  const std::vector<Tensor> captures =
      pred ? slice_of(inputs, 1 + no, nt) : slice_of(inputs, 1 + no + nt, nf);
  args.insert(args.end(), captures.begin(), captures.end());
  const std::size_t r = pred ? 0 : 1;
  return run_region(*plans[r], *node.regions[r], args, name);
}

}  // namespace

std::vector<Tensor> run_control_flow(const Node& node,
                                     std::span<const std::shared_ptr<const Plan>> region_plans,
                                     const std::vector<Tensor>& inputs,
                                     const std::string& function_name) {
  switch (node.kind) {
    case Node::Kind::scan:
      return run_scan(node, *region_plans[0], inputs, function_name);
    case Node::Kind::while_loop:
      return run_while(node, *region_plans[0], *region_plans[1], inputs, function_name);
    case Node::Kind::cond:
      return run_cond(node, region_plans, inputs, function_name);
    default:
      fail(function_name, "internal: {} is not a control-flow node", static_cast<int>(node.kind));
  }
}

}  // namespace kiln::detail

#include "jit/plan.hpp"

#include <array>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "ops/dispatch.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

std::int64_t Plan::bytes() const {
  std::int64_t total =
      static_cast<std::int64_t>(sizeof(Plan) + steps.capacity() * sizeof(PlanStep));
  for (const PlanStep& s : steps)
    total += static_cast<std::int64_t>(s.release.capacity() * sizeof(std::int32_t));
  return total;
}

Plan build_plan(const GraphData& g) {
  const std::size_t n = g.nodes.size();
  std::vector<std::int32_t> last_use(n, -1);
  for (std::size_t i = 0; i < n; ++i)
    for (auto in : g.nodes[i].inputs)
      last_use[static_cast<std::size_t>(in)] = static_cast<std::int32_t>(i);
  std::vector<bool> kept(n, false);  // outputs live until the end
  for (auto o : g.outputs) kept[static_cast<std::size_t>(o)] = true;
  for (auto s : g.side_effects) kept[static_cast<std::size_t>(s)] = true;
  Plan plan;
  plan.steps.reserve(n);
  std::vector<std::vector<std::int32_t>> release_at(n);
  for (std::size_t v = 0; v < n; ++v)
    if (!kept[v] && last_use[v] >= 0)
      release_at[static_cast<std::size_t>(last_use[v])].push_back(static_cast<std::int32_t>(v));
  for (std::size_t i = 0; i < n; ++i)
    plan.steps.push_back({static_cast<std::int32_t>(i), std::move(release_at[i])});
  return plan;
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

std::vector<Tensor> run_plan(const Plan& plan, const GraphData& g, const std::vector<Tensor>& args,
                             const std::string& function_name, const std::vector<Shape>* shapes) {
  // Bind variables first: a destroyed variable fails the call before anything runs.
  std::vector<std::shared_ptr<VariableImpl>> vars;
  vars.reserve(g.variables.size());
  for (const auto& weak : g.variables) vars.push_back(weak.lock());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i])
      fail(function_name,
           "variable '{}' used by this function was destroyed; the cached graph refers to "
           "variables by reference and does not keep them alive",
           g.variable_names[i]);
  }
  // Working slots come from a per-thread scratch vector (a plan never runs inside another on
  // the same thread: nested functions inline while tracing).
  __attribute__((tls_model("initial-exec"))) thread_local std::vector<Tensor> scratch;
  std::vector<Tensor>& slots = scratch;
  slots.clear();
  slots.resize(g.nodes.size());
  struct ClearOnExit {
    std::vector<Tensor>& s;
    ~ClearOnExit() { s.clear(); }
  } clear_on_exit{slots};
  std::array<const Tensor*, 8> small_inputs{};
  std::vector<const Tensor*> many_inputs;
  for (const PlanStep& step : plan.steps) {
    const Node& node = g.nodes[static_cast<std::size_t>(step.node)];
    Tensor& out = slots[static_cast<std::size_t>(step.node)];
    switch (node.kind) {
      case Node::Kind::parameter:
        out = args[static_cast<std::size_t>(node.index)];
        break;
      case Node::Kind::constant:
        out = node.constant;
        break;
      case Node::Kind::variable:
        out = vars[static_cast<std::size_t>(node.index)]->read();
        break;
      case Node::Kind::assign:
        out = slots[static_cast<std::size_t>(node.inputs[0])];
        break;
      case Node::Kind::fused: {
        const Tensor** ins = small_inputs.data();
        for (std::size_t i = 0; i < node.inputs.size(); ++i)
          ins[i] = &slots[static_cast<std::size_t>(node.inputs[i])];
        out = run_fused_program(*node.program,
                                std::span<const Tensor* const>(ins, node.inputs.size()), node.dtype,
                                shapes ? (*shapes)[static_cast<std::size_t>(step.node)] : node.shape);
        break;
      }
      case Node::Kind::primitive: {
        const Tensor** ins = small_inputs.data();
        if (node.inputs.size() > small_inputs.size()) {
          many_inputs.resize(node.inputs.size());
          ins = many_inputs.data();
        }
        for (std::size_t i = 0; i < node.inputs.size(); ++i)
          ins[i] = &slots[static_cast<std::size_t>(node.inputs[i])];
        out = run_primitive(node.prim, std::span<const Tensor* const>(ins, node.inputs.size()), node.attrs,
                    node.dtype, shapes ? (*shapes)[static_cast<std::size_t>(step.node)] : node.shape);
        break;
      }
    }
    for (auto r : step.release) slots[static_cast<std::size_t>(r)] = Tensor();
  }
  for (auto s : g.side_effects) {
    const Node& node = g.nodes[static_cast<std::size_t>(s)];
    vars[static_cast<std::size_t>(node.index)]->write(
        slots[static_cast<std::size_t>(s)].contiguous());
  }
  std::vector<Tensor> outputs;
  outputs.reserve(g.outputs.size());
  for (auto o : g.outputs) outputs.push_back(slots[static_cast<std::size_t>(o)]);
  return outputs;
}

}  // namespace kiln::detail

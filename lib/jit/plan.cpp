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

void run_plan(const Plan& plan, const GraphData& g, const std::vector<Tensor>& args,
              const std::string& function_name, std::vector<Tensor>& outputs,
              const std::vector<Shape>* shapes) {
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
  // Working state comes from per-thread scratch vectors (a plan never runs inside another on
  // the same thread: nested functions inline while tracing). `value[i]` is where node i's value
  // is: an argument, a constant of the graph, or `owned[i]` for values computed by this call, so
  // reading arguments and constants costs no reference counting.
  __attribute__((tls_model("initial-exec"))) thread_local std::vector<Tensor> owned_scratch;
  __attribute__((tls_model("initial-exec"))) thread_local std::vector<const Tensor*> value_scratch;
  std::vector<Tensor>& owned = owned_scratch;
  std::vector<const Tensor*>& value = value_scratch;
  owned.resize(g.nodes.size());
  value.resize(g.nodes.size());
  struct ClearOnExit {
    std::vector<Tensor>& s;
    ~ClearOnExit() {
      for (Tensor& t : s) t = Tensor();
    }
  } clear_on_exit{owned};
  std::array<const Tensor*, 8> small_inputs{};
  std::vector<const Tensor*> many_inputs;
  const auto shape_of = [&](std::int32_t id) -> const Shape& {
    return shapes ? (*shapes)[static_cast<std::size_t>(id)]
                  : g.nodes[static_cast<std::size_t>(id)].shape;
  };
  const auto gather_inputs = [&](const Node& node) {
    const Tensor** ins = small_inputs.data();
    if (node.inputs.size() > small_inputs.size()) {
      many_inputs.resize(node.inputs.size());
      ins = many_inputs.data();
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      ins[i] = value[static_cast<std::size_t>(node.inputs[i])];
    return std::span<const Tensor* const>(ins, node.inputs.size());
  };
  for (const PlanStep& step : plan.steps) {
    const auto id = static_cast<std::size_t>(step.node);
    const Node& node = g.nodes[id];
    switch (node.kind) {
      case Node::Kind::parameter:
        value[id] = &args[static_cast<std::size_t>(node.index)];
        break;
      case Node::Kind::constant:
        value[id] = &node.constant;
        break;
      case Node::Kind::variable:
        owned[id] = vars[static_cast<std::size_t>(node.index)]->read();
        value[id] = &owned[id];
        break;
      case Node::Kind::assign:
        owned[id] = *value[static_cast<std::size_t>(node.inputs[0])];
        value[id] = &owned[id];
        break;
      case Node::Kind::fused:
        owned[id] =
            run_fused_program(*node.program, gather_inputs(node), node.dtype, shape_of(step.node));
        value[id] = &owned[id];
        break;
      case Node::Kind::primitive:
        if (!is_elementwise(node.prim) && info(node.prim).family != Family::movement &&
            node.prim != Prim::dim_size) {
          // Kernels of these families read contiguous inputs; a view (e.g. the transpose of a
          // weight in a backward pass) is copied once here and the copy serves every later use,
          // instead of one copy per consuming kernel.
          for (auto in : node.inputs) {
            const auto i = static_cast<std::size_t>(in);
            if (value[i]->impl()->is_contiguous()) continue;
            owned[i] = value[i]->contiguous();
            value[i] = &owned[i];
          }
        }
        owned[id] = run_primitive(node.prim, gather_inputs(node), node.attrs, node.dtype,
                                  shape_of(step.node));
        value[id] = &owned[id];
        break;
    }
    for (auto r : step.release) owned[static_cast<std::size_t>(r)] = Tensor();
  }
  for (auto s : g.side_effects) {
    const Node& node = g.nodes[static_cast<std::size_t>(s)];
    vars[static_cast<std::size_t>(node.index)]->write(
        value[static_cast<std::size_t>(s)]->contiguous());
  }
  outputs.clear();
  for (auto o : g.outputs) outputs.push_back(*value[static_cast<std::size_t>(o)]);
}

}  // namespace kiln::detail

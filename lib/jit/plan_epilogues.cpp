// Matmul epilogues: optimizations of a built plan that give a GEMM's output more to do (see
// fuse_matmul_epilogues and fold_sgd_updates in plan.hpp).

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "jit/plan.hpp"
#include "kernels/fused.hpp"

namespace kiln::detail {

namespace {

/// A step that adds its inputs, each once: an add of two, or a fused program of adds only.
bool is_sum_of_inputs(const Plan& plan, const Plan::Step& step) {
  const Plan::Value& out = plan.values[static_cast<std::size_t>(step.values.back())];
  if (out.dtype != DType::f32 && out.dtype != DType::f64) return false;
  if (step.kind != Plan::Step::Kind::fused)
    return step.prim == Prim::add && step.values.size() == 3 &&
           (step.kind == Plan::Step::Kind::flat || step.kind == Plan::Step::Kind::kernel);
  // Evaluate the program on sets of inputs: every add must join two disjoint sets, and the
  // result must be the set of all inputs, so the program is their sum with each input once.
  const FusedProgram& program = *step.program;
  if (program.num_inputs > 32) return false;
  std::array<std::uint32_t, max_fused_slots> slot{};
  std::uint32_t result = 0;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const FusedOp& op = program.ops[i];
    if (op.prim != Prim::add || op.in_dtype != out.dtype || op.out_dtype != out.dtype) return false;
    std::array<std::uint32_t, 2> set{};
    for (std::size_t k = 0; k < 2; ++k) {
      const std::int16_t a = op.operands[k];
      set[k] = a >= 0 ? std::uint32_t{1} << a : slot[static_cast<std::size_t>(-a - 1)];
      if (set[k] == 0) return false;
    }
    if ((set[0] & set[1]) != 0) return false;
    result = set[0] | set[1];
    if (i + 1 < program.ops.size()) slot[static_cast<std::size_t>(op.result_slot)] = result;
  }
  return result == (std::uint64_t{1} << program.num_inputs) - 1;
}

/// Per root: how many step inputs read it, and the last step that writes it (-1: none). A
/// region step reads its inputs and writes every value after them; other steps write their last
/// value.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> readers_and_producers(
    const Plan& plan) {
  std::vector<std::int32_t> readers(plan.roots.size(), 0);
  std::vector<std::int32_t> producer(plan.roots.size(), -1);
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Plan::Step& step = plan.steps[s];
    const std::size_t reads = step.num_reads();
    for (std::size_t i = 0; i < reads; ++i) ++readers[plan.root_of(step.values[i])];
    for (std::size_t i = reads; i < step.values.size(); ++i)
      producer[plan.root_of(step.values[i])] = static_cast<std::int32_t>(s);
  }
  return {std::move(readers), std::move(producer)};
}

}  // namespace

/// Matmul epilogues: a sum of matmul products and at most one other term (a bias, broadcast
/// or not), `x W + h U + b` in an RNN or LSTM step or `x W + b` in a dense layer, computed
/// without the sum: the other term is copied into the sum's buffer first and every product is
/// accumulated into it by its GEMM (beta = 1). It pays when the products are read only by the
/// sum: one pass over the output instead of one per term, and no buffer per product.
void fuse_matmul_epilogues(Plan& plan) {
  const auto [readers, producer] = readers_and_producers(plan);
  std::vector<bool> removed(plan.steps.size(), false);
  std::vector<std::pair<std::size_t, Plan::Step>> inserted;  // (before step index, step)
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Plan::Step& sum = plan.steps[s];
    if (!is_sum_of_inputs(plan, sum)) continue;
    const std::int32_t out = sum.values.back();
    const Plan::Value& out_value = plan.values[static_cast<std::size_t>(out)];
    std::vector<std::size_t> products;  // matmul steps whose output only this sum reads
    std::int32_t other = -1;
    bool fits = true;
    for (std::size_t i = 0; i + 1 < sum.values.size() && fits; ++i) {
      const std::int32_t v = sum.values[i];
      const Plan::Value& value = plan.values[static_cast<std::size_t>(v)];
      const std::size_t r = plan.root_of(v);
      const std::int32_t p = producer[r];
      const bool product = p >= 0 && plan.steps[static_cast<std::size_t>(p)].matmul &&
                           plan.roots[r].kind == Plan::Root::Kind::arena && readers[r] == 1 &&
                           value.offset == 0 && value.shape == out_value.shape &&
                           value.strides == out_value.strides && value.dtype == out_value.dtype;
      if (product) {
        products.push_back(static_cast<std::size_t>(p));
      } else if (other < 0) {
        other = v;
      } else {
        fits = false;  // a sum of several non-products stays as it is
      }
    }
    if (!fits || products.empty()) continue;
    std::sort(products.begin(), products.end());
    // The other term must exist before the first product's GEMM runs.
    if (other >= 0) {
      const std::int32_t p = producer[plan.root_of(other)];
      if (p >= 0 && static_cast<std::size_t>(p) >= products.front()) continue;
    }
    for (std::size_t i = 0; i < products.size(); ++i) {
      Plan::Step& gemm = plan.steps[products[i]];
      gemm.values.back() = out;
      gemm.refs.back() = plan.layout_of(out);
      gemm.matmul = plan_matmul(gemm.refs[0], gemm.refs[1], gemm.refs[2],
                                /*accumulate=*/other >= 0 || i > 0);
    }
    removed[s] = true;
    if (other >= 0) {
      Plan::Step copy;
      copy.kind = Plan::Step::Kind::copy;
      copy.node = sum.node;
      copy.values = {other, out};
      copy.refs = {plan.broadcast_layout_of(other, out_value.shape), plan.layout_of(out)};
      inserted.emplace_back(products.front(), std::move(copy));
    }
  }
  if (inserted.empty() && std::find(removed.begin(), removed.end(), true) == removed.end()) return;
  std::vector<Plan::Step> steps;
  steps.reserve(plan.steps.size() + inserted.size());
  std::size_t next_insert = 0;
  std::sort(inserted.begin(), inserted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    while (next_insert < inserted.size() && inserted[next_insert].first == s)
      steps.push_back(std::move(inserted[next_insert++].second));
    if (!removed[s]) steps.push_back(std::move(plan.steps[s]));
  }
  plan.steps = std::move(steps);
}

namespace {

/// Which inputs of fused step `step` are the product, the rate and the variable's value when its
/// program is `w - p * rate` (or `w - rate * p`) in the output's dtype; nullopt otherwise.
struct UpdateInputs {
  std::int32_t product, rate, variable;
};
std::optional<UpdateInputs> sgd_update_inputs(const Plan& plan, const Plan::Step& step) {
  if (step.kind != Plan::Step::Kind::fused || step.program == nullptr) return std::nullopt;
  const FusedProgram& program = *step.program;
  const DType dtype = plan.values[static_cast<std::size_t>(step.values.back())].dtype;
  if ((dtype != DType::f32 && dtype != DType::f64) || program.num_inputs != 3 ||
      program.ops.size() != 2)
    return std::nullopt;
  const FusedOp& mul = program.ops[0];
  const FusedOp& sub = program.ops[1];
  for (const FusedOp* op : {&mul, &sub})
    if (op->in_dtype != dtype || op->out_dtype != dtype) return std::nullopt;
  if (mul.prim != Prim::mul || sub.prim != Prim::sub || mul.operands[0] < 0 ||
      mul.operands[1] < 0 || sub.operands[0] < 0 || sub.operands[1] != -mul.result_slot - 1)
    return std::nullopt;
  const auto value = [&](std::int16_t operand) {
    return step.values[static_cast<std::size_t>(operand)];
  };
  const auto is_scalar = [&](std::int32_t v) {
    return plan.values[static_cast<std::size_t>(v)].shape.numel() == 1;
  };
  std::int32_t product = value(mul.operands[0]), rate = value(mul.operands[1]);
  if (is_scalar(product)) std::swap(product, rate);
  if (!is_scalar(rate) || is_scalar(product)) return std::nullopt;
  return UpdateInputs{product, rate, value(sub.operands[0])};
}

}  // namespace

void fold_sgd_updates(Plan& plan, const GraphData& g) {
  if (!assigns_only(g)) return;
  const auto [readers, producer] = readers_and_producers(plan);
  const std::vector<std::int32_t> held_after = held_after_steps(plan, g);

  struct Fold {
    std::size_t update, product;  // the fused update step and the GEMM step
    UpdateInputs inputs;
  };
  std::vector<Fold> folds;
  std::vector<bool> updated(plan.roots.size(), false);
  std::vector<std::int32_t> updated_variables;
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Plan::Step& step = plan.steps[s];
    const auto inputs = sgd_update_inputs(plan, step);
    if (!inputs) continue;
    const std::int32_t out = step.values.back();
    const Plan::Value& out_value = plan.values[static_cast<std::size_t>(out)];
    const std::size_t out_root = plan.root_of(out), w_root = plan.root_of(inputs->variable);
    const std::size_t p_root = plan.root_of(inputs->product);
    const Plan::Root& w = plan.roots[w_root];
    const auto whole = [&](std::int32_t v) {
      const Plan::Value& value = plan.values[static_cast<std::size_t>(v)];
      return value.offset == 0 && value.shape == out_value.shape &&
             value.strides == out_value.strides && value.dtype == out_value.dtype &&
             is_contiguous_layout(value.shape, value.strides);
    };
    // The new value: a buffer of its own read by nothing but its assignment to w's variable,
    // the variable's only assignment.
    std::int32_t assignments = 0;
    bool assigned_to_w = false;
    for (auto a : g.side_effects) {
      const Node& node = g.nodes[static_cast<std::size_t>(a)];
      if (node.index != w.index) continue;
      ++assignments;
      assigned_to_w = plan.root_of(node.inputs[0]) == out_root;
    }
    assigned_to_w = assigned_to_w && assignments == 1;
    const std::int32_t p = producer[p_root];
    if (!assigned_to_w || plan.roots[out_root].kind != Plan::Root::Kind::escape ||
        readers[out_root] != 0 || held_after[out_root] != 1 || !whole(out) ||
        w.kind != Plan::Root::Kind::variable || held_after[w_root] != 0 ||
        !whole(inputs->variable) || plan.roots[p_root].kind != Plan::Root::Kind::arena ||
        std::find(updated_variables.begin(), updated_variables.end(), w.index) !=
            updated_variables.end() ||
        readers[p_root] != 1 || !whole(inputs->product) || p < 0 ||
        !plan.steps[static_cast<std::size_t>(p)].matmul)
      continue;
    // Only oneDNN and OpenBLAS take an alpha. A product planned on libxsmm (a small one, where
    // its kernels are far quicker than a library call) is moved only when the pass it saves is
    // long: from 2^18 elements (1 MiB of f32).
    constexpr std::int64_t large_update = std::int64_t{1} << 18;
    if (!planned_on_library(*plan.steps[static_cast<std::size_t>(p)].matmul) &&
        out_value.shape.numel() < large_update)
      continue;
    updated[w_root] = true;
    updated_variables.push_back(w.index);
    folds.push_back(Fold{s, static_cast<std::size_t>(p), *inputs});
  }
  // The GEMMs run last: no operand of one may be a variable another updates in place.
  std::erase_if(folds, [&](const Fold& f) {
    const Plan::Step& gemm = plan.steps[f.product];
    return updated[plan.root_of(gemm.values[0])] || updated[plan.root_of(gemm.values[1])] ||
           updated[plan.root_of(f.inputs.rate)];
  });
  if (folds.empty()) return;
  std::vector<bool> removed(plan.steps.size(), false);
  std::vector<Plan::Step> last;
  for (const Fold& f : folds) {
    const Plan::Step& gemm = plan.steps[f.product];
    const Plan::Step& update = plan.steps[f.update];
    const std::int32_t out = update.values.back();
    Plan::Step step;
    step.kind = Plan::Step::Kind::kernel;
    step.prim = Prim::matmul;
    step.node = update.node;
    step.values = {gemm.values[0], gemm.values[1], f.inputs.rate, out};
    step.refs = {gemm.refs[0], gemm.refs[1], plan.layout_of(f.inputs.rate), plan.layout_of(out)};
    step.matmul = plan_matmul(step.refs[0], step.refs[1], step.refs[3], /*accumulate=*/true,
                              /*scaled=*/true);
    step.update_root = static_cast<std::int32_t>(plan.root_of(f.inputs.variable));
    if (!step.matmul) continue;
    removed[f.product] = removed[f.update] = true;
    last.push_back(std::move(step));
  }
  std::vector<Plan::Step> steps;
  steps.reserve(plan.steps.size());
  for (std::size_t s = 0; s < plan.steps.size(); ++s)
    if (!removed[s]) steps.push_back(std::move(plan.steps[s]));
  for (Plan::Step& step : last) steps.push_back(std::move(step));
  plan.steps = std::move(steps);
}

}  // namespace kiln::detail

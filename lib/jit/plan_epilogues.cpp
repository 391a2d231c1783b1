// Matmul epilogues: an optimization of a built plan (see fuse_matmul_epilogues in plan.hpp).

#include <algorithm>
#include <array>
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

}  // namespace

/// Matmul epilogues: a sum of matmul products and at most one other term (a bias, broadcast
/// or not), `x W + h U + b` in an RNN or LSTM step or `x W + b` in a dense layer, computed
/// without the sum: the other term is copied into the sum's buffer first and every product is
/// accumulated into it by its GEMM (beta = 1). It pays when the products are read only by the
/// sum: one pass over the output instead of one per term, and no buffer per product.
void fuse_matmul_epilogues(Plan& plan) {
  std::vector<std::int32_t> readers(plan.roots.size(), 0);
  std::vector<std::int32_t> producer(plan.roots.size(), -1);
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Plan::Step& step = plan.steps[s];
    // A region step reads its inputs and writes every value after them; other steps write
    // their last value.
    const std::size_t reads = step.kind == Plan::Step::Kind::region
                                  ? static_cast<std::size_t>(step.num_inputs)
                                  : step.values.size() - 1;
    for (std::size_t i = 0; i < reads; ++i) ++readers[plan.root_of(step.values[i])];
    const std::size_t first_write = step.kind == Plan::Step::Kind::region
                                        ? static_cast<std::size_t>(step.num_inputs)
                                        : step.values.size() - 1;
    for (std::size_t i = first_write; i < step.values.size(); ++i)
      producer[plan.root_of(step.values[i])] = static_cast<std::int32_t>(s);
  }
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

}  // namespace kiln::detail

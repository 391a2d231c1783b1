// Optimizer updates in place: elementwise steps that compute a variable's new value write it
// over the variable's value (see update_variables_in_place in plan.hpp); and the kernel memos
// that hold variables' values between calls (keep_kernel_memos).

#include <algorithm>
#include <vector>

#include "core/tensor_impl.hpp"
#include "jit/plan.hpp"

namespace kiln::detail {

bool is_elementwise_step(const Plan::Step& step) {
  return step.kind == Plan::Step::Kind::flat || step.kind == Plan::Step::Kind::fused ||
         (step.kind == Plan::Step::Kind::kernel && !step.matmul && is_elementwise(step.prim));
}

bool assigns_only(const GraphData& g) {
  return std::all_of(g.side_effects.begin(), g.side_effects.end(), [&](std::int32_t s) {
    return g.nodes[static_cast<std::size_t>(s)].kind == Node::Kind::assign;
  });
}

std::vector<std::int32_t> held_after_steps(const Plan& plan, const GraphData& g) {
  std::vector<std::int32_t> held_after(plan.roots.size(), 0);
  for (auto o : g.outputs) ++held_after[plan.root_of(o)];
  for (auto s : g.side_effects)
    ++held_after[plan.root_of(g.nodes[static_cast<std::size_t>(s)].inputs[0])];
  return held_after;
}

namespace {

/// One step that may write its output over a variable's value.
struct Candidate {
  std::size_t step;
  std::size_t variable_root;
  bool dropped = false;
};

/// Whether `value` covers its root exactly as `out` would: offset 0, the same shape, strides
/// and dtype, contiguous.
bool same_whole_layout(const Plan& plan, std::int32_t value, std::int32_t out) {
  const Plan::Value& v = plan.values[static_cast<std::size_t>(value)];
  const Plan::Value& o = plan.values[static_cast<std::size_t>(out)];
  return v.offset == 0 && o.offset == 0 && v.shape == o.shape && v.strides == o.strides &&
         v.dtype == o.dtype && is_contiguous_layout(o.shape, o.strides);
}

/// The steps that could write over a variable's value, each on its own: an elementwise step
/// whose output is a whole escape buffer read by nothing after the call but the variable's one
/// assignment, over a variable value of the same layout that nothing after the call holds and
/// that the step reads, if at all, with the output's layout.
std::vector<Candidate> find_candidates(const Plan& plan, const GraphData& g, std::size_t end) {
  const std::vector<std::int32_t> held_after = held_after_steps(plan, g);
  // Per variable slot: its root (-1: not read; -2: read as several roots) and assignments.
  std::vector<std::int32_t> root_of_slot(g.variables.size(), -1);
  for (std::size_t r = 0; r < plan.roots.size(); ++r) {
    const Plan::Root& root = plan.roots[r];
    if (root.kind != Plan::Root::Kind::variable) continue;
    std::int32_t& slot = root_of_slot[static_cast<std::size_t>(root.index)];
    slot = slot == -1 ? static_cast<std::int32_t>(r) : -2;
  }
  std::vector<std::int32_t> assignments(g.variables.size(), 0);
  for (auto s : g.side_effects)
    ++assignments[static_cast<std::size_t>(g.nodes[static_cast<std::size_t>(s)].index)];

  // Per root: its first value (a variable's read); per value: the first step that writes it as
  // its output (none for a region's results).
  std::vector<std::int32_t> first_value(plan.roots.size(), -1);
  for (std::size_t v = plan.values.size(); v-- > 0;)
    if (plan.values[v].root >= 0)  // -1: a node with no buffer (a side effect, a region node)
      first_value[static_cast<std::size_t>(plan.values[v].root)] = static_cast<std::int32_t>(v);
  std::vector<std::int32_t> writer(plan.values.size(), -1);
  for (std::size_t i = end; i-- > 0;)
    if (plan.steps[i].kind != Plan::Step::Kind::region)
      writer[static_cast<std::size_t>(plan.steps[i].values.back())] = static_cast<std::int32_t>(i);

  std::vector<Candidate> candidates;
  for (auto s : g.side_effects) {
    const Node& assign = g.nodes[static_cast<std::size_t>(s)];
    const auto slot = static_cast<std::size_t>(assign.index);
    const std::int32_t out = assign.inputs[0];
    const std::size_t out_root = plan.root_of(out);
    if (assignments[slot] != 1 || root_of_slot[slot] < 0 ||
        plan.roots[out_root].kind != Plan::Root::Kind::escape || held_after[out_root] != 1)
      continue;
    const auto variable_root = static_cast<std::size_t>(root_of_slot[slot]);
    // The variable's value: whole, of the new value's layout, held by nothing after the call.
    const std::int32_t value = first_value[variable_root];
    const std::int32_t i = writer[static_cast<std::size_t>(out)];
    if (value < 0 || i < 0 || held_after[variable_root] != 0 ||
        !same_whole_layout(plan, value, out))
      continue;
    // The step that writes the new value.
    const Plan::Step& step = plan.steps[static_cast<std::size_t>(i)];
    bool fits = is_elementwise_step(step) && step.update_root < 0;
    for (std::size_t k = 0; k + 1 < step.values.size() && fits; ++k)
      if (plan.root_of(step.values[k]) == variable_root)
        fits = same_whole_layout(plan, step.values[k], out);
    if (fits) candidates.push_back(Candidate{static_cast<std::size_t>(i), variable_root});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.step < b.step; });
  return candidates;
}

}  // namespace

void update_variables_in_place(Plan& plan, const GraphData& g) {
  if (g.side_effects.empty() || !assigns_only(g)) return;
  // Folded GEMMs (fold_sgd_updates) are the last steps; the moved ones go before them.
  std::size_t end = plan.steps.size();
  while (end > 0 && plan.steps[end - 1].update_root >= 0) --end;
  std::vector<Candidate> candidates = find_candidates(plan, g, end);
  if (candidates.empty()) return;
  std::vector<std::int32_t> candidate_at(end, -1);
  for (std::size_t c = 0; c < candidates.size(); ++c)
    candidate_at[candidates[c].step] = static_cast<std::int32_t>(c);

  // `moved`: the candidates and every step that reads what one of them wrote, transitively.
  // Candidates are dropped until (a) every moved step is elementwise or a copy, so none can
  // fail once a variable has changed, (b) every step that reads a candidate's variable value
  // runs before the candidate, and (c) no folded GEMM reads that value.
  // Per root: the steps that read it, in order.
  std::vector<std::vector<std::size_t>> readers_of(plan.roots.size());
  for (std::size_t i = 0; i < plan.steps.size(); ++i)
    for (std::size_t k = 0; k < plan.steps[i].num_reads(); ++k) {
      std::vector<std::size_t>& readers = readers_of[plan.root_of(plan.steps[i].values[k])];
      if (readers.empty() || readers.back() != i) readers.push_back(i);
    }
  std::vector<bool> moved(end, false);
  std::vector<std::size_t> from;
  for (bool dropped = true; dropped;) {
    dropped = false;
    std::fill(moved.begin(), moved.end(), false);
    // Per root written by a moved step: the candidates it comes from (sorted, each once).
    std::vector<std::vector<std::size_t>> sources(plan.roots.size());
    const auto drop = [&](std::size_t c) {
      dropped = dropped || !candidates[c].dropped;
      candidates[c].dropped = true;
    };
    for (std::size_t i = 0; i < end; ++i) {
      const Plan::Step& step = plan.steps[i];
      from.clear();
      if (candidate_at[i] >= 0 && !candidates[static_cast<std::size_t>(candidate_at[i])].dropped)
        from.push_back(static_cast<std::size_t>(candidate_at[i]));
      // What it reads, and what it writes that a moved step wrote first (a GEMM accumulating
      // into a buffer a copy filled), must stay after those steps.
      for (std::size_t k = 0; k < step.values.size(); ++k) {
        const std::vector<std::size_t>& in = sources[plan.root_of(step.values[k])];
        from.insert(from.end(), in.begin(), in.end());
      }
      if (from.empty()) continue;
      std::sort(from.begin(), from.end());
      from.erase(std::unique(from.begin(), from.end()), from.end());
      moved[i] = true;
      if (!is_elementwise_step(step) && step.kind != Plan::Step::Kind::copy)
        for (std::size_t c : from) drop(c);  // (a)
      for (std::size_t k = step.num_reads(); k < step.values.size(); ++k)
        sources[plan.root_of(step.values[k])] = from;
    }
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (candidates[c].dropped) continue;
      for (std::size_t i : readers_of[candidates[c].variable_root])
        if (i != candidates[c].step && (i >= end || (moved[i] && i > candidates[c].step)))
          drop(c);  // (b), (c)
    }
  }
  if (std::all_of(candidates.begin(), candidates.end(), [](const auto& c) { return c.dropped; }))
    return;
  for (const Candidate& c : candidates)
    if (!c.dropped) plan.steps[c.step].update_root = static_cast<std::int32_t>(c.variable_root);
  std::vector<Plan::Step> before, after;
  for (std::size_t i = 0; i < end; ++i)
    (moved[i] ? after : before).push_back(std::move(plan.steps[i]));
  for (std::size_t i = end; i < plan.steps.size(); ++i) after.push_back(std::move(plan.steps[i]));
  before.insert(before.end(), std::make_move_iterator(after.begin()),
                std::make_move_iterator(after.end()));
  plan.steps = std::move(before);
}

void keep_kernel_memos(Plan& plan, const GraphData& g) {
  std::vector<bool> assigned(g.variables.size(), false);
  for (auto s : g.side_effects)
    assigned[static_cast<std::size_t>(g.nodes[static_cast<std::size_t>(s)].index)] = true;
  for (Plan::Step& step : plan.steps) {
    if (step.kind != Plan::Step::Kind::kernel || !keeps_memo(step.prim) || step.node < 0) continue;
    std::vector<std::int32_t> fixed(step.num_reads(), -1);
    bool any = false, changing = false;
    for (std::size_t i = 0; i < fixed.size(); ++i) {
      const std::size_t r = plan.root_of(step.values[i]);
      const Plan::Root& root = plan.roots[r];
      if (root.kind == Plan::Root::Kind::variable) {
        changing = changing || assigned[static_cast<std::size_t>(root.index)];
      } else if (root.kind != Plan::Root::Kind::constant) {
        continue;
      }
      fixed[i] = static_cast<std::int32_t>(r);
      any = true;
    }
    if (!any || changing) continue;
    step.memo = g.kernel_memos->of(step.node);
    step.fixed_roots = std::move(fixed);
  }
}

void run_with_memo(const Plan::Step& step, std::span<const ArrayRef> inputs, const ArrayRef& out,
                   const std::function<std::shared_ptr<Storage>(std::size_t root)>& buffer_of) {
  std::vector<std::shared_ptr<Storage>> fixed(step.fixed_roots.size());
  for (std::size_t i = 0; i < fixed.size(); ++i)
    if (step.fixed_roots[i] >= 0)
      fixed[i] = buffer_of(static_cast<std::size_t>(step.fixed_roots[i]));
  const std::unique_lock<std::mutex> lock(step.memo->mutex, std::try_to_lock);
  step.fn(KernelCall{step.prim, inputs, out, *step.attrs,
                     lock.owns_lock() ? step.memo.get() : nullptr, fixed});
}

}  // namespace kiln::detail

// Runs of fused steps that run chunk by chunk (see group_elementwise_steps in plan.hpp).
//
// A group runs its steps interleaved: chunk c of the first step, chunk c of the second, ...,
// then chunk c + 1. That gives the result of running them one after the other when no step's
// element depends on another element of a buffer the group writes:
// - a step reads a buffer an earlier step of the group wrote only flat, at the offset it was
//   written (element i of the reader's output reads element i of the writer's);
// - a step writes a buffer an earlier step of the group read only flat at that offset (the
//   earlier step read element i before this step overwrites it: optimizer updates in place);
// - every step walks its elements in the same order, in the same chunks (same element count,
//   runs_in_element_ranges).
// A step's other reads (a scalar, a buffer no step of the group writes) see the same values
// either way. Steps from update_variables_in_place keep its guarantee: they still run after
// every other step, so a failing call changes no variable.
//
// A step of one elementwise primitive (a flat row call or a kernel step) joins a group as a
// fused step of one instruction: SGD with momentum computes the new momentum in a fused step and
// the variable's new value in one add, which then run as one loop. A group's steps are ordered
// into sets that depend on each other, one loop per set; a loop stores only the values read
// after it; and updates of other variables between a group's steps run after it.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/environment.hpp"
#include "jit/plan.hpp"
#include "kernels/fused.hpp"
#include "kernels/fused_loop.hpp"
#include "kernels/streaming.hpp"

namespace kiln::detail {

namespace {

bool groups_allowed_by_environment() {
  static const bool allowed = switched_on_by_environment("KILN_FUSED_GROUPS");
  return allowed;
}

/// A step that may be in a group, and the element count it runs over (0: none).
std::int64_t group_total(const Plan::Step& step) {
  if (step.kind != Plan::Step::Kind::fused || step.fused_layout == nullptr || step.matmul) return 0;
  const FusedLayout& layout = *step.fused_layout;
  return runs_in_element_ranges(layout) ? layout.total : 0;
}

/// An elementwise step of one primitive (a flat step, or a kernel step over many elements) as
/// a fused step of one instruction, the same row kernel on the same elements; nothing for other
/// steps.
std::optional<Plan::Step> as_fused_step(const Plan& plan, const Plan::Step& step) {
  if (step.kind != Plan::Step::Kind::flat && step.kind != Plan::Step::Kind::kernel)
    return std::nullopt;
  if (!is_elementwise(step.prim) || step.matmul) return std::nullopt;
  const std::size_t arity = step.values.size() - 1;
  if (arity != operand_count(step.prim)) return std::nullopt;
  const Plan::Value& out = plan.values[static_cast<std::size_t>(step.values.back())];
  auto program = std::make_shared<FusedProgram>();
  FusedOp op;
  op.prim = step.prim;
  // The row kernel reads operand 0's dtype (where: its value operands').
  op.in_dtype =
      plan.values[static_cast<std::size_t>(step.values[step.prim == Prim::where ? 1 : 0])].dtype;
  op.out_dtype = out.dtype;
  std::string args;
  for (std::size_t k = 0; k < arity; ++k) {
    op.operands[k] = static_cast<std::int16_t>(k);
    args += (k > 0 ? ", in" : "in") + std::to_string(k);
  }
  program->num_inputs = arity;
  program->ops.push_back(op);
  program->text = std::string(name(step.prim)) + "(" + args + ")";
  resolve_fused_program(*program);

  Plan::Step fused = step;
  fused.kind = Plan::Step::Kind::fused;
  fused.flat = FlatCall{};
  fused.fn = nullptr;
  fused.attrs = nullptr;
  fused.program = program.get();
  fused.refs.clear();
  for (std::size_t k = 0; k < arity; ++k)
    fused.refs.push_back(plan.broadcast_layout_of(step.values[k], out.shape));
  fused.refs.push_back(plan.layout_of(step.values.back()));
  const std::span<const ArrayRef> refs(fused.refs);
  // No loop of its own yet: a group's one loop covers it (else with_own_loop, if grouped).
  fused.fused_layout =
      std::make_shared<FusedLayout>(layout_fused(refs.first(refs.size() - 1), refs.back()));
  fused.own_program = std::move(program);
  return fused;
}

/// A step from as_fused_step in a group that runs chunk by chunk: its generated loop.
void with_own_loop(Plan::Step& step) {
  if (step.fused_layout->loop != nullptr) return;
  auto layout = std::make_shared<FusedLayout>(*step.fused_layout);
  layout->loop = fused_loop_for(*step.program, *layout);
  step.fused_layout = std::move(layout);
}

/// How the steps of a group so far access one buffer.
struct Access {
  std::size_t root;
  std::int64_t offset;  // elements from the root's first element
  std::int64_t element_bytes;
  bool flat;     // read or written at the output's elements
  bool written;  // by a step of the group
  /// False for a new value that may be written over the variable's (Step::update_root): the
  /// same memory as the variable's access.
  bool own_memory = true;
};

/// The buffers a step writes: its output's, and the variable's whose value it may overwrite.
std::vector<Access> writes_of(const Plan& plan, const Plan::Step& step) {
  const Plan::Value& out = plan.values[static_cast<std::size_t>(step.values.back())];
  const auto bytes = static_cast<std::int64_t>(dtype_size(out.dtype));
  std::vector<Access> writes{
      {static_cast<std::size_t>(out.root), out.offset, bytes, true, true, step.update_root < 0}};
  if (step.update_root >= 0)  // the variable's value is read, if at all, with out's layout
    writes.push_back({static_cast<std::size_t>(step.update_root), 0, bytes, true, true});
  return writes;
}

/// The buffers a fused step reads: flat ones at its output's elements, others broadcast.
std::vector<Access> reads_of(const Plan& plan, const Plan::Step& step) {
  std::vector<Access> reads;
  const FusedLayout& layout = *step.fused_layout;
  for (std::size_t k = 0; k + 1 < step.values.size(); ++k) {
    const Plan::Value& v = plan.values[static_cast<std::size_t>(step.values[k])];
    reads.push_back({static_cast<std::size_t>(v.root), v.offset,
                     static_cast<std::int64_t>(dtype_size(v.dtype)),
                     layout.how[k] == FusedRead::flat, false});
  }
  return reads;
}

/// Whether two accesses of one buffer, one of them a write, touch each element only at the
/// same position of the group's walk.
bool aligned(const Access& a, const Access& b) {
  return a.flat && b.flat && a.offset == b.offset && a.element_bytes == b.element_bytes;
}

/// Whether `step` can join a group whose accesses so far are `seen`.
bool joins(const std::vector<Access>& seen, const std::vector<Access>& reads,
           const std::vector<Access>& writes) {
  for (const Access& s : seen) {
    for (const Access& r : reads)
      if (s.written && r.root == s.root && !aligned(s, r)) return false;
    for (const Access& w : writes)
      if (w.root == s.root && !aligned(s, w)) return false;
  }
  return true;
}

/// At most this many steps between a group's steps run before or after the group instead.
constexpr std::size_t max_moved_steps = 16;

/// The buffers a step reads and those it writes (its output's, and the variable's it may write
/// over), for steps of any kind.
struct RootAccesses {
  std::vector<std::size_t> reads, writes;
};
RootAccesses root_accesses(const Plan& plan, const Plan::Step& step) {
  RootAccesses a;
  for (std::size_t k = 0; k < step.num_reads(); ++k)
    a.reads.push_back(plan.root_of(step.values[k]));
  for (std::size_t k = step.num_reads(); k < step.values.size(); ++k)
    a.writes.push_back(plan.root_of(step.values[k]));
  if (step.update_root >= 0) a.writes.push_back(static_cast<std::size_t>(step.update_root));
  return a;
}

/// Whether running `later` before `earlier` could change what either computes: one writes a
/// buffer the other reads or writes.
bool conflict(const RootAccesses& earlier, const RootAccesses& later) {
  const auto meets = [](const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {
    return std::find_first_of(a.begin(), a.end(), b.begin(), b.end()) != a.end();
  };
  return meets(earlier.writes, later.reads) || meets(earlier.writes, later.writes) ||
         meets(earlier.reads, later.writes);
}

/// Whether a step between steps of a group can run before the group instead: it reads nothing
/// the group's steps so far write, and writes a buffer of its own (the group's steps read
/// nothing it writes: its output did not exist before it). A step that writes over a
/// variable's value runs after every other step, so that a call that fails changes no variable
/// (update_variables_in_place); it may still run before group steps that can neither fail nor
/// change anything the caller sees, those that write the call's arena (`group_in_arena`:
/// Nesterov's gradient times the rate, ahead of the update of the iteration count).
bool runs_before(const Plan& plan, const Plan::Step& step, const std::vector<Access>& seen,
                 bool group_in_arena) {
  if (step.kind == Plan::Step::Kind::region || step.group_size > 0) return false;
  if (step.update_root >= 0 && !group_in_arena) return false;
  const std::size_t out = plan.root_of(step.values.back());
  const auto variable = static_cast<std::size_t>(step.update_root);
  for (const Access& s : seen) {
    if (s.root == out || (step.update_root >= 0 && s.root == variable)) return false;
    for (std::size_t k = 0; k + 1 < step.values.size(); ++k)
      if (s.written && plan.root_of(step.values[k]) == s.root) return false;
  }
  return true;
}

/// Whether the buffers a group reads and writes element by element are together larger than
/// the last-level cache (streaming.hpp's bound), so that steps run one after the other would
/// each bring them in from memory again. Smaller ones stay in that cache between the steps, and
/// there the chunks ran slower than whole steps: Adam's updates of workload 9's variables (16
/// MiB of buffers for each weight) took 0.78-0.89 ms grouped against 0.73-0.81 (Zen 4, two
/// threads, docs/architecture.md).
bool beyond_the_caches(const std::vector<Access>& seen, std::int64_t total) {
  std::vector<std::size_t> roots;
  std::int64_t bytes = 0;
  for (const Access& a : seen) {
    if (!a.flat || !a.own_memory || std::find(roots.begin(), roots.end(), a.root) != roots.end())
      continue;
    roots.push_back(a.root);
    bytes += a.element_bytes;
  }
  return bytes * total > stream_output_bytes();
}

/// Whether the output of step m, in a group that ends before step `end`, is read after the
/// group: an output or an assigned value (escape buffers), a value a later step reads, or any
/// arena value where row updates read values after every step. The group's loop stores only
/// those (a product's scale that only the group's steps read stays in a register).
bool read_after(const Plan& plan, std::size_t m, std::size_t end) {
  const std::size_t root = plan.root_of(plan.steps[m].values.back());
  if (plan.roots[root].kind != Plan::Root::Kind::arena || plan.updates_rows) return true;
  for (std::size_t j = end; j < plan.steps.size(); ++j) {
    const Plan::Step& step = plan.steps[j];
    for (std::size_t k = 0; k < step.num_reads(); ++k)
      if (plan.root_of(step.values[k]) == root) return true;
  }
  return false;
}

/// The group of steps [first, end) as one program and its generated loop, or null when the
/// generator does not cover it (the interpreter's level, too many inputs, outputs or live
/// values): the steps' instructions in order, each step's inputs mapped to the program's
/// inputs (one per value) or, for an earlier step's output, to the register holding it.
std::shared_ptr<const FusedGroupLoop> merge_group(const Plan& plan, std::size_t first,
                                                  std::size_t end) {
  const std::size_t steps = end - first;
  if (steps - 1 > max_fused_extra_outputs) return nullptr;
  for (std::size_t m = first; m < end; ++m)
    if (plan.steps[m].refs.back().shape != plan.steps[first].refs.back().shape ||
        plan.steps[m].refs.back().dtype != DType::f32)
      return nullptr;  // the loop generator writes f32 outputs of one shape
  auto merged = std::make_shared<FusedGroupLoop>();
  std::vector<ArrayRef> refs;  // of the program's inputs
  // The instructions with operands as program inputs (>= 0) or earlier instructions (-1 - i).
  std::vector<FusedOp> ops;
  std::vector<std::array<std::int32_t, 3>> args;
  std::vector<std::int32_t> result_of(steps);  // each step's last instruction
  for (std::size_t m = 0; m < steps; ++m) {
    const Plan::Step& step = plan.steps[first + m];
    std::array<std::int32_t, max_fused_slots> writer_of{};  // the step's slots
    for (std::size_t i = 0; i < step.program->ops.size(); ++i) {
      const FusedOp& op = step.program->ops[i];
      std::array<std::int32_t, 3> a{};
      for (std::size_t j = 0; j < operand_count(op.prim); ++j) {
        if (op.operands[j] < 0) {
          a[j] = -1 - writer_of[static_cast<std::size_t>(-op.operands[j] - 1)];
          continue;
        }
        const auto k = static_cast<std::size_t>(op.operands[j]);
        const std::int32_t value = step.values[k];
        std::size_t earlier = 0;
        while (earlier < m && plan.steps[first + earlier].values.back() != value) ++earlier;
        if (earlier < m) {
          a[j] = -1 - result_of[earlier];
          continue;
        }
        const auto at = std::find(merged->inputs.begin(), merged->inputs.end(), value);
        a[j] = static_cast<std::int32_t>(at - merged->inputs.begin());
        if (at == merged->inputs.end()) {
          merged->inputs.push_back(value);
          refs.push_back(step.refs[k]);
        }
      }
      if (i + 1 < step.program->ops.size())
        writer_of[static_cast<std::size_t>(op.result_slot)] = static_cast<std::int32_t>(ops.size());
      ops.push_back(op);
      args.push_back(a);
    }
    result_of[m] = static_cast<std::int32_t>(ops.size() - 1);
    if (m + 1 < steps && read_after(plan, first + m, end))
      ops.back().store = static_cast<std::int16_t>(m);
  }
  if (merged->inputs.size() > max_fused_inputs) return nullptr;
  // Slots: each result that a later instruction reads holds one from its instruction to its
  // last read; every other result gets a free one too (liveness reads a slot's next reader).
  std::vector<std::size_t> last_read(ops.size(), 0);
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (std::size_t j = 0; j < operand_count(ops[i].prim); ++j)
      if (args[i][j] < 0) last_read[static_cast<std::size_t>(-1 - args[i][j])] = i;
  std::vector<std::int16_t> slot_of(ops.size(), -1);
  std::array<bool, max_fused_slots> busy{};
  FusedProgram& program = merged->program;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    FusedOp& op = ops[i];
    for (std::size_t j = 0; j < operand_count(op.prim); ++j) {
      const std::int32_t a = args[i][j];
      op.operands[j] =
          static_cast<std::int16_t>(a >= 0 ? a : -1 - slot_of[static_cast<std::size_t>(-1 - a)]);
    }
    if (i + 1 < ops.size()) {
      const auto free_slot = std::find(busy.begin(), busy.end(), false);
      if (free_slot == busy.end()) return nullptr;
      slot_of[i] = static_cast<std::int16_t>(free_slot - busy.begin());
      op.result_slot = slot_of[i];
      program.num_slots = std::max(program.num_slots, static_cast<std::size_t>(slot_of[i]) + 1);
      *free_slot = last_read[i] > i;  // results nothing reads free it at once
    }
    for (std::size_t j = 0; j < operand_count(op.prim); ++j)  // after the result took its slot
      if (args[i][j] < 0 && last_read[static_cast<std::size_t>(-1 - args[i][j])] == i)
        busy[static_cast<std::size_t>(slot_of[static_cast<std::size_t>(-1 - args[i][j])])] = false;
  }
  program.ops = std::move(ops);
  program.num_inputs = merged->inputs.size();
  program.num_extra_outputs = steps - 1;
  for (std::size_t m = 0; m < steps; ++m)
    program.text += (m > 0 ? "; " : "") + plan.steps[first + m].program->text;
  resolve_fused_program(program);
  auto layout = std::make_shared<FusedLayout>(layout_fused(refs, plan.steps[end - 1].refs.back()));
  layout->loop = fused_loop_for(program, *layout);
  if (layout->loop == nullptr) return nullptr;
  merged->layout = std::move(layout);
  return merged;
}

/// Its layout with the output stored through the caches (a later step of its group reads it).
void keep_output_cached(Plan::Step& step) {
  if (!step.fused_layout->stream_output) return;
  auto layout = std::make_shared<FusedLayout>(*step.fused_layout);
  layout->stream_output = false;
  layout->loop = fused_loop_for(*step.program, *layout);
  step.fused_layout = std::move(layout);
}

/// Makes steps [first, end) a group; an output a later step of the group reads stays in the
/// caches for it.
void mark_group(Plan& plan, std::size_t first, std::size_t end, std::vector<bool>& grouped) {
  std::fill(grouped.begin() + static_cast<std::ptrdiff_t>(first),
            grouped.begin() + static_cast<std::ptrdiff_t>(end), true);
  plan.steps[first].group_size = static_cast<std::int32_t>(end - first);
  for (std::size_t i = first; i + 1 < end; ++i) {
    const std::vector<Access> writes = writes_of(plan, plan.steps[i]);
    bool read_later = false;
    for (std::size_t j = i + 1; j < end && !read_later; ++j)
      for (const Access& r : reads_of(plan, plan.steps[j]))
        for (const Access& w : writes) read_later = read_later || r.root == w.root;
    if (read_later) keep_output_cached(plan.steps[i]);
  }
}

/// A group found from one step: its members and the steps between them that run before it
/// instead (plan positions, in order), what the members access, and the first form of members
/// that were steps of one primitive (they run as fused steps of one instruction in the group).
struct GroupScan {
  std::vector<std::size_t> members, moved;
  /// Steps between members that run after the group instead: variables' updates the group does
  /// not touch (Nesterov's updates of variables of other sizes, between those of this one).
  std::vector<std::size_t> deferred;
  std::vector<Access> seen;
  std::vector<Plan::Step> first_forms;
};

/// Whether a step writes only the call's arena: it can neither fail (no buffer to allocate)
/// nor change anything the caller sees.
bool writes_arena(const Plan& plan, const Plan::Step& step) {
  return step.update_root < 0 &&
         plan.roots[plan.root_of(step.values.back())].kind == Plan::Root::Kind::arena;
}

/// The group that starts at step s, if any (members empty: none). Steps of one primitive among
/// the members are fused steps in the plan already.
GroupScan scan_group(Plan& plan, std::size_t s) {
  GroupScan scan;
  std::optional<Plan::Step> first_fused = as_fused_step(plan, plan.steps[s]);
  const std::int64_t total = group_total(first_fused ? *first_fused : plan.steps[s]);
  if (total == 0) return scan;
  if (first_fused) scan.first_forms.push_back(std::exchange(plan.steps[s], *first_fused));
  scan.seen = reads_of(plan, plan.steps[s]);
  const std::vector<Access> first_writes = writes_of(plan, plan.steps[s]);
  scan.seen.insert(scan.seen.end(), first_writes.begin(), first_writes.end());
  scan.members.push_back(s);
  bool group_in_arena = writes_arena(plan, plan.steps[s]);
  std::vector<RootAccesses> deferred;  // what the deferred steps access
  const auto meets_deferred = [&](const RootAccesses& a) {
    for (const RootAccesses& d : deferred)
      if (conflict(d, a)) return true;
    return false;
  };
  for (std::size_t i = s + 1;
       i < plan.steps.size() && scan.members.size() < max_fused_group_steps &&
       scan.moved.size() + scan.deferred.size() < max_moved_steps;
       ++i) {
    const Plan::Step& step = plan.steps[i];
    // A step of one primitive over other than the group's elements cannot join: not built.
    const bool same_elements =
        plan.values[static_cast<std::size_t>(step.values.back())].shape.numel() == total;
    std::optional<Plan::Step> fused = same_elements ? as_fused_step(plan, step) : std::nullopt;
    const Plan::Step& candidate = fused ? *fused : step;
    const RootAccesses accesses = root_accesses(plan, step);
    if (group_total(candidate) == total) {
      const std::vector<Access> reads = reads_of(plan, candidate);
      const std::vector<Access> writes = writes_of(plan, candidate);
      if (!joins(scan.seen, reads, writes) || meets_deferred(accesses)) break;
      scan.seen.insert(scan.seen.end(), reads.begin(), reads.end());
      scan.seen.insert(scan.seen.end(), writes.begin(), writes.end());
      if (fused) scan.first_forms.push_back(std::exchange(plan.steps[i], *fused));
      scan.members.push_back(i);
      group_in_arena = group_in_arena && writes_arena(plan, plan.steps[i]);
    } else if (runs_before(plan, step, scan.seen, group_in_arena) && !meets_deferred(accesses)) {
      scan.moved.push_back(i);
    } else if (step.update_root >= 0 && step.kind != Plan::Step::Kind::region &&
               step.group_size == 0) {
      // An update runs after the group's members from here on: each of them is checked
      // against it as it joins.
      scan.deferred.push_back(i);
      deferred.push_back(accesses);
    } else {
      break;
    }
  }
  // The steps moved are those before the group's last step (later ones stay where they are).
  while (!scan.moved.empty() && scan.moved.back() > scan.members.back()) scan.moved.pop_back();
  while (!scan.deferred.empty() && scan.deferred.back() > scan.members.back())
    scan.deferred.pop_back();
  return scan;
}

/// Orders steps [first, end) of a group so that steps that depend on each other (one writes a
/// buffer the other reads or writes) are next to each other, each set in its order, the sets
/// in the order of their first steps; returns where each set ends. Steps of different sets touch
/// no buffer either writes, so any order of them computes the same. Nesterov's updates of four
/// variables, each a product, the momentum and the variable, come as the four products, then
/// the rest: this makes them one set per variable, and one loop each. A group with a step that
/// could fail or that the caller sees, other than a variable's update (one writing other than
/// the arena), keeps its order as one set.
std::vector<std::size_t> order_dependent_sets(Plan& plan, std::size_t first, std::size_t end) {
  const std::size_t n = end - first;
  for (std::size_t i = 0; i < n; ++i)
    if (plan.steps[first + i].update_root < 0 && !writes_arena(plan, plan.steps[first + i]))
      return {end};
  std::vector<std::size_t> set(n);
  for (std::size_t i = 0; i < n; ++i) set[i] = i;
  const auto find = [&](std::size_t i) {
    while (set[i] != i) i = set[i];
    return i;
  };
  std::vector<RootAccesses> accesses;
  for (std::size_t i = 0; i < n; ++i)
    accesses.push_back(root_accesses(plan, plan.steps[first + i]));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (conflict(accesses[i], accesses[j]))
        set[std::max(find(i), find(j))] = std::min(find(i), find(j));
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return find(a) < find(b); });
  std::vector<Plan::Step> steps;
  for (std::size_t i : order) steps.push_back(std::move(plan.steps[first + i]));
  std::move(steps.begin(), steps.end(), plan.steps.begin() + static_cast<std::ptrdiff_t>(first));
  std::vector<std::size_t> ends;
  for (std::size_t k = 0; k < n; ++k)
    if (k + 1 == n || find(order[k]) != find(order[k + 1])) ends.push_back(first + k + 1);
  return ends;
}

/// One loop per run of a set of dependent steps [first, end) the generator covers together, the
/// longest from each start; whether any was made.
bool merge_runs(Plan& plan, std::size_t first, std::size_t end, std::vector<bool>& grouped) {
  bool merged = false;
  for (std::size_t from = first; from + 1 < end;) {
    std::size_t to = end;
    std::shared_ptr<const FusedGroupLoop> loop;
    while (to >= from + 2 && (loop = merge_group(plan, from, to)) == nullptr) --to;
    if (loop == nullptr) {
      ++from;
      continue;
    }
    plan.steps[from].group_loop = std::move(loop);
    mark_group(plan, from, to, grouped);
    merged = true;
    from = to;
  }
  return merged;
}

}  // namespace

void group_elementwise_steps(Plan& plan) {
  if (!groups_allowed_by_environment()) return;
  std::size_t s = 0;
  while (s < plan.steps.size()) {
    GroupScan scan = scan_group(plan, s);
    if (scan.members.size() < 2) {
      for (Plan::Step& step : scan.first_forms) plan.steps[s] = std::move(step);
      ++s;
      continue;
    }
    if (!scan.moved.empty() || !scan.deferred.empty()) {
      std::vector<Plan::Step> order;
      for (const auto* steps : {&scan.moved, &scan.members, &scan.deferred})
        for (std::size_t i : *steps) order.push_back(std::move(plan.steps[i]));
      std::move(order.begin(), order.end(), plan.steps.begin() + static_cast<std::ptrdiff_t>(s));
      s += scan.moved.size();
    }
    const std::size_t end = s + scan.members.size();
    std::vector<bool> grouped(plan.steps.size(), false);
    // One loop per set of dependent steps (Adam's or momentum's steps for one variable), as the
    // generator covers them; without loops, chunks gain only on buffers beyond the caches.
    bool merged = false;
    std::size_t set_first = s;
    for (const std::size_t set_end : order_dependent_sets(plan, s, end)) {
      merged = merge_runs(plan, set_first, set_end, grouped) || merged;
      set_first = set_end;
    }
    const std::int64_t total = plan.steps[s].fused_layout->total;
    if (!merged && total >= 2 * fused_group_chunk && beyond_the_caches(scan.seen, total)) {
      mark_group(plan, s, end, grouped);
      for (std::size_t i = s; i < end; ++i)
        if (plan.steps[i].own_program != nullptr) with_own_loop(plan.steps[i]);
    }
    // A step of one primitive left outside every group runs in its first form.
    for (Plan::Step& form : scan.first_forms)
      for (std::size_t i = s; i < end; ++i)
        if (plan.steps[i].node == form.node && plan.steps[i].own_program != nullptr && !grouped[i])
          plan.steps[i] = std::move(form);
    s = end;
  }
}

}  // namespace kiln::detail

// Elementwise fusion: trees of elementwise primitives with one output shape become one fused
// node that runs a register program over blocks (kernels/fused.hpp).
//
// A group grows from a root (the last node of the tree, visited from the end of the graph)
// through operands that are elementwise, have the root's exact shape, are used exactly once
// (by the group) and are not outputs of the function. Everything else an instruction reads
// is an external input: a parameter, constant, variable, view or any other node, broadcast to
// the output shape with strides as the elementwise kernels read it.
#include <fmt/format.h>

#include <algorithm>

#include "jit/graph.hpp"

namespace kiln::detail {

namespace {

bool fusible(const Node& n) {
  return n.kind == Node::Kind::primitive && is_elementwise(n.prim) && n.inputs.size() <= 3;
}

/// How graph listings print a fused program's instruction: "(a + b)" for primitives with an
/// infix label in primitives.def, "cast<f64>(a)", else "name(a, b)".
std::string op_text(const Node& n, const std::vector<std::string>& args) {
  if (n.prim == Prim::cast) return fmt::format("cast<{}>({})", dtype_name(n.dtype), args[0]);
  if (const std::string_view label = info(n.prim).label; !label.empty() && args.size() == 2)
    return fmt::format("({} {} {})", args[0], label, args[1]);
  return fmt::format("{}({})", name(n.prim), fmt::join(args, ", "));
}

/// A group being grown: members in graph order and the distinct external inputs.
struct Group {
  std::vector<std::int32_t> members;
  std::vector<std::int32_t> externals;
};

}  // namespace

std::size_t fuse_elementwise(GraphData& g) {
  const std::size_t n = g.nodes.size();
  std::vector<int> uses(n, 0);
  for (const Node& node : g.nodes)
    for (auto in : node.inputs) ++uses[static_cast<std::size_t>(in)];
  for (auto o : g.outputs) uses[static_cast<std::size_t>(o)] += 2;  // never absorbed
  std::vector<bool> taken(n, false);
  std::size_t made = 0;

  for (std::size_t r = n; r-- > 0;) {
    const Node& root = g.nodes[r];
    if (taken[r] || !fusible(root)) continue;
    Group group;
    group.members.push_back(static_cast<std::int32_t>(r));
    taken[r] = true;
    // Grow depth-first through single-use elementwise operands of the same shape.
    std::vector<std::int32_t> stack{static_cast<std::int32_t>(r)};
    while (!stack.empty()) {
      const Node& m = g.nodes[static_cast<std::size_t>(stack.back())];
      stack.pop_back();
      for (auto in : m.inputs) {
        const auto i = static_cast<std::size_t>(in);
        const Node& operand = g.nodes[i];
        const bool absorb = !taken[i] && fusible(operand) && uses[i] == 1 &&
                            operand.shape == root.shape && group.members.size() < max_fused_ops;
        if (absorb) {
          taken[i] = true;
          group.members.push_back(in);
          stack.push_back(in);
        }
      }
    }
    std::sort(group.members.begin(), group.members.end());
    const auto is_member = [&](std::int32_t id) {
      return std::binary_search(group.members.begin(), group.members.end(), id);
    };
    for (auto m : group.members)
      for (auto in : g.nodes[static_cast<std::size_t>(m)].inputs)
        if (!is_member(in) &&
            std::find(group.externals.begin(), group.externals.end(), in) == group.externals.end())
          group.externals.push_back(in);
    if (group.members.size() < 2 || group.externals.size() > max_fused_inputs) {
      // Too small to gain, or too many inputs: leave the nodes as they are (the operands may
      // still root groups of their own).
      for (auto m : group.members)
        if (static_cast<std::size_t>(m) != r) taken[static_cast<std::size_t>(m)] = false;
      continue;
    }

    // The register program: members in graph order; each member's value lives in a scratch
    // slot from its instruction to its one use.
    auto program = std::make_shared<FusedProgram>();
    program->num_inputs = group.externals.size();
    std::vector<std::int16_t> slot_of(group.members.size(), -1);
    std::vector<std::string> text_of(group.members.size());
    std::vector<bool> slot_busy(max_fused_slots, false);
    bool fits = true;
    for (std::size_t k = 0; k < group.members.size() && fits; ++k) {
      const Node& m = g.nodes[static_cast<std::size_t>(group.members[k])];
      FusedOp op;
      op.prim = m.prim;
      op.out_dtype = m.dtype;
      std::vector<std::string> args;
      std::vector<std::int16_t> freed;
      for (std::size_t a = 0; a < m.inputs.size(); ++a) {
        const std::int32_t in = m.inputs[a];
        if (is_member(in)) {
          const auto pos = static_cast<std::size_t>(
              std::lower_bound(group.members.begin(), group.members.end(), in) -
              group.members.begin());
          op.operands[a] = static_cast<std::int16_t>(-(slot_of[pos] + 1));
          freed.push_back(slot_of[pos]);  // its only use: free once this op has its result slot
          args.push_back(text_of[pos]);
        } else {
          const auto e = std::find(group.externals.begin(), group.externals.end(), in) -
                         group.externals.begin();
          op.operands[a] = static_cast<std::int16_t>(e);
          args.push_back(fmt::format("in{}", e));
        }
      }
      // The row kernel reads operand 0's dtype (where: its value operands').
      const std::int32_t typed = m.inputs[m.prim == Prim::where ? 1 : 0];
      op.in_dtype = g.nodes[static_cast<std::size_t>(typed)].dtype;
      if (k + 1 < group.members.size()) {
        const auto free_slot = std::find(slot_busy.begin(), slot_busy.end(), false);
        if (free_slot == slot_busy.end()) {
          fits = false;
          break;
        }
        *free_slot = true;
        slot_of[k] = static_cast<std::int16_t>(free_slot - slot_busy.begin());
        op.result_slot = slot_of[k];
        program->num_slots = std::max(program->num_slots, static_cast<std::size_t>(slot_of[k]) + 1);
      }
      // Results never overwrite their own operands: kernels whose input and output element
      // sizes differ (comparisons, casts) would clobber input not yet read.
      for (auto f : freed) slot_busy[static_cast<std::size_t>(f)] = false;
      text_of[k] = op_text(m, args);
      program->ops.push_back(op);
    }
    if (!fits) {
      for (auto m : group.members)
        if (static_cast<std::size_t>(m) != r) taken[static_cast<std::size_t>(m)] = false;
      continue;
    }
    program->text = text_of.back();
    resolve_fused_program(*program);

    Node& target = g.nodes[r];
    target.kind = Node::Kind::fused;
    target.inputs = group.externals;
    target.attrs = Attrs{};
    target.program = std::move(program);
    ++made;
  }
  if (made > 0) eliminate_dead_code(g);
  return made;
}

}  // namespace kiln::detail

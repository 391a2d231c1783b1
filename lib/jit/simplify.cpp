// Graph passes that rewrite values without changing what the function computes: constant
// folding and algebraic simplification. Each pass works on the graph alone (graph in, graph
// out) and is tested on its own in test/test_passes.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/tensor_impl.hpp"
#include "jit/graph.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln::detail {

namespace {

bool is_static(const Node& n) { return !n.shape.has_dynamic_dims(); }

std::vector<std::int32_t> identity_map(std::size_t n) {
  std::vector<std::int32_t> r(n);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

/// True when constant node n holds `value` in every element (small constants only). A
/// floating-point zero must also have value's sign: x + -0 and x - +0 are x for every x, but
/// x + +0 and x - -0 turn -0 into +0, which eager ops would return.
bool constant_equals(const Node& n, double value) {
  if (n.kind != Node::Kind::constant || !is_static(n)) return false;
  constexpr std::int64_t max_checked = 4096;
  if (n.constant.size() > max_checked || n.constant.size() == 0) return false;
  const std::vector<double> values = cast(n.constant, DType::f64).to_vector<double>();
  const bool signed_zero = is_floating(n.dtype);
  return std::all_of(values.begin(), values.end(), [&](double v) {
    return v == value && (!signed_zero || std::signbit(v) == std::signbit(value));
  });
}

/// How many times each node is used (as an input, an output or a side effect).
std::vector<std::int32_t> use_counts(const GraphData& g) {
  std::vector<std::int32_t> uses(g.nodes.size(), 0);
  for (const Node& n : g.nodes)
    for (auto in : n.inputs) ++uses[static_cast<std::size_t>(in)];
  for (auto o : g.outputs) ++uses[static_cast<std::size_t>(o)];
  for (auto s : g.side_effects) ++uses[static_cast<std::size_t>(s)];
  return uses;
}

/// A sum of zero-pads along one axis whose ranges tile that axis is a concatenation:
/// add(pad(a, [0, 96]), pad(b, [32, 64]), ...) -> concat(a, b, ...). This is the gradient of
/// split (one pad per slice, summed by the tape), e.g. of an LSTM's gates and of its time steps:
/// one copy instead of a full-size pad per part plus the adds. Rewrites add node `root` in
/// place; the adds of the tree (each used once) and the pads become dead. Returns whether it did.
bool concat_tiled_pads(GraphData& g, std::size_t root, const std::vector<std::int32_t>& uses) {
  const Node& top = g.nodes[root];
  std::vector<std::int32_t> leaves, stack{top.inputs[0], top.inputs[1]};
  while (!stack.empty()) {
    const std::int32_t id = stack.back();
    stack.pop_back();
    const Node& n = g.nodes[static_cast<std::size_t>(id)];
    if (n.kind == Node::Kind::primitive && n.prim == Prim::add &&
        uses[static_cast<std::size_t>(id)] == 1 && n.shape == top.shape && n.dtype == top.dtype) {
      stack.push_back(n.inputs[0]);
      stack.push_back(n.inputs[1]);
    } else {
      leaves.push_back(id);
    }
  }
  struct Part {
    std::int64_t begin, end;
    std::int32_t input;
  };
  std::vector<Part> parts;
  std::int64_t axis = -1;
  for (auto id : leaves) {
    const Node& p = g.nodes[static_cast<std::size_t>(id)];
    if (p.kind != Node::Kind::primitive || p.prim != Prim::pad || p.attrs.value != 0.0 ||
        p.shape != top.shape || p.dtype != top.dtype)
      return false;
    std::int64_t padded_axis = -1;
    for (std::size_t d = 0; d < p.shape.size(); ++d) {
      if (p.attrs.ints[2 * d] == 0 && p.attrs.ints[2 * d + 1] == 0) continue;
      if (padded_axis >= 0) return false;  // padded along two axes
      padded_axis = static_cast<std::int64_t>(d);
    }
    if (padded_axis < 0 || (axis >= 0 && padded_axis != axis)) return false;
    axis = padded_axis;
    const auto a = static_cast<std::size_t>(axis);
    if (is_dynamic_dim(p.shape[a])) return false;
    parts.push_back({p.attrs.ints[2 * a], p.shape[a] - p.attrs.ints[2 * a + 1], p.inputs[0]});
  }
  std::sort(parts.begin(), parts.end(),
            [](const Part& x, const Part& y) { return x.begin < y.begin; });
  std::int64_t covered = 0;
  for (const Part& part : parts) {
    if (part.begin != covered) return false;  // a gap or an overlap
    covered = part.end;
  }
  if (covered != top.shape[static_cast<std::size_t>(axis)]) return false;
  Node& n = g.nodes[root];
  n.prim = Prim::concat;
  n.attrs = Attrs{};
  n.attrs.axis = axis;
  n.inputs.clear();
  for (const Part& part : parts) n.inputs.push_back(part.input);
  return true;
}

}  // namespace

std::size_t fold_constants(GraphData& g) {
  std::size_t folded = 0;
  std::vector<const Tensor*> inputs;
  for (Node& n : g.nodes) {
    if (n.kind != Node::Kind::primitive || n.inputs.empty() || !is_static(n) ||
        is_collective(n.prim))
      continue;
    bool all_constant = true;
    for (auto in : n.inputs)
      all_constant =
          all_constant && g.nodes[static_cast<std::size_t>(in)].kind == Node::Kind::constant;
    if (!all_constant || n.shape.numel() > max_folded_elements) continue;
    inputs.clear();
    for (auto in : n.inputs) inputs.push_back(&g.nodes[static_cast<std::size_t>(in)].constant);
    Tensor value = run_primitive(n.prim, inputs, n.attrs, n.dtype, n.shape);
    n.kind = Node::Kind::constant;
    n.constant = std::move(value);
    n.inputs.clear();
    n.attrs = Attrs{};
    ++folded;
  }
  if (folded > 0) eliminate_dead_code(g);
  return folded;
}

namespace {

/// The columns of a fused recurrence's output that hold its state (lstm_sequence: h and c;
/// gru_sequence: h), or 0 for other nodes.
std::int64_t state_columns(const GraphData& g, const Node& n) {
  if (n.kind != Node::Kind::primitive ||
      (n.prim != Prim::lstm_sequence && n.prim != Prim::gru_sequence))
    return 0;
  const std::int64_t units = g.nodes[static_cast<std::size_t>(n.inputs[1])].shape.back();
  return n.prim == Prim::lstm_sequence ? 2 * units : units;
}

/// lstm_sequence and gru_sequence keep their gate activations for a gradient (ops/recurrent.hpp)
/// whenever they are traced. Where every use of the output is a slice within the state columns
/// (a forward pass: nothing differentiated it), the gates are never read: the node drops them
/// (the slices' starts and steps stay valid). Returns the count.
std::size_t drop_unread_gates(GraphData& g) {
  std::vector<bool> only_state_slices(g.nodes.size(), true);
  for (auto o : g.outputs) only_state_slices[static_cast<std::size_t>(o)] = false;
  for (auto s : g.side_effects) only_state_slices[static_cast<std::size_t>(s)] = false;
  for (const Node& n : g.nodes) {
    for (auto in : n.inputs) {
      const std::int64_t columns = state_columns(g, g.nodes[static_cast<std::size_t>(in)]);
      if (columns == 0) continue;
      const bool reads_state = n.kind == Node::Kind::primitive && n.prim == Prim::slice &&
                               n.shape[2] > 0 &&
                               n.attrs.ints[4] + (n.shape[2] - 1) * n.attrs.ints[5] < columns;
      if (!reads_state) only_state_slices[static_cast<std::size_t>(in)] = false;
    }
  }
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    const std::int64_t columns = state_columns(g, n);
    if (columns == 0 || !only_state_slices[i] || n.shape[2] == columns) continue;
    n.shape[2] = columns;
    ++dropped;
  }
  return dropped;
}

}  // namespace

std::size_t simplify_algebra(GraphData& g) {
  const std::size_t dropped_gates = drop_unread_gates(g);
  std::vector<std::int32_t> replacement = identity_map(g.nodes.size());
  const std::vector<std::int32_t> uses = use_counts(g);
  std::size_t simplified = 0;
  const auto node = [&](std::int32_t id) -> Node& { return g.nodes[static_cast<std::size_t>(id)]; };
  const auto bypass = [&](std::size_t i, std::int32_t to) {
    replacement[i] = to;
    ++simplified;
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (auto& in : n.inputs) in = replacement[static_cast<std::size_t>(in)];
    if (n.kind != Node::Kind::primitive) continue;
    // x op identity -> x, when x already has the result's dtype and shape (no broadcast).
    const auto same_as = [&](std::int32_t id) {
      const Node& x = node(id);
      return x.dtype == n.dtype && x.shape == n.shape;
    };
    switch (n.prim) {
      case Prim::mul:
      case Prim::add: {
        if (n.prim == Prim::add && concat_tiled_pads(g, i, uses)) {
          ++simplified;
          break;
        }
        const double identity = n.prim == Prim::mul ? 1.0 : -0.0;
        const std::int32_t a = n.inputs[0], b = n.inputs[1];
        if (constant_equals(node(b), identity) && same_as(a))
          bypass(i, a);
        else if (constant_equals(node(a), identity) && same_as(b))
          bypass(i, b);
        break;
      }
      case Prim::sub:
      case Prim::div: {
        const double identity = n.prim == Prim::div ? 1.0 : 0.0;
        if (constant_equals(node(n.inputs[1]), identity) && same_as(n.inputs[0]))
          bypass(i, n.inputs[0]);
        break;
      }
      case Prim::neg: {
        const Node& x = node(n.inputs[0]);
        if (x.kind == Node::Kind::primitive && x.prim == Prim::neg) bypass(i, x.inputs[0]);
        break;
      }
      case Prim::cast:
      case Prim::broadcast_to:
      case Prim::reshape:
        if (same_as(n.inputs[0])) {
          bypass(i, n.inputs[0]);
        } else if (n.prim == Prim::reshape) {
          // reshape(reshape(x)) -> reshape(x): the inner result is no longer needed here.
          const Node& x = node(n.inputs[0]);
          if (x.kind == Node::Kind::primitive && x.prim == Prim::reshape) {
            n.inputs[0] = x.inputs[0];
            ++simplified;
            if (same_as(n.inputs[0])) bypass(i, n.inputs[0]);
          }
        }
        break;
      case Prim::slice: {
        // slice(pad(x)) that reads only x's part of the padded tensor is a slice of x (the
        // gradient of a slice, read back in part: lstm_sequence's state columns).
        const Node& padded = node(n.inputs[0]);
        if (padded.kind == Node::Kind::primitive && padded.prim == Prim::pad && is_static(n) &&
            is_static(padded)) {
          const Node& x = node(padded.inputs[0]);
          bool inside = is_static(x);
          for (std::size_t d = 0; inside && d < n.shape.size(); ++d) {
            const std::int64_t start = n.attrs.ints[2 * d], step = n.attrs.ints[2 * d + 1];
            const std::int64_t before = padded.attrs.ints[2 * d];
            inside = n.shape[d] == 0 || (step >= 1 && start >= before &&
                                         start + (n.shape[d] - 1) * step < before + x.shape[d]);
          }
          // Or x lies inside the slice's range (step 1): the slice is x with less padding.
          bool covers = is_static(x) && !inside;
          for (std::size_t d = 0; covers && d < n.shape.size(); ++d) {
            const std::int64_t start = n.attrs.ints[2 * d], before = padded.attrs.ints[2 * d];
            covers = (n.attrs.ints[2 * d + 1] == 1 || n.shape[d] <= 1) && start <= before &&
                     before + x.shape[d] <= start + n.shape[d];
          }
          if (inside) {
            for (std::size_t d = 0; d < n.shape.size(); ++d)
              n.attrs.ints[2 * d] -= padded.attrs.ints[2 * d];
            n.inputs[0] = padded.inputs[0];
            ++simplified;
          } else if (covers) {
            std::vector<std::int64_t> widths;
            for (std::size_t d = 0; d < n.shape.size(); ++d) {
              const std::int64_t before = padded.attrs.ints[2 * d] - n.attrs.ints[2 * d];
              widths.push_back(before);
              widths.push_back(n.shape[d] - before - x.shape[d]);
            }
            const double value = padded.attrs.value;
            n.prim = Prim::pad;
            n.attrs = Attrs{};
            n.attrs.ints = std::move(widths);
            n.attrs.value = value;
            n.inputs = {padded.inputs[0]};
            ++simplified;
            break;
          }
        }
        bool whole = same_as(n.inputs[0]);
        for (std::size_t d = 0; whole && d < n.shape.size(); ++d)
          whole = n.attrs.ints[2 * d] == 0 && n.attrs.ints[2 * d + 1] == 1;
        if (whole) bypass(i, n.inputs[0]);
        break;
      }
      case Prim::pad: {
        // pad(pad(x)) with one fill value: one pad of the summed widths.
        const Node& inner = node(n.inputs[0]);
        if (inner.kind == Node::Kind::primitive && inner.prim == Prim::pad &&
            inner.attrs.value == n.attrs.value && inner.attrs.ints.size() == n.attrs.ints.size()) {
          for (std::size_t k = 0; k < n.attrs.ints.size(); ++k)
            n.attrs.ints[k] += inner.attrs.ints[k];
          n.inputs[0] = inner.inputs[0];
          ++simplified;
        }
        break;
      }
      case Prim::transpose: {
        // transpose(transpose(x, p), q) = transpose(x, p∘q): axis d of the result is axis
        // p[q[d]] of x.
        const Node& x = node(n.inputs[0]);
        if (x.kind == Node::Kind::primitive && x.prim == Prim::transpose) {
          Shape composed = n.attrs.axes;
          for (std::size_t d = 0; d < composed.size(); ++d)
            composed[d] = x.attrs.axes[static_cast<std::size_t>(n.attrs.axes[d])];
          n.attrs.axes = composed;
          n.inputs[0] = x.inputs[0];
          ++simplified;
        }
        bool identity = true;
        for (std::size_t d = 0; identity && d < n.attrs.axes.size(); ++d)
          identity = n.attrs.axes[d] == static_cast<std::int64_t>(d);
        if (identity && same_as(n.inputs[0])) bypass(i, n.inputs[0]);
        break;
      }
      default:
        break;
    }
  }
  if (simplified > 0) replace_uses(g, replacement);
  return simplified + dropped_gates;
}

}  // namespace kiln::detail

// Graph passes that rewrite values without changing what the function computes: constant
// folding and algebraic simplification. Each pass works on the graph alone (graph in, graph
// out) and is tested on its own in test/test_passes.cpp.
#include <algorithm>
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

/// True when constant node n holds `value` in every element (small constants only).
bool constant_equals(const Node& n, double value) {
  if (n.kind != Node::Kind::constant || !is_static(n)) return false;
  constexpr std::int64_t max_checked = 4096;
  if (n.constant.size() > max_checked || n.constant.size() == 0) return false;
  const std::vector<double> values = cast(n.constant, DType::f64).to_vector<double>();
  return std::all_of(values.begin(), values.end(), [&](double v) { return v == value; });
}

}  // namespace

std::size_t fold_constants(GraphData& g) {
  std::size_t folded = 0;
  std::vector<const Tensor*> inputs;
  for (Node& n : g.nodes) {
    if (n.kind != Node::Kind::primitive || n.inputs.empty() || !is_static(n)) continue;
    bool all_constant = true;
    for (auto in : n.inputs)
      all_constant = all_constant && g.nodes[static_cast<std::size_t>(in)].kind ==
                                         Node::Kind::constant;
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

std::size_t simplify_algebra(GraphData& g) {
  std::vector<std::int32_t> replacement = identity_map(g.nodes.size());
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
        const double identity = n.prim == Prim::mul ? 1.0 : 0.0;
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
        bool whole = same_as(n.inputs[0]);
        for (std::size_t d = 0; whole && d < n.shape.size(); ++d)
          whole = n.attrs.ints[2 * d] == 0 && n.attrs.ints[2 * d + 1] == 1;
        if (whole) bypass(i, n.inputs[0]);
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
  return simplified;
}

}  // namespace kiln::detail

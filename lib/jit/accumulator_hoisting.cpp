// Accumulator hoisting: a scan carry that only sums per-step matrix products becomes one
// product over all steps, after the loop (docs/architecture.md, "Graph passes").
//
// The pattern is what a scan's gradient makes of a captured weight used as a matmul operand:
// the backward body's carry holds one accumulator per capture, acc' = acc + g_capture, and for
// W in h @ W that term is transpose(h_t) @ dz_t, a [m, K] x [K, n] product whose K is the
// batch rows. Per step that is a GEMM with a short contraction plus a pass over the whole
// [m, n] accumulator; over all steps it is one [m, T·K] x [T·K, n] product.
//
// Matched, for carry k of a scan with a static step count T:
//   - carry k's parameter has one use in the body, inside the sum that computes its next value;
//   - that next value is used once (as carry output k) and is a tree of adds (each inner add
//     used once) whose leaves are the parameter, all-zero constants (dropped: they only turn
//     a -0 into +0), and at least one term M = matmul(transpose(P), B) with P [K, m], B [K, n]
//     of static shapes, M [m, n] used once and not depending on carry k. No other leaf.
//   - Profitable: the operands that become new stacked ys cost K·(m + n) floats per step at
//     most (an operand that already is an x slice costs nothing), no more than the m·n of
//     the accumulator each step reads and writes.
// Rewrite: P and B become new ys of the scan (P's own xs when P is an x slice), appended after
// the existing results, so result indices before them (carries aside, saved residuals
// included) keep their meaning. Carry k is removed from the scan (input, parameter, output);
// its result is replaced by init_k + sum of transpose(reshape(Ps, [T·K, m])) @
// reshape(Bs, [T·K, n]) (just the products when init_k is an all-zero constant). A dynamic
// T is left alone: a reshape cannot merge a dynamic dim with another (dims have no
// arithmetic), so there is no [T·K, m] shape to write.
//
// Regions are shared, so a rewritten region is a new GraphData. The pass runs after
// hoist_loop_invariants (whose per-step hoisting has already turned the backward body's
// replayed forward step into xs) and, like it, sees one level: run_graph_passes reaches nested
// scans through their enclosing region graphs.
#include <algorithm>
#include <memory>

#include "jit/graph.hpp"
#include "jit/passes.hpp"
#include "kiln/ops.hpp"

namespace kiln::detail {

namespace {

bool is_prim(const Node& n, Prim p) { return n.kind == Node::Kind::primitive && n.prim == p; }

bool static_shape(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](std::int64_t d) { return is_dynamic_dim(d); });
}

/// True when constant node n is all zeros (any size: a weight-shaped accumulator's zeros are
/// large). Checked once per candidate, eagerly.
bool all_zero_constant(const Node& n) {
  if (n.kind != Node::Kind::constant || !static_shape(n.shape) || !is_floating(n.dtype))
    return false;
  if (n.constant.size() == 0) return true;
  return max(abs(cast(n.constant, DType::f64))).item<double>() == 0.0;
}

/// One hoisted term of an accumulator: transpose(P) @ B, with P and B read per step.
struct Term {
  std::int32_t p = -1, b = -1;  // body nodes [K, m] and [K, n]
};

/// A carry whose accumulation moves out of the loop.
struct Accumulator {
  std::size_t carry = 0;
  std::vector<Term> terms;
};

/// Which body nodes depend on parameter node `param`.
std::vector<bool> depends_on(const GraphData& body, std::size_t param) {
  std::vector<bool> dep(body.nodes.size(), false);
  dep[param] = true;
  for (std::size_t i = param + 1; i < body.nodes.size(); ++i)
    for (auto in : body.nodes[i].inputs) dep[i] = dep[i] || dep[static_cast<std::size_t>(in)];
  return dep;
}

/// Matches carry k of `body` (see the file comment); returns no terms when it does not match.
Accumulator match_carry(const GraphData& body, std::size_t k, std::size_t nc, std::size_t nx,
                        const std::vector<std::int32_t>& uses, bool only_stacked) {
  Accumulator acc{k, {}};
  std::int32_t param = -1;
  for (std::size_t i = 0; i < body.nodes.size(); ++i)
    if (body.nodes[i].kind == Node::Kind::parameter &&
        body.nodes[i].index == static_cast<std::int32_t>(k))
      param = static_cast<std::int32_t>(i);
  const std::int32_t next = body.outputs[k];
  const auto node = [&](std::int32_t i) -> const Node& {
    return body.nodes[static_cast<std::size_t>(i)];
  };
  if (param < 0 || uses[static_cast<std::size_t>(param)] != 1 || !is_prim(node(next), Prim::add) ||
      uses[static_cast<std::size_t>(next)] != 1 || !is_floating(node(next).dtype) ||
      node(next).shape.size() != 2 || !static_shape(node(next).shape))
    return acc;
  const Shape& shape = node(next).shape;
  const std::vector<bool> dep = depends_on(body, static_cast<std::size_t>(param));
  std::vector<std::int32_t> leaves, stack{next};
  while (!stack.empty()) {
    const std::int32_t i = stack.back();
    stack.pop_back();
    if (is_prim(node(i), Prim::add) && node(i).shape == shape &&
        (i == next || uses[static_cast<std::size_t>(i)] == 1)) {
      for (auto in : node(i).inputs) stack.push_back(in);
    } else {
      leaves.push_back(i);
    }
  }
  bool saw_param = false;
  // Stacked over the steps already: an x slice, or a y (a result after the carries).
  const auto is_x_slice = [&](std::int32_t i) {
    const Node& n = node(i);
    if (n.kind == Node::Kind::parameter && static_cast<std::size_t>(n.index) >= nc &&
        static_cast<std::size_t>(n.index) < nc + nx)
      return true;
    return std::find(body.outputs.begin() + static_cast<std::ptrdiff_t>(nc), body.outputs.end(),
                     i) != body.outputs.end();
  };
  std::int64_t stacked_floats = 0;  // per step, of the new ys
  for (auto leaf : leaves) {
    const Node& n = node(leaf);
    if (leaf == param && !saw_param) {
      saw_param = true;
      continue;
    }
    if (all_zero_constant(n) && n.shape == shape && n.dtype == node(next).dtype) continue;
    if (!is_prim(n, Prim::matmul) || uses[static_cast<std::size_t>(leaf)] != 1 ||
        dep[static_cast<std::size_t>(leaf)] || n.shape != shape) {
      acc.terms.clear();
      return acc;
    }
    const Node& lhs = node(n.inputs[0]);
    const Node& rhs = node(n.inputs[1]);
    const bool transposed = is_prim(lhs, Prim::transpose) && lhs.attrs.axes == Shape{1, 0};
    const Node* p = transposed ? &node(lhs.inputs[0]) : nullptr;
    if (p == nullptr || p->shape.size() != 2 || rhs.shape.size() != 2 || !static_shape(p->shape) ||
        !static_shape(rhs.shape) || p->shape[0] != rhs.shape[0]) {
      acc.terms.clear();
      return acc;
    }
    const Term t{lhs.inputs[0], n.inputs[1]};
    stacked_floats += (is_x_slice(t.p) ? 0 : p->shape[0] * p->shape[1]) +
                      (is_x_slice(t.b) ? 0 : rhs.shape[0] * rhs.shape[1]);
    acc.terms.push_back(t);
  }
  if (!saw_param || stacked_floats > shape[0] * shape[1] || (only_stacked && stacked_floats > 0))
    acc.terms.clear();
  return acc;
}

std::int32_t push(std::vector<Node>& outer, Node n) {
  outer.push_back(std::move(n));
  return static_cast<std::int32_t>(outer.size() - 1);
}

Node primitive(Prim p, std::vector<std::int32_t> inputs, DType dtype, const Shape& shape) {
  Node n;
  n.kind = Node::Kind::primitive;
  n.prim = p;
  n.inputs = std::move(inputs);
  n.dtype = dtype;
  n.shape = shape;
  return n;
}

/// A rewritten scan: what replaces each old result index (-1: the result keeps its meaning, at
/// `new_index`).
struct ScanRewrite {
  std::int32_t scan = -1;                 // the scan's outer node
  std::vector<std::int32_t> replacement;  // by old result index: an outer node, or -1
  std::vector<std::int32_t> new_index;    // by old result index
};

/// Hoists the accumulators of scan node `scan` (inputs in `outer`'s numbering) and appends
/// the scan, then the nodes computing the hoisted results, to `outer`. Returns the result
/// mapping (empty when nothing matched; the scan is then appended unchanged).
ScanRewrite hoist_scan_accumulators(Node scan, std::vector<Node>& outer, std::size_t& hoisted) {
  const std::shared_ptr<const GraphData> old_region = scan.regions[0];  // outlives the swap
  const GraphData& body = *old_region;
  const auto nc = static_cast<std::size_t>(scan.attrs.ints[0]);
  const auto nx = static_cast<std::size_t>(scan.attrs.ints[1]);
  const std::int64_t steps =
      nx > 0 ? outer[static_cast<std::size_t>(scan.inputs[nc])].shape[0] : scan.attrs.axis;
  ScanRewrite result;
  std::vector<Accumulator> accs;
  if (!is_dynamic_dim(steps)) {
    std::vector<std::int32_t> uses(body.nodes.size(), 0);
    for (const Node& n : body.nodes)
      for (auto in : n.inputs) ++uses[static_cast<std::size_t>(in)];
    for (auto o : body.outputs) ++uses[static_cast<std::size_t>(o)];
    for (std::size_t k = 0; k < nc; ++k) {
      // A scan traced under StepWorkStaysInside (attrs.ints[4], core/hooks.hpp) holds nothing
      // new per step: only operands already stacked (x slices, ys) qualify there.
      const bool only_stacked = scan.attrs.ints.size() > 4 && scan.attrs.ints[4] != 0;
      Accumulator a = match_carry(body, k, nc, nx, uses, only_stacked);
      if (!a.terms.empty()) accs.push_back(std::move(a));
    }
  }
  if (accs.empty()) {
    result.scan = push(outer, std::move(scan));
    return result;
  }
  auto region = std::make_shared<GraphData>(body);
  std::vector<bool> removed(nc, false);
  for (const Accumulator& a : accs) removed[a.carry] = true;
  // Stacked operands: an x slice's own xs input, or a new y (result index, after the old ones).
  const std::size_t old_results = body.outputs.size();
  struct Stacked {
    bool is_x = false;
    std::size_t index = 0;  // xs input position, or new result index
  };
  const auto stack_operand = [&](std::int32_t id) {
    const Node& n = body.nodes[static_cast<std::size_t>(id)];
    if (n.kind == Node::Kind::parameter && static_cast<std::size_t>(n.index) >= nc &&
        static_cast<std::size_t>(n.index) < nc + nx)
      return Stacked{true, static_cast<std::size_t>(n.index)};
    for (std::size_t r = nc; r < region->outputs.size(); ++r)  // a y already: its stack
      if (region->outputs[r] == id) return Stacked{false, r};
    region->outputs.push_back(id);
    return Stacked{false, region->outputs.size() - 1};
  };
  std::vector<std::vector<std::pair<Stacked, Stacked>>> operands;
  for (const Accumulator& a : accs) {
    operands.emplace_back();
    for (const Term& t : a.terms)
      operands.back().emplace_back(stack_operand(t.p), stack_operand(t.b));
  }
  // The region without the removed carries: their outputs go, and so do their parameters.
  std::vector<std::int32_t> outputs;
  for (std::size_t r = 0; r < region->outputs.size(); ++r)
    if (r >= nc || !removed[r]) outputs.push_back(region->outputs[r]);
  region->outputs = std::move(outputs);
  eliminate_dead_code(*region);
  std::vector<std::int32_t> shift(region->num_parameters, 0);  // parameter index -> new index
  std::int32_t next_index = 0;
  for (std::size_t p = 0; p < shift.size(); ++p)
    shift[p] = p < nc && removed[p] ? -1 : next_index++;
  std::vector<std::int32_t> new_id(region->nodes.size(), -1);
  std::vector<Node> nodes;
  for (std::size_t i = 0; i < region->nodes.size(); ++i) {
    Node& n = region->nodes[i];
    if (n.kind == Node::Kind::parameter) {
      n.index = shift[static_cast<std::size_t>(n.index)];
      if (n.index < 0) continue;
    }
    for (auto& in : n.inputs) in = new_id[static_cast<std::size_t>(in)];
    new_id[i] = static_cast<std::int32_t>(nodes.size());
    nodes.push_back(std::move(n));
  }
  region->nodes = std::move(nodes);
  for (auto& o : region->outputs) o = new_id[static_cast<std::size_t>(o)];
  for (auto& s : region->side_effects) s = new_id[static_cast<std::size_t>(s)];
  region->num_parameters = static_cast<std::size_t>(next_index);

  // The node: removed carries' inputs go; new ys are stacked results after the old ones.
  const std::vector<std::int32_t> old_inputs = scan.inputs;
  std::vector<std::int32_t> inputs;
  for (std::size_t i = 0; i < old_inputs.size(); ++i)
    if (i >= nc || !removed[i]) inputs.push_back(old_inputs[i]);
  scan.inputs = std::move(inputs);
  const auto removed_count = static_cast<std::int64_t>(accs.size());
  scan.attrs.ints[0] -= removed_count;
  scan.regions[0] = region;
  const auto scan_id = push(outer, std::move(scan));
  result.scan = scan_id;

  result.replacement.assign(old_results, -1);
  result.new_index.assign(old_results, -1);
  for (std::size_t r = 0, at = 0; r < old_results; ++r)
    if (r >= nc || !removed[r]) result.new_index[r] = static_cast<std::int32_t>(at++);
  const auto stacked_value = [&](const Stacked& s, std::int32_t body_node) {
    if (s.is_x) return old_inputs[s.index];
    const Node& n = body.nodes[static_cast<std::size_t>(body_node)];
    Node out;
    out.kind = Node::Kind::output;
    out.inputs = {scan_id};
    out.index = static_cast<std::int32_t>(s.index - static_cast<std::size_t>(removed_count));
    out.dtype = n.dtype;
    out.shape = n.shape;
    out.shape.insert(0, steps);
    return push(outer, std::move(out));
  };
  for (std::size_t a = 0; a < accs.size(); ++a) {
    const Node& acc_out = body.nodes[static_cast<std::size_t>(body.outputs[accs[a].carry])];
    const DType dtype = acc_out.dtype;
    const std::int64_t m = acc_out.shape[0], n = acc_out.shape[1];
    std::int32_t total = -1;
    for (std::size_t t = 0; t < accs[a].terms.size(); ++t) {
      const Term& term = accs[a].terms[t];
      const std::int64_t rows = steps * body.nodes[static_cast<std::size_t>(term.p)].shape[0];
      const std::int32_t ps = stacked_value(operands[a][t].first, term.p);
      const std::int32_t bs = stacked_value(operands[a][t].second, term.b);
      const std::int32_t p2 = push(outer, primitive(Prim::reshape, {ps}, dtype, Shape{rows, m}));
      Node tr = primitive(Prim::transpose, {p2}, dtype, Shape{m, rows});
      tr.attrs.axes = Shape{1, 0};
      const std::int32_t pt = push(outer, std::move(tr));
      const std::int32_t b2 = push(outer, primitive(Prim::reshape, {bs}, dtype, Shape{rows, n}));
      const std::int32_t product =
          push(outer, primitive(Prim::matmul, {pt, b2}, dtype, Shape{m, n}));
      total = total < 0 ? product
                        : push(outer, primitive(Prim::add, {total, product}, dtype, Shape{m, n}));
    }
    const std::int32_t init = old_inputs[accs[a].carry];
    if (!all_zero_constant(outer[static_cast<std::size_t>(init)]))
      total = push(outer, primitive(Prim::add, {init, total}, dtype, Shape{m, n}));
    result.replacement[accs[a].carry] = total;
    hoisted += accs[a].terms.size();
  }
  return result;
}

}  // namespace

std::size_t hoist_accumulators(GraphData& graph) {
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  std::vector<std::int32_t> new_id(graph.nodes.size(), -1);
  std::vector<ScanRewrite> rewrites(graph.nodes.size());
  std::size_t hoisted = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    Node node = std::move(graph.nodes[i]);
    const auto old_input0 = node.inputs.empty() ? -1 : node.inputs[0];
    for (auto& in : node.inputs) in = new_id[static_cast<std::size_t>(in)];
    if (node.kind == Node::Kind::scan) {
      rewrites[i] = hoist_scan_accumulators(std::move(node), nodes, hoisted);
      new_id[i] = rewrites[i].scan;
      continue;
    }
    if (node.kind == Node::Kind::output) {
      const ScanRewrite& r = rewrites[static_cast<std::size_t>(old_input0)];
      if (!r.new_index.empty()) {
        const auto index = static_cast<std::size_t>(node.index);
        if (r.replacement[index] >= 0) {
          new_id[i] = r.replacement[index];
          continue;
        }
        node.index = r.new_index[index];
      }
    }
    new_id[i] = static_cast<std::int32_t>(nodes.size());
    nodes.push_back(std::move(node));
  }
  graph.nodes = std::move(nodes);
  for (auto& o : graph.outputs) o = new_id[static_cast<std::size_t>(o)];
  for (auto& s : graph.side_effects) s = new_id[static_cast<std::size_t>(s)];
  return hoisted;
}

}  // namespace kiln::detail

// Loop hoisting: work in a scan or while_loop region that does not need the loop moves out of
// it, into the enclosing graph (docs/architecture.md, "Graph passes").
//
// Every region node is classed by what it depends on:
//   invariant  only captures and constants: the same value at every iteration;
//   per_step   x slices too (scans only), but not the carry;
//   varying    the carry (or a loop's values), or anything this pass cannot move.
//
// Two motions, one rewrite:
//   - Loop-invariant code motion. Invariant primitives and fused nodes are computed once, before
//     the loop, from the node's capture inputs; the region reads their results as new captures.
//     A view (reshape, transpose, broadcast_to, slice) moves only as part of a chain, or when it
//     is a transpose that a matmul reads as its second operand (a layout the kernel cannot read,
//     so the step would copy it every iteration; a loop makes a non-contiguous capture
//     contiguous once). Otherwise inside the region the view costs nothing (a matmul reads a
//     transposed first operand in place).
//   - Per-step hoisting (scan). A chain of per-step nodes whose result a varying node reads is
//     computed for all steps at once: each per-step operand gains a leading step axis T (the
//     xs' leading dim, static or dynamic), and the result, stacked [T, ...], becomes a new x of
//     the scan whose slice the region reads. The ops that allow this are elementwise primitives
//     and fused nodes, and matmul, when every per-step operand has the result's full rank (then
//     an invariant operand broadcasts against the trailing dims as before, and a matmul's batch
//     dims line up). The profitability rule is simple: a chain moves only when it contains a
//     matmul. T products [b, f] x [f, h] become one [T, b, f] x [f, h] product, which the kernel
//     runs as one GEMM of T·b rows; an elementwise chain alone would do the same work outside
//     and add a stacked buffer's memory traffic.
//
// Regions are shared (gradient rules hold them), so a rewritten region is a new GraphData; the
// old one is never changed. The pass sees one level: run_graph_passes optimizes regions first,
// so work hoisted out of an inner scan into an outer scan's body can move out again here.
// While loops get only the invariant motion (their trip count is unknown, so hoisted work runs
// even when the body never does; it has no side effects). Cond branches are left alone.
#include <algorithm>
#include <memory>

#include "jit/graph.hpp"
#include "jit/passes.hpp"

namespace kiln::detail {

namespace {

enum class Dependence : std::uint8_t { invariant, per_step, varying };

bool is_compute(const Node& n) {
  return (n.kind == Node::Kind::primitive && !is_collective(n.prim)) || n.kind == Node::Kind::fused;
}

bool is_view(const Node& n) {
  return n.kind == Node::Kind::primitive && (n.prim == Prim::reshape || n.prim == Prim::transpose ||
                                             n.prim == Prim::broadcast_to || n.prim == Prim::slice);
}

bool is_matmul(const Node& n) { return n.kind == Node::Kind::primitive && n.prim == Prim::matmul; }

/// Whether compute node n, with a per-step operand and no varying one, can run for all steps
/// at once: its per-step operands and its result gain a leading step axis.
bool stacks_over_steps(const GraphData& body, const Node& n, const std::vector<Dependence>& dep) {
  const bool elementwise = n.kind == Node::Kind::fused || is_elementwise(n.prim);
  if ((!elementwise && !is_matmul(n)) || n.shape.size() >= Shape::max_rank) return false;
  for (auto in : n.inputs) {
    const auto i = static_cast<std::size_t>(in);
    if (dep[i] == Dependence::per_step && body.nodes[i].shape.size() != n.shape.size())
      return false;
  }
  return true;
}

/// Classes every node of `body`, whose first `varying` parameters are varying and next
/// `per_step` parameters are per-step (the rest are captures).
std::vector<Dependence> classify(const GraphData& body, std::size_t varying, std::size_t per_step) {
  std::vector<Dependence> dep(body.nodes.size(), Dependence::varying);
  for (std::size_t i = 0; i < body.nodes.size(); ++i) {
    const Node& n = body.nodes[i];
    if (n.kind == Node::Kind::parameter) {
      const auto index = static_cast<std::size_t>(n.index);
      dep[i] = index < varying              ? Dependence::varying
               : index < varying + per_step ? Dependence::per_step
                                            : Dependence::invariant;
    } else if (n.kind == Node::Kind::constant) {
      dep[i] = Dependence::invariant;
    } else if (is_compute(n)) {
      Dependence d = Dependence::invariant;
      for (auto in : n.inputs) d = std::max(d, dep[static_cast<std::size_t>(in)]);
      if (d == Dependence::per_step && !stacks_over_steps(body, n, dep)) d = Dependence::varying;
      dep[i] = d;
    }  // control-flow, output (and, outside regions, variable and assign) nodes stay varying
  }
  return dep;
}

/// A region after hoisting, and the outer values its new parameters read.
struct HoistedRegion {
  std::shared_ptr<const GraphData> region;
  std::vector<std::int32_t> new_xs;    // outer nodes, stacked [T, ...] (scans only)
  std::vector<std::int32_t> captures;  // outer nodes: the old captures still read, then new
  std::size_t moved = 0;               // region nodes now computed outside
};

/// Removes the capture parameters (index first_capture and up, reading outer nodes `outer`)
/// that nothing in `region` reads any more, renumbering the others; returns the outer nodes of
/// the captures kept.
std::vector<std::int32_t> drop_unread_captures(GraphData& region, std::size_t first_capture,
                                               const std::vector<std::int32_t>& outer) {
  std::vector<bool> read(region.nodes.size(), false);
  for (const Node& n : region.nodes)
    for (auto in : n.inputs) read[static_cast<std::size_t>(in)] = true;
  for (auto o : region.outputs) read[static_cast<std::size_t>(o)] = true;
  std::vector<std::int32_t> new_index(outer.size(), -1), kept;
  for (std::size_t i = 0; i < region.nodes.size(); ++i) {
    const Node& n = region.nodes[i];
    if (n.kind != Node::Kind::parameter || static_cast<std::size_t>(n.index) < first_capture)
      continue;
    if (read[i]) new_index[static_cast<std::size_t>(n.index) - first_capture] = 0;
  }
  for (std::size_t k = 0; k < outer.size(); ++k)
    if (new_index[k] == 0) {
      new_index[k] = static_cast<std::int32_t>(first_capture + kept.size());
      kept.push_back(outer[k]);
    }
  std::vector<std::int32_t> new_id(region.nodes.size(), -1);
  std::vector<Node> nodes;
  for (std::size_t i = 0; i < region.nodes.size(); ++i) {
    Node& n = region.nodes[i];
    if (n.kind == Node::Kind::parameter && static_cast<std::size_t>(n.index) >= first_capture) {
      const std::int32_t index = new_index[static_cast<std::size_t>(n.index) - first_capture];
      if (index < 0) continue;
      n.index = index;
    }
    for (auto& in : n.inputs) in = new_id[static_cast<std::size_t>(in)];
    new_id[i] = static_cast<std::int32_t>(nodes.size());
    nodes.push_back(std::move(n));
  }
  region.nodes = std::move(nodes);
  for (auto& o : region.outputs) o = new_id[static_cast<std::size_t>(o)];
  for (auto& s : region.side_effects) s = new_id[static_cast<std::size_t>(s)];
  region.num_parameters = first_capture + kept.size();
  return kept;
}

/// Hoists out of `body` (parameters: `varying`, then `per_step` x slices, then captures, read
/// from outer nodes `param_outer` by parameter index), appending the outer nodes to `outer`.
/// `steps` is the step count the per-step values are stacked over. Returns a null region when
/// nothing moves.
HoistedRegion hoist_region(const GraphData& body, std::size_t varying, std::size_t per_step,
                           const std::vector<std::int32_t>& param_outer, std::int64_t steps,
                           std::vector<Node>& outer, bool stack_per_step = true) {
  const std::size_t n = body.nodes.size();
  const std::vector<Dependence> dep = classify(body, varying, per_step);
  std::vector<std::vector<std::int32_t>> users(n);
  std::vector<bool> is_output(n, false);
  for (std::size_t i = 0; i < n; ++i)
    for (auto in : body.nodes[i].inputs)
      users[static_cast<std::size_t>(in)].push_back(static_cast<std::int32_t>(i));
  for (auto o : body.outputs) is_output[static_cast<std::size_t>(o)] = true;
  const auto node = [&](std::size_t i) -> const Node& { return body.nodes[i]; };

  // Per-step chains: from each per-step node a varying node reads, back through per-step
  // nodes; the chain moves when it holds a matmul.
  std::vector<bool> stacked(n, false);
  for (std::size_t r = n; r-- > 0;) {
    if (!stack_per_step || dep[r] != Dependence::per_step || !is_compute(node(r))) continue;
    const bool read_by_loop = std::any_of(users[r].begin(), users[r].end(), [&](std::int32_t u) {
      return dep[static_cast<std::size_t>(u)] == Dependence::varying;
    });
    if (!read_by_loop) continue;
    std::vector<std::int32_t> chain, stack{static_cast<std::int32_t>(r)};
    std::vector<bool> seen(n, false);
    bool has_matmul = false;
    while (!stack.empty()) {
      const auto i = static_cast<std::size_t>(stack.back());
      stack.pop_back();
      if (seen[i] || dep[i] != Dependence::per_step || !is_compute(node(i))) continue;
      seen[i] = true;
      chain.push_back(static_cast<std::int32_t>(i));
      has_matmul = has_matmul || is_matmul(node(i));
      for (auto in : node(i).inputs) stack.push_back(in);
    }
    if (has_matmul)
      for (auto i : chain) stacked[static_cast<std::size_t>(i)] = true;
  }

  // A transpose that a matmul reads as its second operand: the kernel cannot read that layout,
  // so the step would copy it on every iteration (an RNN's backward dh = dz U^T copied U^T,
  // 1 MiB for a 256-unit LSTM, at every step). Moved out, it is a capture, which the loop
  // makes contiguous once (lib/jit/plan_regions.cpp).
  const auto copied_by_matmul = [&](std::size_t i) {
    const Node& nd = node(i);
    if (nd.kind != Node::Kind::primitive || nd.prim != Prim::transpose) return false;
    return std::any_of(users[i].begin(), users[i].end(), [&](std::int32_t u) {
      const Node& user = node(static_cast<std::size_t>(u));
      return is_matmul(user) && user.inputs.size() > 1 &&
             user.inputs[1] == static_cast<std::int32_t>(i);
    });
  };
  // Invariant nodes computed outside (`moved`), and the nodes the region still computes.
  std::vector<bool> moved(n, false), in_body(n, true);
  for (std::size_t i = n; i-- > 0;) {
    const Node& nd = node(i);
    if (!is_compute(nd)) continue;
    const bool read_in_body =
        is_output[i] || std::any_of(users[i].begin(), users[i].end(), [&](std::int32_t u) {
          return in_body[static_cast<std::size_t>(u)];
        });
    if (dep[i] == Dependence::invariant) {
      const bool feeds_moved = std::any_of(users[i].begin(), users[i].end(), [&](std::int32_t u) {
        return moved[static_cast<std::size_t>(u)];
      });
      moved[i] = !is_view(nd) || feeds_moved || copied_by_matmul(i);
      in_body[i] = !moved[i] || (is_view(nd) && read_in_body);
    } else if (stacked[i]) {
      in_body[i] = false;
    }
  }
  // Values the region reads from outside: moved or stacked results it still uses.
  std::vector<std::int32_t> new_x_nodes, new_capture_nodes;
  for (std::size_t i = 0; i < n; ++i) {
    if (in_body[i] || !(moved[i] || stacked[i])) continue;
    const bool used =
        is_output[i] || std::any_of(users[i].begin(), users[i].end(), [&](std::int32_t u) {
          return in_body[static_cast<std::size_t>(u)];
        });
    if (used)
      (stacked[i] ? new_x_nodes : new_capture_nodes).push_back(static_cast<std::int32_t>(i));
  }
  HoistedRegion result;
  if (new_x_nodes.empty() && new_capture_nodes.empty()) return result;

  // The outer copies: moved and stacked nodes and the invariant values they read.
  std::vector<bool> needed(n, false);
  for (std::size_t i = n; i-- > 0;) {
    needed[i] = moved[i] || stacked[i] ||
                (dep[i] != Dependence::varying &&
                 std::any_of(users[i].begin(), users[i].end(),
                             [&](std::int32_t u) { return needed[static_cast<std::size_t>(u)]; }));
  }
  std::vector<std::int32_t> outer_id(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    const Node& nd = node(i);
    if (nd.kind == Node::Kind::parameter) {
      outer_id[i] = param_outer[static_cast<std::size_t>(nd.index)];
      continue;
    }
    Node copy = nd;
    for (auto& in : copy.inputs) in = outer_id[static_cast<std::size_t>(in)];
    if (stacked[i]) copy.shape.insert(0, steps);
    outer_id[i] = static_cast<std::int32_t>(outer.size());
    outer.push_back(std::move(copy));
    if (is_compute(nd)) ++result.moved;
  }

  // The region: stacked and moved results become parameters (new x slices after the old ones,
  // new captures after the old captures); what only they used is removed, and so are captures
  // nothing reads any more.
  auto region = std::make_shared<GraphData>(body);
  const std::size_t first_capture = varying + per_step;
  const auto shift = static_cast<std::int32_t>(new_x_nodes.size());
  for (Node& nd : region->nodes)
    if (nd.kind == Node::Kind::parameter && static_cast<std::size_t>(nd.index) >= first_capture)
      nd.index += shift;
  const auto make_parameter = [&](std::int32_t id, std::size_t index) {
    Node& nd = region->nodes[static_cast<std::size_t>(id)];
    Node p;
    p.kind = Node::Kind::parameter;
    p.dtype = nd.dtype;
    p.shape = nd.shape;
    p.index = static_cast<std::int32_t>(index);
    nd = std::move(p);
  };
  for (std::size_t k = 0; k < new_x_nodes.size(); ++k) {
    make_parameter(new_x_nodes[k], first_capture + k);
    result.new_xs.push_back(outer_id[static_cast<std::size_t>(new_x_nodes[k])]);
  }
  const std::size_t old_parameters = param_outer.size() + new_x_nodes.size();
  for (std::size_t k = 0; k < new_capture_nodes.size(); ++k)
    make_parameter(new_capture_nodes[k], old_parameters + k);
  region->num_parameters = old_parameters + new_capture_nodes.size();
  eliminate_dead_code(*region);
  std::vector<std::int32_t> captures(
      param_outer.begin() + static_cast<std::ptrdiff_t>(first_capture), param_outer.end());
  for (std::size_t k = 0; k < new_capture_nodes.size(); ++k)
    captures.push_back(outer_id[static_cast<std::size_t>(new_capture_nodes[k])]);
  result.captures = drop_unread_captures(*region, first_capture + new_x_nodes.size(), captures);
  result.region = std::move(region);
  return result;
}

std::vector<std::int32_t> part(const std::vector<std::int32_t>& v, std::size_t from,
                               std::size_t count) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(from + count)};
}

void append(std::vector<std::int32_t>& to, const std::vector<std::int32_t>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

/// Hoists out of scan node `scan` (inputs already in `outer`'s numbering); returns how many
/// region nodes moved.
std::size_t hoist_scan(Node& scan, std::vector<Node>& outer) {
  const auto nc = static_cast<std::size_t>(scan.attrs.ints[0]);
  const auto nx = static_cast<std::size_t>(scan.attrs.ints[1]);
  const std::int64_t steps =
      nx > 0 ? outer[static_cast<std::size_t>(scan.inputs[nc])].shape[0] : scan.attrs.axis;
  // ints[4]: traced under StepWorkStaysInside (core/hooks.hpp), invariant work only.
  const bool stack_per_step = scan.attrs.ints.size() < 5 || scan.attrs.ints[4] == 0;
  HoistedRegion h =
      hoist_region(*scan.regions[0], nc, nx, scan.inputs, steps, outer, stack_per_step);
  if (!h.region) return 0;
  std::vector<std::int32_t> inputs = part(scan.inputs, 0, nc + nx);
  append(inputs, h.new_xs);
  append(inputs, h.captures);
  scan.inputs = std::move(inputs);
  scan.attrs.ints[1] += static_cast<std::int64_t>(h.new_xs.size());
  scan.regions[0] = std::move(h.region);
  return h.moved;
}

/// Hoists the invariant work out of while_loop node `loop`'s cond and body.
std::size_t hoist_while(Node& loop, std::vector<Node>& outer) {
  const auto nv = static_cast<std::size_t>(loop.attrs.ints[0]);
  const auto nc = static_cast<std::size_t>(loop.attrs.ints[1]);
  const auto nb = static_cast<std::size_t>(loop.attrs.ints[2]);
  const std::vector<std::int32_t> values = part(loop.inputs, 0, nv);
  std::vector<std::int32_t> cond_params = values, body_params = values;
  append(cond_params, part(loop.inputs, nv, nc));
  append(body_params, part(loop.inputs, nv + nc, nb));
  HoistedRegion c = hoist_region(*loop.regions[0], nv, 0, cond_params, 0, outer);
  HoistedRegion b = hoist_region(*loop.regions[1], nv, 0, body_params, 0, outer);
  if (c.region) {
    cond_params.resize(nv);
    append(cond_params, c.captures);
    loop.regions[0] = std::move(c.region);
  }
  if (b.region) {
    body_params.resize(nv);
    append(body_params, b.captures);
    loop.regions[1] = std::move(b.region);
  }
  loop.inputs = values;
  append(loop.inputs, part(cond_params, nv, cond_params.size() - nv));
  append(loop.inputs, part(body_params, nv, body_params.size() - nv));
  loop.attrs.ints[1] = static_cast<std::int64_t>(cond_params.size() - nv);
  loop.attrs.ints[2] = static_cast<std::int64_t>(body_params.size() - nv);
  return c.moved + b.moved;
}

}  // namespace

std::size_t hoist_loop_invariants(GraphData& graph) {
  const bool has_loop = std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const Node& n) {
    return n.kind == Node::Kind::scan || n.kind == Node::Kind::while_loop;
  });
  if (!has_loop) return 0;
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  std::vector<std::int32_t> new_id(graph.nodes.size(), -1);
  std::size_t moved = 0;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    Node node = std::move(graph.nodes[i]);
    for (auto& in : node.inputs) in = new_id[static_cast<std::size_t>(in)];
    if (node.kind == Node::Kind::scan) moved += hoist_scan(node, nodes);
    if (node.kind == Node::Kind::while_loop) moved += hoist_while(node, nodes);
    new_id[i] = static_cast<std::int32_t>(nodes.size());
    nodes.push_back(std::move(node));
  }
  graph.nodes = std::move(nodes);
  for (auto& o : graph.outputs) o = new_id[static_cast<std::size_t>(o)];
  for (auto& s : graph.side_effects) s = new_id[static_cast<std::size_t>(s)];
  return moved;
}

}  // namespace kiln::detail

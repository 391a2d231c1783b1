#include "jit/passes.hpp"

#include <algorithm>
#include <memory>

#include <array>
#include <functional>
#include <vector>

namespace kiln::detail {

namespace {

bool always(const FunctionOptions&) { return true; }

// Fusion comes last: the passes before it match single primitives, which fused nodes hide.
const std::array<GraphPass, 5> pipeline{{
    {"eliminate_common_subexpressions", always, eliminate_common_subexpressions},
    {"simplify_algebra", [](const FunctionOptions& o) { return o.simplify; }, simplify_algebra},
    {"fold_constants", [](const FunctionOptions& o) { return o.fold_constants; }, fold_constants,
     /*cse_after_change*/ true},
    {"eliminate_dead_code", always, eliminate_dead_code},
    {"fuse_elementwise", [](const FunctionOptions& o) { return o.fuse_elementwise; },
     fuse_elementwise},
}};

}  // namespace

std::span<const GraphPass> graph_passes() { return pipeline; }

namespace {

/// Drops the stacked ys of scan nodes that nothing reads (no output node left after dead-code
/// elimination), so their regions stop computing and stacking them. Carries stay (the next step
/// reads them).
void prune_unused_scan_results(GraphData& graph) {
  eliminate_dead_code(graph);
  std::vector<std::vector<std::int32_t>> readers(graph.nodes.size());  // scan -> output nodes
  for (std::size_t i = 0; i < graph.nodes.size(); ++i)
    if (graph.nodes[i].kind == Node::Kind::output)
      readers[static_cast<std::size_t>(graph.nodes[i].inputs[0])].push_back(
          static_cast<std::int32_t>(i));
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (node.kind != Node::Kind::scan) continue;
    const auto nc = static_cast<std::size_t>(node.attrs.ints[0]);
    const std::size_t results = node.regions[0]->outputs.size();
    std::vector<bool> used(results, false);
    for (std::size_t k = 0; k < nc; ++k) used[k] = true;
    for (auto o : readers[i])
      used[static_cast<std::size_t>(graph.nodes[static_cast<std::size_t>(o)].index)] = true;
    if (std::all_of(used.begin(), used.end(), [](bool u) { return u; })) continue;
    auto region = std::make_shared<GraphData>(*node.regions[0]);
    std::vector<std::int32_t> new_index(results, -1), kept;
    for (std::size_t k = 0; k < results; ++k)
      if (used[k]) {
        new_index[k] = static_cast<std::int32_t>(kept.size());
        kept.push_back(region->outputs[k]);
      }
    region->outputs = std::move(kept);
    node.regions[0] = std::move(region);
    for (auto o : readers[i]) {
      Node& out = graph.nodes[static_cast<std::size_t>(o)];
      out.index = new_index[static_cast<std::size_t>(out.index)];
    }
  }
}

/// Fuses the elementwise work of every region, at every depth (as new graphs: regions are
/// shared).
void fuse_regions(GraphData& graph) {
  for (Node& node : graph.nodes)
    for (auto& region : node.regions) {
      auto fused = std::make_shared<GraphData>(*region);
      fuse_regions(*fused);
      fuse_elementwise(*fused);
      region = std::move(fused);
    }
}

/// The optimizing passes of run_graph_passes (defined below).
void optimize_graph(GraphData& graph, const FunctionOptions& options);

}  // namespace

void run_graph_passes(GraphData& graph, const FunctionOptions& options) {
  if (options.optimize) optimize_graph(graph, options);
  schedule_collectives(graph);
}

std::size_t schedule_collectives(GraphData& graph) {
  std::vector<Node>& nodes = graph.nodes;
  const std::size_t n = nodes.size();
  const auto is = [&](std::size_t i, Prim p) {
    return nodes[i].kind == Node::Kind::primitive && nodes[i].prim == p;
  };
  std::vector<std::vector<std::int32_t>> starts_reading(n);  // node -> collective_starts of it
  std::vector<std::size_t> missing(n, 0);                    // start -> inputs not yet placed
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (!is(i, Prim::collective_start)) continue;
    any = true;
    for (auto in : nodes[i].inputs) {
      starts_reading[static_cast<std::size_t>(in)].push_back(static_cast<std::int32_t>(i));
      ++missing[i];
    }
  }
  if (!any) return 0;
  std::vector<std::int32_t> order;
  std::vector<bool> placed(n, false);
  // Places node i after its inputs (a wait held back is placed now, since i reads it), then
  // every start whose last input that was.
  std::function<void(std::size_t)> place = [&](std::size_t i) {
    if (placed[i]) return;
    for (auto in : nodes[i].inputs) place(static_cast<std::size_t>(in));
    placed[i] = true;
    order.push_back(static_cast<std::int32_t>(i));
    for (auto s : starts_reading[i])
      if (--missing[static_cast<std::size_t>(s)] == 0) place(static_cast<std::size_t>(s));
  };
  for (std::size_t i = 0; i < n; ++i)
    if (!is(i, Prim::collective_wait)) place(i);  // waits wait for their first reader
  for (std::size_t i = 0; i < n; ++i) place(i);   // waits only outputs read
  std::size_t moved = 0;
  std::vector<std::int32_t> new_id(n);
  for (std::size_t k = 0; k < n; ++k) {
    new_id[static_cast<std::size_t>(order[k])] = static_cast<std::int32_t>(k);
    moved += static_cast<std::size_t>(order[k]) != k ? 1 : 0;
  }
  std::vector<Node> reordered;
  reordered.reserve(n);
  for (auto i : order) reordered.push_back(std::move(nodes[static_cast<std::size_t>(i)]));
  for (Node& node : reordered)
    for (auto& in : node.inputs) in = new_id[static_cast<std::size_t>(in)];
  for (auto& o : graph.outputs) o = new_id[static_cast<std::size_t>(o)];
  for (auto& s : graph.side_effects) s = new_id[static_cast<std::size_t>(s)];
  nodes = std::move(reordered);
  return moved;
}

namespace {

void optimize_graph(GraphData& graph, const FunctionOptions& options) {
  prune_unused_scan_results(graph);
  // Control-flow regions first, each as a graph of its own (their parameters stay as they are).
  // They are fused last, from the outermost call: loop hoisting first takes out what it moves,
  // which fusion would otherwise have merged with the loop's own work.
  FunctionOptions region_options = options;
  region_options.fuse_elementwise = false;
  for (Node& node : graph.nodes) {
    for (auto& region : node.regions) {
      auto optimized = std::make_shared<GraphData>(*region);
      run_graph_passes(*optimized, region_options);
      region = std::move(optimized);
    }
  }
  if (options.hoist_loop_invariants) hoist_loop_invariants(graph);
  if (options.hoist_accumulators) hoist_accumulators(graph);
  for (const GraphPass& pass : pipeline) {
    if (!pass.enabled(options)) continue;
    if (pass.run(graph) > 0 && pass.cse_after_change) eliminate_common_subexpressions(graph);
  }
  if (options.fuse_elementwise) fuse_regions(graph);
}

}  // namespace

}  // namespace kiln::detail

#include "jit/passes.hpp"

#include <memory>

#include <array>

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

void run_graph_passes(GraphData& graph, const FunctionOptions& options) {
  if (!options.optimize) return;
  // Control-flow regions first, each as a graph of its own (their parameters stay as they are).
  for (Node& node : graph.nodes) {
    for (auto& region : node.regions) {
      auto optimized = std::make_shared<GraphData>(*region);
      run_graph_passes(*optimized, options);
      region = std::move(optimized);
    }
  }
  for (const GraphPass& pass : pipeline) {
    if (!pass.enabled(options)) continue;
    if (pass.run(graph) > 0 && pass.cse_after_change) eliminate_common_subexpressions(graph);
  }
}

}  // namespace kiln::detail

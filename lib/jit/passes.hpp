#pragma once
// The graph pass pipeline kiln::function runs on a new trace, before planning: one list, in
// order, that code, tests and docs name (docs/dev/writing-a-pass.md).

#include <cstddef>
#include <span>

#include "jit/graph.hpp"
#include "kiln/function.hpp"

namespace kiln::detail {

struct GraphPass {
  /// The pass's name, as docs and test messages use it.
  const char* name;
  /// Whether it runs under these options (all passes need FunctionOptions::optimize).
  bool (*enabled)(const FunctionOptions& options);
  /// Runs it; returns how many nodes it changed, folded, removed or fused.
  std::size_t (*run)(GraphData& graph);
  /// Common-subexpression elimination runs again right after it when it changed something
  /// (folding turns different subgraphs into equal constants).
  bool cse_after_change = false;
};

/// Moves work out of scan and while_loop regions into the enclosing graph: invariant nodes
/// become new captures, and chains of per-step nodes with a matmul are computed for all steps
/// at once as new xs (lib/jit/loop_hoisting.cpp). run_graph_passes runs it after optimizing the
/// regions, before the pipeline. Returns how many region nodes now run outside their loop.
std::size_t hoist_loop_invariants(GraphData& graph);

/// Moves the per-step sums acc' = acc + transpose(P_t) @ B_t that a scan carries (a scan
/// gradient's accumulator of a weight used as a matmul operand) out of the loop: P and B
/// become stacked ys and the carry becomes one product over all steps after the scan
/// (lib/jit/accumulator_hoisting.cpp). Runs right after hoist_loop_invariants. Returns how
/// many products moved.
std::size_t hoist_accumulators(GraphData& graph);

/// The pipeline, in order.
std::span<const GraphPass> graph_passes();

/// Runs every pass that `options` enables on `graph`, in pipeline order.
void run_graph_passes(GraphData& graph, const FunctionOptions& options);

}  // namespace kiln::detail

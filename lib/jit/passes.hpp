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

/// Orders the collective steps of a graph for overlap (lib/kernels/collective.hpp): each
/// collective_start right after the last of its inputs is computed, each collective_wait just
/// before its first reader. The plan runs nodes in graph order, so a gradient bucket is sent
/// while the rest of the backward pass runs. Deterministic, so every process orders the same
/// graph alike. Returns how many nodes moved.
std::size_t schedule_collectives(GraphData& graph);

/// Runs every pass that `options` enables on `graph`, in pipeline order, then
/// schedule_collectives (always: it is what makes overlap happen, not an optimization).
void run_graph_passes(GraphData& graph, const FunctionOptions& options);

}  // namespace kiln::detail

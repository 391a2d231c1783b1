#pragma once
// The executable form of a concrete function: a flat list of steps over value slots.

#include <cstdint>
#include <string>
#include <vector>

#include "jit/graph.hpp"

namespace kiln::detail {

/// One step: evaluate node `node` into slot `node`, then drop the slots in `release` (values
/// whose last use this step was), so working memory stays at the live set.
struct PlanStep {
  std::int32_t node;
  std::vector<std::int32_t> release;
};

struct Plan {
  std::vector<PlanStep> steps;
  std::int64_t bytes() const;
};

/// Schedules the graph's nodes (already in a valid order) and computes value lifetimes.
Plan build_plan(const GraphData& g);

/// Runs the plan on the call's tensor arguments; fills `outputs` (cleared first). Variable reads are
/// bound now; assignments are applied after every step succeeded, in program order.
/// `shapes`, when given, holds each node's shape for this call (a graph with dynamic dims);
/// otherwise the nodes' own shapes are used.
void run_plan(const Plan& plan, const GraphData& g, const std::vector<Tensor>& args,
              const std::string& function_name, std::vector<Tensor>& outputs,
              const std::vector<Shape>* shapes = nullptr);

/// Every node's shape with dynamic dim i replaced by values[i].
std::vector<Shape> bind_shapes(const GraphData& g, const std::vector<std::int64_t>& values);

}  // namespace kiln::detail

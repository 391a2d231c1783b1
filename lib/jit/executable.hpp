#pragma once
// What a call of a concrete function runs for one set of node shapes: the whole plan, and a
// batch split (two half plans, see batch_split.hpp) when the rows can be computed apart. A
// concrete function holds one Executable for static shapes, or one per set of sizes of its
// dynamic dims.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/batch_split.hpp"
#include "jit/graph.hpp"
#include "jit/plan.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

/// What a call for one set of shapes runs: a Plan, and a BatchSplit when the rows split.
struct Executable {
  Plan plan;
  std::unique_ptr<BatchSplit> split;  // null when the rows do not split (plan_batch_split)

  std::int64_t bytes() const { return plan.bytes() + (split ? split->bytes() : 0); }
};

/// Builds the executable of g for the node shapes given (null: the nodes' own).
/// `dim_values`: the dynamic dims' sizes the shapes were bound with (see build_plan).
Executable build_executable(const GraphData& g, const std::vector<Shape>* shapes = nullptr,
                            const std::vector<std::int64_t>* dim_values = nullptr);

/// Runs it: the split's halves when the pair helper is ready to take one (pair_helper_ready),
/// else the whole plan, which is faster than both halves one after the other on this thread.
void run_executable(const Executable& e, const GraphData& g, std::span<const Tensor* const> args,
                    const std::string& function_name, std::vector<Tensor>& outputs);

}  // namespace kiln::detail

#pragma once
// Batch splitting: a compiled function whose rows along dim 0 are computed independently of
// each other (an RNN or LSTM over a batch, a dense network's forward pass) runs as two plans
// over the two halves of the rows, one on the calling thread and one on a helper thread
// (parallel_pair). Each half is an ordinary plan built for half the rows; a call slices the
// arguments, runs both halves and joins their outputs.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jit/graph.hpp"
#include "jit/plan.hpp"

namespace kiln::detail {

/// Which nodes of g carry the batch rows along dim 0 (1) and which are the same for every row
/// (0), for the node shapes given (null: the nodes' own), or nullopt when the rows are not
/// independent: a reduction or contraction over dim 0, a variable assignment, random numbers,
/// a dim_size read, an output that is not split, or an op without a rule here.
std::optional<std::vector<std::uint8_t>> batch_rows(const GraphData& g,
                                                    const std::vector<Shape>* shapes = nullptr);

/// Two half Plans of one graph for one set of shapes, for an Executable whose rows split.
struct BatchSplit {
  std::int64_t rows = 0;                    // the batch: dim 0 of every output
  std::array<std::int64_t, 2> first_row{};  // each half's first row: 0 and rows / 2
  std::array<Plan, 2> halves;
  std::vector<std::uint8_t> split_arguments;  // per tensor argument: sliced by rows or not
  std::vector<Shape> output_shapes;           // of the whole call

  /// A running estimate of one call's duration in nanoseconds, split or whole (it drops at once
  /// to a faster call, rises slowly: a call slowed by another thread barely moves it).
  mutable std::atomic<std::int64_t> call_ns{0};

  /// Rows of half h: rows / 2, then the rest.
  std::int64_t half_rows(std::size_t h) const { return h == 0 ? rows / 2 : rows - rows / 2; }

  std::int64_t bytes() const;
};

/// Work (multiply-adds of products, elementwise element-ops) below which a call is not split:
/// each half must outweigh the hand-over and the join of the outputs.
inline constexpr std::int64_t min_split_work = 400'000;
/// Work above which a call is not split either: its kernels are large enough to spread over the
/// cores themselves (the thread pool for elementwise ops, the GEMM backends' tiles for large
/// products). A product of this much work alone keeps the call whole too: split by rows, each
/// half reads all of B, where the product's own tiles split B's columns (64x256x1024 through
/// a function on a Zen 4: 188 GFLOP/s split against 217 whole).
inline constexpr std::int64_t max_split_work = std::int64_t{1} << 24;

/// The split of g for the node shapes given (null: the nodes' own, which must be static), or
/// null when the rows are not independent, the batch has fewer than 8 rows, the work is outside
/// [min_split_work, max_split_work] or a product's reaches max_split_work, or there is one
/// thread.
std::unique_ptr<BatchSplit> plan_batch_split(const GraphData& g,
                                             const std::vector<Shape>* shapes = nullptr);

/// Runs both halves (parallel_pair) and joins their outputs along dim 0.
void run_batch_split(const BatchSplit& split, const GraphData& g,
                     std::span<const Tensor* const> args, const std::string& function_name,
                     std::vector<Tensor>& outputs);

}  // namespace kiln::detail

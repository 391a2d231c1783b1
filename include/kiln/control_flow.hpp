#pragma once
// Control flow that does not grow the graph: scan, while_loop and cond.
//
// Eagerly they run as ordinary C++ loops and branches over kiln ops. Inside a traced
// kiln::function each body is traced once into a subgraph of the function's graph, so the
// graph's size does not depend on the trip count, and the trip count may be a dynamic dim (scan
// over a time axis marked -1 in the input_signature) or a value computed at run time
// (while_loop). Bodies may use tensors from outside (they are captured), read variables, and
// nest. See docs/guide/control-flow.md.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

struct ScanOptions {
  /// Number of steps when xs is empty; otherwise it must be -1 or xs' leading dim.
  std::int64_t length = -1;
  /// Run from the last step to the first. ys keep their step's position either way.
  bool reverse = false;
  /// Inside a kiln::function, trace one copy of the body per step instead of one loop node (the
  /// number of steps must then be static): for a few short steps, where the optimizer sees the
  /// whole unrolled graph and can fuse across steps or split it over the cores. The graph then
  /// grows with the number of steps. Eagerly it changes nothing.
  bool unroll = false;
  /// Gradient checkpointing: under a gradient tape keep the carry only every this many steps,
  /// and in the backward pass recompute each segment's carries from its saved one (memory for
  /// T / k + k carries instead of T, for about one more forward pass). It runs as a scan over
  /// segments whose body scans k steps, then a plain scan over the T % k remaining steps.
  /// Eagerly each segment is a kiln::checkpoint (traced and compiled once per scan call), so the
  /// tape keeps segment carries, not every op. A trip count that is a dynamic dim, or one of at
  /// most k steps, runs as a plain scan (every carry kept). 1 keeps every step's carry; it must
  /// be at least 1, and 1 with unroll.
  std::int64_t checkpoint_every = 1;
};

/// body(carry, x) -> (carry, y): carry and y are lists of tensors.
using ScanBody = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(
    const std::vector<Tensor>& carry, const std::vector<Tensor>& x)>;

/// Applies body over the leading axis of every tensor in xs (each step sees one slice of each),
/// threading the carry through, and stacks each step's ys along a new leading axis. Returns the
/// final carry and the stacked ys. The carry must keep its shapes and dtypes from step to step:
/// "[scan] the body changed carry 0 from f32 [2,3] to f32 [2,4]".
std::pair<std::vector<Tensor>, std::vector<Tensor>> scan(const ScanBody& body,
                                                         const std::vector<Tensor>& init,
                                                         const std::vector<Tensor>& xs,
                                                         const ScanOptions& options = {});

/// One carry tensor and one x tensor: body(c, x) -> std::pair(c, y).
std::pair<Tensor, Tensor> scan(
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& body,
    const Tensor& init, const Tensor& xs, const ScanOptions& options = {});

struct WhileOptions {
  /// Stop after this many iterations even if cond still holds (-1: no limit).
  std::int64_t maximum_iterations = -1;
};

/// while (cond(values)) values = body(values); returns the final values. cond returns a boolean
/// scalar tensor; body returns values of the same shapes and dtypes.
std::vector<Tensor> while_loop(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body,
    const std::vector<Tensor>& init, const WhileOptions& options = {});

/// pred ? true_fn(operands) : false_fn(operands), where pred is a boolean scalar tensor. Both
/// branches return lists of the same shapes and dtypes. Traced, both are traced once and the
/// branch is chosen when the function runs.
std::vector<Tensor> cond(
    const Tensor& pred,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& true_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& false_fn,
    const std::vector<Tensor>& operands);

}  // namespace kiln

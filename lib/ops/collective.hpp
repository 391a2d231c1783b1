#pragma once
// Front ends of the collective primitives (lib/kernels/collective.hpp): gradient
// synchronisation across processes as ops, so a traced train step records them into its graph
// and a compiled plan runs them between the backward pass's own steps.

#include <cstdint>
#include <span>

#include "kernels/collective.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

/// Queues `kind` on `inputs` (sum and replicas: one or more tensors of one floating dtype,
/// joined flat; gather: one tensor with a first dim) and returns its ticket, an i64 scalar.
/// `params` only matters to replicas.
Tensor collective_start(CollectiveKind kind, std::span<const Tensor> inputs,
                        const CollectiveParams& params = {});
/// The result of the collective `ticket` stands for, each element times `scale`, as a tensor of
/// `dtype` and `shape`: for a sum or replicas, the joined inputs' element count flat ([n]); for a
/// gather, the input's shape with dim 0 times the number of processes.
Tensor collective_wait(const Tensor& ticket, CollectiveKind kind, DType dtype, const Shape& shape,
                       double scale);

}  // namespace kiln::detail

#pragma once
// The indexing primitives applied without the public front ends' conveniences (broadcasting,
// the default batch dims), for the gradient rules in lib/autodiff, which need their exact
// forms. The arguments are trusted: each function checks only what the primitive needs.

#include "kiln/ops.hpp"
#include "primitives/primitive.hpp"

namespace kiln::detail {

/// cumsum or cumprod (p) along a normalized axis, with the exclusive and reverse flags.
Tensor running(Prim p, const Tensor& x, std::int64_t axis, bool exclusive, bool reverse);
/// take_along_axis on a normalized axis, indices of x's rank with other dims at most x's
/// (torch.gather); the result has indices' shape.
Tensor take_along_exact(const Tensor& x, const Tensor& indices, std::int64_t axis);
/// scatter on a normalized axis.
Tensor scatter_exact(const Tensor& x, const Tensor& indices, const Tensor& updates,
                     std::int64_t axis, ScatterMode mode);
/// gather_nd and scatter_nd with batch dims.
Tensor gather_nd_exact(const Tensor& x, const Tensor& indices, std::int64_t batch_dims);
Tensor scatter_nd_exact(const Tensor& x, const Tensor& indices, const Tensor& updates,
                        ScatterMode mode, std::int64_t batch_dims);

}  // namespace kiln::detail

// tril and triu: a boolean mask of the last two axes, from arange comparisons, chooses between
// x and zero (so the gradient is x's where the mask keeps it).
#include <algorithm>

#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

/// x where (column - row) compares with k as `keep` says, zero elsewhere.
Tensor triangle(const Tensor& x, std::int64_t k, bool lower, std::string_view op) {
  detail::check_defined(x, op);
  if (x.ndim() < 2)
    detail::fail(op, "needs rank >= 2 (a matrix or a batch of them), got shape {}", x.shape());
  const std::int64_t rows = x.dim(-2), cols = x.dim(-1);
  detail::require_static_dim(rows, op, "the row axis");
  detail::require_static_dim(cols, op, "the column axis");
  // Beyond +-(rows + cols) every k gives the same mask; clamping keeps the arithmetic exact.
  const std::int64_t bound = rows + cols;
  const auto kk = static_cast<double>(std::clamp(k, -bound, bound));
  const Tensor row = reshape(arange(rows, i64), Shape{rows, 1});
  const Tensor col = reshape(arange(cols, i64), Shape{1, cols});
  const Tensor offset = col - row;
  const Tensor keep = lower ? offset <= kk : offset >= kk;
  return where(keep, x, detail::scalar_like(0.0, x));
}

}  // namespace

Tensor tril(const Tensor& x, std::int64_t k) { return triangle(x, k, true, "tril"); }

Tensor triu(const Tensor& x, std::int64_t k) { return triangle(x, k, false, "triu"); }

}  // namespace kiln

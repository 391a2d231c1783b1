// Front ends of the scans, sorting and indexing ops.
//
// Attrs contracts of the indexing primitives (read by run_indexing in kernels/indexing.cpp):
//   cumsum, cumprod : axis (normalized); ints = {exclusive, reverse} (0 or 1 each).
//   argsort         : axis; ints = {k, descending}: the first k positions of each line in sorted
//                     order (k = -1: all of them). Output i64, axis size k.
//   take_along_axis : axis; inputs {x, indices}: indices of x's rank, each other dim at most
//                     x's; the output has indices' shape.
//   scatter         : axis; ints = {ScatterMode}; inputs {x, indices, updates}, updates shaped
//                     as indices (as take_along_axis); the output has x's shape.
//   gather_nd       : axis = batch dims b; inputs {x, indices [.., m]}; output
//                     indices.shape[:-1] + x.shape[b+m:].
//   scatter_nd      : axis = batch dims b; ints = {ScatterMode}; inputs {x, indices, updates},
//                     updates of gather_nd's output shape; the output has x's shape.
// Index values are checked by the kernels (they are known only when the op runs).

#include "ops/indexing.hpp"

#include <string>

#include "core/fail.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::apply;
using detail::check_defined;
using detail::fail;
using detail::Prim;

static_assert(static_cast<int>(ScatterMode::assign) == 0 &&
                  static_cast<int>(ScatterMode::add) == 1 &&
                  static_cast<int>(ScatterMode::multiply) == 2 &&
                  static_cast<int>(ScatterMode::maximum) == 3 &&
                  static_cast<int>(ScatterMode::minimum) == 4,
              "kernels/indexing.cpp's Combine has these values");

std::string_view mode_name(ScatterMode mode) {
  switch (mode) {
    case ScatterMode::assign:
      return "assign";
    case ScatterMode::add:
      return "add";
    case ScatterMode::multiply:
      return "multiply";
    case ScatterMode::maximum:
      return "maximum";
    case ScatterMode::minimum:
      return "minimum";
  }
  return "?";
}

void check_indices(const Tensor& indices, std::string_view op) {
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64)
    fail(op, "indices must be i32 or i64, got {}", indices.dtype());
}

/// Whether two dims are certainly different. A dynamic dim may equal any size: the kernel checks
/// the sizes when the op runs.
bool differ(std::int64_t a, std::int64_t b) {
  return a != b && !is_dynamic_dim(a) && !is_dynamic_dim(b);
}

/// Whether two shapes certainly differ (in rank, or in a pair of dims).
bool differ(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return true;
  for (std::size_t d = 0; d < a.size(); ++d)
    if (differ(a[d], b[d])) return true;
  return false;
}

/// Whether dim a is certainly larger than b (false when either is dynamic).
bool larger(std::int64_t a, std::int64_t b) {
  return !is_dynamic_dim(a) && !is_dynamic_dim(b) && a > b;
}

void check_mode(DType dtype, ScatterMode mode, std::string_view op) {
  if (mode != ScatterMode::assign && dtype == DType::boolean)
    fail(op, "mode {} needs a numeric dtype, got bool", mode_name(mode));
}

/// Checks scatter's arguments against take_along_axis' contract.
void check_along(const Tensor& x, const Tensor& indices, std::size_t axis, std::string_view op) {
  for (std::size_t d = 0; d < x.shape().size(); ++d)
    if (d != axis && larger(indices.shape()[d], x.shape()[d]))
      fail(op, "indices of shape {} exceed x of shape {} along axis {}", indices.shape(), x.shape(),
           d);
}

Tensor argsort_positions(const Tensor& x, std::int64_t axis, std::int64_t k, bool descending) {
  detail::Attrs attrs;
  attrs.axis = axis;
  attrs.ints = {k, descending ? 1 : 0};
  Shape out = x.shape();
  if (k >= 0) out[static_cast<std::size_t>(axis)] = k;
  return apply(Prim::argsort, {x}, attrs, DType::i64, out);
}

}  // namespace

namespace detail {

Tensor running(Prim p, const Tensor& x, std::int64_t axis, bool exclusive, bool reverse) {
  Attrs attrs;
  attrs.axis = axis;
  attrs.ints = {exclusive ? 1 : 0, reverse ? 1 : 0};
  return apply(p, {x}, attrs, x.dtype(), x.shape());
}

Tensor take_along_exact(const Tensor& x, const Tensor& indices, std::int64_t axis) {
  Attrs attrs;
  attrs.axis = axis;
  return apply(Prim::take_along_axis, {x, indices}, attrs, x.dtype(), indices.shape());
}

Tensor scatter_exact(const Tensor& x, const Tensor& indices, const Tensor& updates,
                     std::int64_t axis, ScatterMode mode) {
  Attrs attrs;
  attrs.axis = axis;
  attrs.ints = {static_cast<std::int64_t>(mode)};
  return apply(Prim::scatter, {x, indices, updates}, attrs, x.dtype(), x.shape());
}

Tensor gather_nd_exact(const Tensor& x, const Tensor& indices, std::int64_t batch_dims) {
  const std::size_t m = static_cast<std::size_t>(indices.shape()[indices.shape().size() - 1]);
  Shape out;
  for (std::size_t d = 0; d + 1 < indices.shape().size(); ++d) out.push_back(indices.shape()[d]);
  for (std::size_t d = static_cast<std::size_t>(batch_dims) + m; d < x.shape().size(); ++d)
    out.push_back(x.shape()[d]);
  Attrs attrs;
  attrs.axis = batch_dims;
  return apply(Prim::gather_nd, {x, indices}, attrs, x.dtype(), out);
}

Tensor scatter_nd_exact(const Tensor& x, const Tensor& indices, const Tensor& updates,
                        ScatterMode mode, std::int64_t batch_dims) {
  Attrs attrs;
  attrs.axis = batch_dims;
  attrs.ints = {static_cast<std::int64_t>(mode)};
  return apply(Prim::scatter_nd, {x, indices, updates}, attrs, x.dtype(), x.shape());
}

}  // namespace detail

namespace {

Tensor running_front(Prim p, const Tensor& x, std::int64_t axis, bool exclusive, bool reverse,
                     std::string_view op) {
  check_defined(x, op);
  detail::check_accepts(x.dtype(), detail::Accepts::numeric, op);
  const std::int64_t a = detail::normalize_axis(axis, x.ndim(), op);
  return detail::running(p, x, a, exclusive, reverse);
}

}  // namespace

Tensor cumsum(const Tensor& x, std::int64_t axis, bool exclusive, bool reverse) {
  return running_front(Prim::cumsum, x, axis, exclusive, reverse, "cumsum");
}

Tensor cumprod(const Tensor& x, std::int64_t axis, bool exclusive, bool reverse) {
  return running_front(Prim::cumprod, x, axis, exclusive, reverse, "cumprod");
}

Tensor argsort(const Tensor& x, std::int64_t axis, bool descending) {
  check_defined(x, "argsort");
  const std::int64_t a = detail::normalize_axis(axis, x.ndim(), "argsort");
  return argsort_positions(x, a, -1, descending);
}

Tensor sort(const Tensor& x, std::int64_t axis, bool descending) {
  check_defined(x, "sort");
  const std::int64_t a = detail::normalize_axis(axis, x.ndim(), "sort");
  const Tensor order = argsort_positions(x, a, -1, descending);
  return detail::take_along_exact(x, order, a);
}

TopK top_k(const Tensor& x, std::int64_t k, std::int64_t axis, bool largest) {
  check_defined(x, "top_k");
  const std::int64_t a = detail::normalize_axis(axis, x.ndim(), "top_k");
  const std::int64_t n = x.shape()[static_cast<std::size_t>(a)];
  if (k < 0) fail("top_k", "k {} is negative", k);
  if (!is_dynamic_dim(n) && k > n)
    fail("top_k", "k {} exceeds the size {} of axis {} of shape {}", k, n, a, x.shape());
  TopK result;
  result.indices = argsort_positions(x, a, k, largest);
  result.values = detail::take_along_exact(x, result.indices, a);
  return result;
}

Tensor take_along_axis(const Tensor& x, const Tensor& indices, std::int64_t axis) {
  check_defined(x, "take_along_axis", 0);
  check_defined(indices, "take_along_axis", 1);
  check_indices(indices, "take_along_axis");
  if (x.ndim() != indices.ndim())
    fail("take_along_axis", "indices of shape {} need the rank of x of shape {}", indices.shape(),
         x.shape());
  const std::int64_t a = detail::normalize_axis(axis, x.ndim(), "take_along_axis");
  const auto ax = static_cast<std::size_t>(a);
  // NumPy's rule: the other axes broadcast together.
  Shape x_to = x.shape(), i_to = indices.shape();
  for (std::size_t d = 0; d < x_to.size(); ++d) {
    if (d == ax || x_to[d] == i_to[d]) continue;
    if (x_to[d] == 1)
      x_to[d] = i_to[d];
    else if (i_to[d] == 1)
      i_to[d] = x_to[d];
    else if (differ(x_to[d], i_to[d]))
      fail("take_along_axis", "shapes {} and {} cannot be broadcast along axis {}", x.shape(),
           indices.shape(), d);
  }
  const Tensor xb = x_to == x.shape() ? x : broadcast_to(x, x_to);
  const Tensor ib = i_to == indices.shape() ? indices : broadcast_to(indices, i_to);
  return detail::take_along_exact(xb, ib, a);
}

Tensor scatter(const Tensor& x, const Tensor& indices, const Tensor& updates, std::int64_t axis,
               ScatterMode mode) {
  check_defined(x, "scatter", 0);
  check_defined(indices, "scatter", 1);
  check_defined(updates, "scatter", 2);
  check_indices(indices, "scatter");
  detail::check_same_dtype(x, updates, "scatter");
  check_mode(x.dtype(), mode, "scatter");
  if (x.ndim() != indices.ndim())
    fail("scatter", "indices of shape {} need the rank of x of shape {}", indices.shape(),
         x.shape());
  if (differ(updates.shape(), indices.shape()))
    fail("scatter", "updates of shape {} need the shape of indices {}", updates.shape(),
         indices.shape());
  const std::int64_t a = detail::normalize_axis(axis, x.ndim(), "scatter");
  check_along(x, indices, static_cast<std::size_t>(a), "scatter");
  return detail::scatter_exact(x, indices, updates, a, mode);
}

Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates,
                   std::int64_t axis) {
  return scatter(x, indices, updates, axis, ScatterMode::add);
}

namespace {

/// Checks gather_nd / scatter_nd's x and indices; returns m, the tuple length.
std::size_t check_tuples(const Tensor& x, const Tensor& indices, std::int64_t batch_dims,
                         std::string_view op) {
  check_indices(indices, op);
  if (indices.ndim() < 1) fail(op, "indices must have rank 1 or more, got a scalar");
  const std::int64_t m = indices.shape()[indices.shape().size() - 1];
  detail::require_static_dim(m, op, "the tuple length (indices' last dim)");
  if (batch_dims < 0 || batch_dims >= indices.ndim())
    fail(op, "batch_dims {} must lie in [0, {}) for indices of shape {}", batch_dims,
         indices.ndim(), indices.shape());
  if (batch_dims + m > x.ndim())
    fail(op, "tuples of length {} after {} batch dims exceed x of shape {}", m, batch_dims,
         x.shape());
  for (std::size_t d = 0; d < static_cast<std::size_t>(batch_dims); ++d)
    if (differ(x.shape()[d], indices.shape()[d]))
      fail(op, "batch dim {} differs: x of shape {}, indices of shape {}", d, x.shape(),
           indices.shape());
  return static_cast<std::size_t>(m);
}

}  // namespace

Tensor gather_nd(const Tensor& x, const Tensor& indices, std::int64_t batch_dims) {
  check_defined(x, "gather_nd", 0);
  check_defined(indices, "gather_nd", 1);
  check_tuples(x, indices, batch_dims, "gather_nd");
  return detail::gather_nd_exact(x, indices, batch_dims);
}

Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, ScatterMode mode) {
  check_defined(x, "scatter_nd", 0);
  check_defined(indices, "scatter_nd", 1);
  check_defined(updates, "scatter_nd", 2);
  detail::check_same_dtype(x, updates, "scatter_nd");
  check_mode(x.dtype(), mode, "scatter_nd");
  const std::size_t m = check_tuples(x, indices, 0, "scatter_nd");
  Shape expected;
  for (std::size_t d = 0; d + 1 < indices.shape().size(); ++d)
    expected.push_back(indices.shape()[d]);
  for (std::size_t d = m; d < x.shape().size(); ++d) expected.push_back(x.shape()[d]);
  if (differ(updates.shape(), expected))
    fail("scatter_nd", "updates of shape {} need shape {} (indices {} into x {})", updates.shape(),
         expected, indices.shape(), x.shape());
  return detail::scatter_nd_exact(x, indices, updates, mode, 0);
}

}  // namespace kiln

// Front ends of the reductions, and the composites built on them (mean, logsumexp,
// softmax, log_softmax).
//
// Contract of the reduce primitives (kernels in lib/kernels/reduce.cpp):
// - The input is contiguous with its own shape.
// - attrs.axes holds the reduced axes, normalized to [0, rank), sorted and unique;
//   attrs.keepdims says whether they stay as size-1 dims. The output is contiguous with
//   the output shape (the memory layout is the same either way).
// - reduce_sum/reduce_prod/reduce_max/reduce_min keep the input dtype (integers wrap);
//   reduce_all/reduce_any output bool (nonzero, NaN included, is true).
// - argmax/argmin reduce exactly one axis and output i64; NaN counts as the extremum.
// - Over a zero-size extent sum is 0, prod 1, all true, any false; max/min/argmax/argmin of
//   a zero-size extent are rejected here.

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::Attrs;
using detail::Prim;

/// A validated reduction: attrs for the primitive, output shape (with and without the
/// reduced dims kept), and the number of elements each output element reduces.
struct Reduction {
  Attrs attrs;
  Shape out_shape;
  Shape keepdims_shape;
  std::int64_t extent = 1;
  bool dynamic_extent = false;  // a reduced dim is dynamic: extent is known only at run time
};

Reduction plan_reduction(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims,
                         std::string_view op) {
  detail::check_defined(x, op);
  const Shape& shape = x.shape();
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::array<bool, Shape::max_rank> is_reduced{};
  for (auto axis : axes) {
    const auto a = static_cast<std::size_t>(detail::normalize_axis(axis, rank, op));
    if (is_reduced[a])
      detail::fail(op, "axis {} repeated in axes [{}] for shape {}", axis, fmt::join(axes, ","),
                   shape);
    is_reduced[a] = true;
  }
  Reduction r;
  r.attrs.keepdims = keepdims;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (is_reduced[d]) {
      r.attrs.axes.push_back(static_cast<std::int64_t>(d));
      if (is_dynamic_dim(shape[d]))
        r.dynamic_extent = true;
      else
        r.extent *= shape[d];
      r.keepdims_shape.push_back(1);
      if (keepdims) r.out_shape.push_back(1);
    } else {
      r.keepdims_shape.push_back(shape[d]);
      r.out_shape.push_back(shape[d]);
    }
  }
  return r;
}

std::vector<std::int64_t> every_axis(const Tensor& x, std::string_view op) {
  detail::check_defined(x, op);
  std::vector<std::int64_t> axes(static_cast<std::size_t>(x.ndim()));
  for (std::size_t d = 0; d < axes.size(); ++d) axes[d] = static_cast<std::int64_t>(d);
  return axes;
}

void reject_bool(const Tensor& x, std::string_view op) {
  if (x.dtype() == DType::boolean)
    detail::fail(op, "bool input is not supported (use kiln::cast to an integer dtype)");
}

void require_floating(const Tensor& x, std::string_view op) {
  if (!is_floating(x.dtype()))
    detail::fail(op, "needs f32 or f64 input, got {} (use kiln::cast to f32 or f64 first)",
                 dtype_name(x.dtype()));
}

void reject_empty_extent(const Tensor& x, const Reduction& r, std::string_view op) {
  if (r.extent == 0 && !r.dynamic_extent)
    detail::fail(op, "reduction over a zero-size extent (shape {}, axes [{}]) has no identity",
                 x.shape(), fmt::join(r.attrs.axes, ","));
}

Tensor reduce(Prim prim, const Tensor& x, const Reduction& r, DType out_dtype) {
  return detail::apply(prim, {x}, r.attrs, out_dtype, r.out_shape);
}

/// The values subtracted before exp() in the stable composites: max(x) over the reduced
/// axes (kept as size-1 dims) where it is finite, else 0; all zeros for an empty extent.
Tensor stable_shift(const Tensor& x, const std::vector<std::int64_t>& axes, const Reduction& r) {
  if (r.extent == 0 && !r.dynamic_extent) return zeros(r.keepdims_shape, x.dtype());
  const Tensor m = kiln::max(x, axes, true);
  return where(isfinite(m), m, zeros_like(m));
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  const Reduction r = plan_reduction(x, axes, keepdims, "sum");
  reject_bool(x, "sum");
  return reduce(Prim::reduce_sum, x, r, x.dtype());
}
Tensor sum(const Tensor& x) { return sum(x, every_axis(x, "sum")); }

Tensor prod(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  const Reduction r = plan_reduction(x, axes, keepdims, "prod");
  reject_bool(x, "prod");
  return reduce(Prim::reduce_prod, x, r, x.dtype());
}
Tensor prod(const Tensor& x) { return prod(x, every_axis(x, "prod")); }

Tensor max(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  const Reduction r = plan_reduction(x, axes, keepdims, "max");
  reject_empty_extent(x, r, "max");
  return reduce(Prim::reduce_max, x, r, x.dtype());
}
Tensor max(const Tensor& x) { return max(x, every_axis(x, "max")); }

Tensor min(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  const Reduction r = plan_reduction(x, axes, keepdims, "min");
  reject_empty_extent(x, r, "min");
  return reduce(Prim::reduce_min, x, r, x.dtype());
}
Tensor min(const Tensor& x) { return min(x, every_axis(x, "min")); }

Tensor all(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  return reduce(Prim::reduce_all, x, plan_reduction(x, axes, keepdims, "all"), DType::boolean);
}
Tensor all(const Tensor& x) { return all(x, every_axis(x, "all")); }

Tensor any(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  return reduce(Prim::reduce_any, x, plan_reduction(x, axes, keepdims, "any"), DType::boolean);
}
Tensor any(const Tensor& x) { return any(x, every_axis(x, "any")); }

namespace {

Tensor arg_extremum(Prim prim, const Tensor& x, std::int64_t axis, bool keepdims,
                    std::string_view op, bool last_index = false) {
  Reduction r = plan_reduction(x, {axis}, keepdims, op);
  if (r.extent == 0)
    detail::fail(op, "axis {} of shape {} has size 0, so there is no {}", axis, x.shape(), op);
  if (last_index) r.attrs.ints = {1};
  return reduce(prim, x, r, DType::i64);
}

Tensor arg_extremum_flat(Prim prim, const Tensor& x, std::string_view op) {
  detail::check_defined(x, op);
  if (x.size() == 0) detail::fail(op, "empty tensor of shape {} has no {}", x.shape(), op);
  const Tensor flat = detail::apply(Prim::reshape, {x}, Attrs{}, x.dtype(), Shape{x.size()});
  return arg_extremum(prim, flat, 0, false, op);
}

}  // namespace

Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdims, bool last_index) {
  return arg_extremum(Prim::argmax, x, axis, keepdims, "argmax", last_index);
}
Tensor argmax(const Tensor& x) { return arg_extremum_flat(Prim::argmax, x, "argmax"); }

Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdims, bool last_index) {
  return arg_extremum(Prim::argmin, x, axis, keepdims, "argmin", last_index);
}
Tensor argmin(const Tensor& x) { return arg_extremum_flat(Prim::argmin, x, "argmin"); }

Tensor mean(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  const Reduction r = plan_reduction(x, axes, keepdims, "mean");
  require_floating(x, "mean");
  if (r.dynamic_extent) {
    // The count of reduced elements is known only when the traced function runs.
    detail::Attrs attrs = r.attrs;
    const Tensor count = detail::apply(Prim::dim_size, {x}, attrs, x.dtype(), Shape{});
    return sum(x, axes, keepdims) / count;
  }
  return sum(x, axes, keepdims) / static_cast<double>(r.extent);
}
Tensor mean(const Tensor& x) { return mean(x, every_axis(x, "mean")); }

namespace {

/// Whether softmax, log_softmax and logsumexp over r's axis run as their primitives: rows that are
/// contiguous in memory (the axis is the last one above size 1), not empty, and static shapes.
/// The primitives read each row once and write it once; elsewhere the composites below run.
bool rows_primitive_applies(const Tensor& x, const Reduction& r) {
  bool rows = r.extent > 0 && !r.dynamic_extent;
  for (std::size_t d = 0; d < x.shape().size(); ++d) {
    rows = rows && !is_dynamic_dim(x.shape()[d]);
    if (static_cast<std::int64_t>(d) > r.attrs.axes[0]) rows = rows && x.shape()[d] == 1;
  }
  return rows;
}

}  // namespace

Tensor logsumexp(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  const Reduction r = plan_reduction(x, axes, keepdims, "logsumexp");
  require_floating(x, "logsumexp");
  if (r.attrs.axes.size() == 1 && rows_primitive_applies(x, r))
    return detail::apply(Prim::logsumexp, {x}, r.attrs, x.dtype(), r.out_shape);
  const Tensor shift = stable_shift(x, axes, r);
  const Tensor kept = log(sum(exp(x - shift), axes, true)) + shift;
  // Summing over the size-1 reduced dims only drops them.
  return keepdims ? kept : sum(kept, axes, false);
}
Tensor logsumexp(const Tensor& x) { return logsumexp(x, every_axis(x, "logsumexp")); }

Tensor softmax(const Tensor& x, std::int64_t axis) {
  const std::vector<std::int64_t> axes{axis};
  const Reduction r = plan_reduction(x, axes, true, "softmax");
  require_floating(x, "softmax");
  if (rows_primitive_applies(x, r))
    return detail::apply(Prim::softmax, {x}, r.attrs, x.dtype(), x.shape());
  const Tensor e = exp(x - stable_shift(x, axes, r));
  return e * (1.0 / sum(e, axes, true));
}

Tensor log_softmax(const Tensor& x, std::int64_t axis) {
  const std::vector<std::int64_t> axes{axis};
  const Reduction r = plan_reduction(x, axes, true, "log_softmax");
  require_floating(x, "log_softmax");
  if (rows_primitive_applies(x, r))
    return detail::apply(Prim::log_softmax, {x}, r.attrs, x.dtype(), x.shape());
  const Tensor shifted = x - stable_shift(x, axes, r);
  return shifted - log(sum(exp(shifted), axes, true));
}

}  // namespace kiln

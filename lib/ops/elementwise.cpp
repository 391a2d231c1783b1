// Front ends of the elementwise ops: check dtypes and shapes, infer the output, dispatch.

#include <cmath>

#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::Prim;

using detail::Accepts;

using detail::no_attrs;

/// The front end of a KILN_UNARY primitive (its accepts and output columns).
template <Prim P>
Tensor unary(const Tensor& x) {
  constexpr detail::PrimitiveInfo info = detail::info(P);
  detail::check_defined(x, info.name);
  detail::check_accepts(x.dtype(), info.accepts, info.name);
  const DType out = info.output == detail::Output::boolean ? DType::boolean : x.dtype();
  return detail::apply(P, {x}, no_attrs(), out, x.shape());
}

/// The front end of a KILN_BINARY primitive: equal dtypes, broadcast shapes.
template <Prim P>
Tensor binary(const Tensor& a, const Tensor& b) {
  constexpr detail::PrimitiveInfo info = detail::info(P);
  detail::check_defined(a, info.name, 0);
  detail::check_defined(b, info.name, 1);
  detail::check_same_dtype(a, b, info.name);
  detail::check_accepts(a.dtype(), info.accepts, info.name);
  const Shape shape = a.shape() == b.shape()
                          ? a.shape()
                          : detail::broadcast_shapes(a.shape(), b.shape(), info.name);
  const DType out = info.output == detail::Output::boolean ? DType::boolean : a.dtype();
  return detail::apply(P, {a, b}, no_attrs(), out, shape);
}

}  // namespace

// The public function of every KILN_UNARY and KILN_BINARY primitive (declared in kiln/ops.hpp).
#define KILN_UNARY(name, accepts, output, kernel, label, grad) \
  Tensor name(const Tensor& x) { return unary<Prim::name>(x); }
#define KILN_BINARY(name, accepts, output, kernel, label, grad) \
  Tensor name(const Tensor& a, const Tensor& b) { return binary<Prim::name>(a, b); }
#include "primitives/primitives.def"

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined(x, "cast");
  if (static_cast<std::size_t>(dtype) >= num_dtypes)
    detail::fail("cast", "unknown dtype {}", static_cast<int>(dtype));
  if (x.dtype() == dtype) return x;
  detail::Attrs attrs;
  attrs.dtype = dtype;
  return detail::apply(Prim::cast, {x}, attrs, dtype, x.shape());
}

Tensor bitcast(const Tensor& x, DType dtype) {
  detail::check_defined(x, "bitcast");
  if (static_cast<std::size_t>(dtype) >= num_dtypes)
    detail::fail("bitcast", "unknown dtype {}", static_cast<int>(dtype));
  const auto check_whole_bytes = [](DType t) {
    if (t == DType::boolean)
      detail::fail("bitcast",
                   "does not take bool: a bool holds 0 or 1, not any byte (use "
                   "kiln::cast)");
    if (t == DType::f4e2m1fn || t == DType::i4 || t == DType::u4 || t == DType::i2 ||
        t == DType::u2)
      detail::fail("bitcast",
                   "does not take {}: it is stored one value per byte, not as its "
                   "bits (use kiln::cast)",
                   dtype_name(t));
  };
  if (x.dtype() != DType::boolean || dtype != DType::u8) check_whole_bytes(x.dtype());
  check_whole_bytes(dtype);
  if (dtype_size(x.dtype()) != dtype_size(dtype))
    detail::fail("bitcast", "needs dtypes of the same size: {} has {} bytes, {} has {}",
                 dtype_name(x.dtype()), dtype_size(x.dtype()), dtype_name(dtype),
                 dtype_size(dtype));
  if (x.dtype() == dtype) return x;
  detail::Attrs attrs;
  attrs.dtype = dtype;
  return detail::apply(Prim::bitcast, {x}, attrs, dtype, x.shape());
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined(cond, "where", 0);
  detail::check_defined(a, "where", 1);
  detail::check_defined(b, "where", 2);
  if (cond.dtype() != DType::boolean)
    detail::fail("where", "condition must have dtype bool, got {}", dtype_name(cond.dtype()));
  detail::check_same_dtype(a, b, "where");
  const Shape shape = detail::broadcast_shapes(
      detail::broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  return detail::apply(Prim::where, {cond, a, b}, no_attrs(), a.dtype(), shape);
}

Tensor clip(const Tensor& x, double lo, double hi) {
  detail::check_defined(x, "clip");
  detail::check_accepts(x.dtype(), Accepts::numeric, "clip");
  if (!(lo <= hi)) detail::fail("clip", "needs lo <= hi, got lo {} and hi {}", lo, hi);
  if (is_integer(x.dtype())) {
    lo = std::ceil(lo);
    hi = std::floor(hi);
  }
  return minimum(maximum(x, detail::scalar_like(lo, x)), detail::scalar_like(hi, x));
}

namespace detail {
Tensor scalar_like(double v, const Tensor& like) {
  check_defined(like, "scalar_like");
  return scalar(v, like.dtype());
}
}  // namespace detail

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator!(const Tensor& x) { return logical_not(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator%(const Tensor& a, const Tensor& b) { return mod(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return equal(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return not_equal(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return less(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return less_equal(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return greater(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return greater_equal(a, b); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }

}  // namespace kiln

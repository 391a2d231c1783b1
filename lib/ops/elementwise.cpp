// Front ends of the elementwise ops: check dtypes and shapes, infer the output, dispatch.

#include <cmath>

#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::Prim;

/// Which input dtypes an op accepts.
enum class Accepts { floating, numeric, any };

const detail::Attrs& no_attrs() {
  static const detail::Attrs attrs;
  return attrs;
}

void check_accepts(DType dtype, Accepts accepts, std::string_view op) {
  switch (accepts) {
    case Accepts::floating:
      if (!is_floating(dtype))
        detail::fail(op, "needs a floating-point dtype (f32 or f64), got {} (use kiln::cast)",
                     dtype_name(dtype));
      break;
    case Accepts::numeric:
      if (dtype == DType::boolean)
        detail::fail(op, "needs a numeric dtype (f32, f64, i32 or i64), got bool");
      break;
    case Accepts::any:
      break;
  }
}

Tensor unary(Prim prim, const Tensor& x, Accepts accepts, bool bool_out = false) {
  const std::string_view op = detail::name(prim);
  detail::check_defined(x, op);
  check_accepts(x.dtype(), accepts, op);
  return detail::apply(prim, {x}, no_attrs(), bool_out ? DType::boolean : x.dtype(), x.shape());
}

Tensor binary(Prim prim, const Tensor& a, const Tensor& b, Accepts accepts, bool bool_out = false) {
  const std::string_view op = detail::name(prim);
  detail::check_defined(a, op, 0);
  detail::check_defined(b, op, 1);
  detail::check_same_dtype(a, b, op);
  check_accepts(a.dtype(), accepts, op);
  const Shape shape =
      a.shape() == b.shape() ? a.shape() : detail::broadcast_shapes(a.shape(), b.shape(), op);
  return detail::apply(prim, {a, b}, no_attrs(), bool_out ? DType::boolean : a.dtype(), shape);
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(Prim::neg, x, Accepts::numeric); }
Tensor abs(const Tensor& x) { return unary(Prim::abs, x, Accepts::numeric); }
Tensor sign(const Tensor& x) { return unary(Prim::sign, x, Accepts::numeric); }
Tensor exp(const Tensor& x) { return unary(Prim::exp, x, Accepts::floating); }
Tensor log(const Tensor& x) { return unary(Prim::log, x, Accepts::floating); }
Tensor log1p(const Tensor& x) { return unary(Prim::log1p, x, Accepts::floating); }
Tensor sqrt(const Tensor& x) { return unary(Prim::sqrt, x, Accepts::floating); }
Tensor rsqrt(const Tensor& x) { return unary(Prim::rsqrt, x, Accepts::floating); }
Tensor square(const Tensor& x) { return unary(Prim::square, x, Accepts::numeric); }
Tensor sin(const Tensor& x) { return unary(Prim::sin, x, Accepts::floating); }
Tensor cos(const Tensor& x) { return unary(Prim::cos, x, Accepts::floating); }
Tensor tanh(const Tensor& x) { return unary(Prim::tanh, x, Accepts::floating); }
Tensor sigmoid(const Tensor& x) { return unary(Prim::sigmoid, x, Accepts::floating); }
Tensor relu(const Tensor& x) { return unary(Prim::relu, x, Accepts::numeric); }
Tensor softplus(const Tensor& x) { return unary(Prim::softplus, x, Accepts::floating); }
Tensor floor(const Tensor& x) { return unary(Prim::floor, x, Accepts::numeric); }
Tensor ceil(const Tensor& x) { return unary(Prim::ceil, x, Accepts::numeric); }
Tensor round(const Tensor& x) { return unary(Prim::round, x, Accepts::numeric); }
Tensor logical_not(const Tensor& x) { return unary(Prim::logical_not, x, Accepts::any, true); }
Tensor isnan(const Tensor& x) { return unary(Prim::isnan, x, Accepts::any, true); }
Tensor isfinite(const Tensor& x) { return unary(Prim::isfinite, x, Accepts::any, true); }

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined(x, "cast");
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::i32:
    case DType::i64:
    case DType::boolean:
      break;
    default:
      detail::fail("cast", "unknown dtype {}", static_cast<int>(dtype));
  }
  if (x.dtype() == dtype) return x;
  detail::Attrs attrs;
  attrs.dtype = dtype;
  return detail::apply(Prim::cast, {x}, attrs, dtype, x.shape());
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(Prim::add, a, b, Accepts::numeric); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(Prim::sub, a, b, Accepts::numeric); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Prim::mul, a, b, Accepts::numeric); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(Prim::div, a, b, Accepts::numeric); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(Prim::pow, a, b, Accepts::numeric); }
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(Prim::maximum, a, b, Accepts::numeric);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(Prim::minimum, a, b, Accepts::numeric);
}
Tensor mod(const Tensor& a, const Tensor& b) { return binary(Prim::mod, a, b, Accepts::numeric); }
Tensor equal(const Tensor& a, const Tensor& b) {
  return binary(Prim::equal, a, b, Accepts::any, true);
}
Tensor not_equal(const Tensor& a, const Tensor& b) {
  return binary(Prim::not_equal, a, b, Accepts::any, true);
}
Tensor less(const Tensor& a, const Tensor& b) {
  return binary(Prim::less, a, b, Accepts::any, true);
}
Tensor less_equal(const Tensor& a, const Tensor& b) {
  return binary(Prim::less_equal, a, b, Accepts::any, true);
}
Tensor greater(const Tensor& a, const Tensor& b) {
  return binary(Prim::greater, a, b, Accepts::any, true);
}
Tensor greater_equal(const Tensor& a, const Tensor& b) {
  return binary(Prim::greater_equal, a, b, Accepts::any, true);
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary(Prim::logical_and, a, b, Accepts::any, true);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary(Prim::logical_or, a, b, Accepts::any, true);
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
  check_accepts(x.dtype(), Accepts::numeric, "clip");
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

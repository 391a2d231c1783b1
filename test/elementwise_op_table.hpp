#pragma once
// The one table of kiln's elementwise ops, shared by three tests. Adding an elementwise op
// takes one row in elementwise_ops() below, and the row is then checked for:
//  - test_elementwise.cpp: its values against `reference` in every dtype `accepts` admits, on
//    the reference inputs below (floating specials included); an error naming the op
//    ("[name] ...") in every other dtype; the undefined-argument, dtype-mismatch and broadcast
//    error messages. That file also fails when an elementwise primitive has no row.
//  - test_autodiff.cpp: the tape gradient against central finite differences (f64) on
//    `domain`; a `differentiable` row's gradient is not all zero there, any other row's is
//    exactly zero.
//  - test_traced_ops.cpp: a kiln::function of the op bit-identical to eager on the reference
//    inputs of every accepted dtype and on random inputs drawn from `domain` (f32, plus i32 and
//    bool where accepted); on those random inputs also: every dim dynamic, and the optimized
//    against the unoptimized plan.
// Special cases of particular ops (saturation, rounding ties, integer limits, what each
// instruction set's kernels compute) stay in the tests of those files.

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/kiln.hpp>

namespace kiln::test {

/// The dtypes an op takes: floating (f32, f64), integer (i32, i64), numeric (both) or any (and
/// bool).
enum class Accepts { floating, integer, numeric, any };

inline bool accepts(Accepts a, DType d) {
  return a == Accepts::any || (a == Accepts::numeric && d != DType::boolean) ||
         (a == Accepts::floating && is_floating(d)) || (a == Accepts::integer && is_integer(d));
}

/// Where the gradient checks draw an op's f64 arguments (and the traced checks their random
/// ones): the op is smooth and finite there, every kink, pole or step at least 0.1 away (the
/// finite-difference step is 1e-6). test_autodiff.cpp and test_traced_ops.cpp turn a domain
/// into tensors; a unary row takes a unary domain, a binary row a binary one, where `real`.
enum class Domain {
  real,              // every argument anywhere (unary [-2, 2), binary and where [-1, 1))
  positive,          // unary, x in [0.5, 2): log, log1p, sqrt, rsqrt
  off_zero,          // |x| >= 0.15 for every x: a kink or a step at 0 (abs, relu, logical ops)
  off_steps,         // unary, x 0.2 or more from every multiple of 1/2: floor, ceil, round
  positive_divisor,  // binary, b in [0.5, 2): div
  positive_base,     // binary, a in [0.5, 2): pow
  apart,             // binary, b = a + 0.5 and the other way round: a kink or step at a == b
  within_period,     // binary, a in [0.1, 0.9), b = 1.3: a / b between integers (mod)
  unit,              // unary, |x| <= 0.9: asin, acos, atanh (and tan, away from its poles)
  above_one,         // unary, x in [1.1, 3): acosh
};

using UnaryFn = Tensor (*)(const Tensor&);
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
using TernaryFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&);

/// A row's kiln function, of one, two or three tensors (a ternary op's first argument is its
/// boolean condition, as where's).
class OpFn {
 public:
  OpFn(UnaryFn f) : arity_(1), unary_(f) {}
  OpFn(BinaryFn f) : arity_(2), binary_(f) {}
  OpFn(TernaryFn f) : arity_(3), ternary_(f) {}
  int arity() const { return arity_; }
  Tensor operator()(const std::vector<Tensor>& args) const {
    if (static_cast<int>(args.size()) != arity_)
      throw std::logic_error("elementwise_op_table: wrong number of arguments");
    switch (arity_) {
      case 1:
        return unary_(args[0]);
      case 2:
        return binary_(args[0], args[1]);
      default:
        return ternary_(args[0], args[1], args[2]);
    }
  }

 private:
  int arity_;
  UnaryFn unary_ = nullptr;
  BinaryFn binary_ = nullptr;
  TernaryFn ternary_ = nullptr;
};

/// A reference computed in double, of as many arguments as the op (empty: none).
class Reference {
 public:
  Reference() = default;
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, Reference>) Reference(F f) {
    if constexpr (std::is_invocable_r_v<double, F, double>)
      unary_ = f;
    else if constexpr (std::is_invocable_r_v<double, F, double, double>)
      binary_ = f;
    else
      ternary_ = f;
  }
  bool empty() const { return unary_ == nullptr && binary_ == nullptr && ternary_ == nullptr; }
  double operator()(const std::vector<double>& x) const {
    if (unary_ != nullptr && x.size() == 1) return unary_(x[0]);
    if (binary_ != nullptr && x.size() == 2) return binary_(x[0], x[1]);
    if (ternary_ != nullptr && x.size() == 3) return ternary_(x[0], x[1], x[2]);
    throw std::logic_error("elementwise_op_table: the reference's arity is not the op's");
  }

 private:
  double (*unary_)(double) = nullptr;
  double (*binary_)(double, double) = nullptr;
  double (*ternary_)(double, double, double) = nullptr;
};

/// One elementwise op and everything the shared tests need to know about it.
struct ElementwiseOp {
  const char* name;  // as its error messages start: "[name] ..."; a primitive's name
  OpFn op;
  Reference reference;           // on values as stored in the dtype; NaN and infinities included
  Reference int_reference = {};  // for i32, i64 and bool, when it differs (floor division...)
  Accepts accepts;
  bool bool_out = false;       // the result is bool, whatever the inputs' dtype
  bool differentiable = true;  // kiln records a gradient (false: the gradient is zero)
  Domain domain = Domain::real;
};

/// Whether `op` takes inputs of dtype d.
inline bool accepts(const ElementwiseOp& op, DType d) { return accepts(op.accepts, d); }

namespace table_refs {
constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
inline double sign(double x) { return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
inline double softplus(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
inline double floor_div(double a, double b) { return b == 0 ? 0 : std::floor(a / b); }
inline double int_mod(double a, double b) { return b == 0 ? 0 : a - b * std::floor(a / b); }
inline double float_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r == 0 ? std::copysign(0.0, b) : r;
}
inline double int_pow(double a, double b) {
  if (b < 0) return std::fabs(a) == 1 ? std::pow(a, b) : 0;
  return std::pow(a, b);
}
inline double maximum(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? not_a_number : std::max(a, b);
}
inline double minimum(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? not_a_number : std::min(a, b);
}
inline double truth(bool b) { return b ? 1.0 : 0.0; }
/// f on a and b's two's complement bits (both integers).
template <class F>
double bits(double a, double b, F f) {
  return static_cast<double>(f(static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)));
}
}  // namespace table_refs

/// The table: unary rows, then binary, then where.
inline const std::vector<ElementwiseOp>& elementwise_ops() {
  namespace r = table_refs;
  using A = Accepts;
  using D = Domain;
  static const std::vector<ElementwiseOp> ops = {
      // ------------------------------------------------------------------ unary
      {.name = "neg",
       .op = kiln::neg,
       .reference = [](double x) { return -x; },
       .accepts = A::numeric},
      {.name = "abs",
       .op = kiln::abs,
       .reference = [](double x) { return std::fabs(x); },
       .accepts = A::numeric,
       .domain = D::off_zero},
      {.name = "sign",
       .op = kiln::sign,
       .reference = r::sign,
       .accepts = A::numeric,
       .differentiable = false,
       .domain = D::off_zero},
      {.name = "exp",
       .op = kiln::exp,
       .reference = [](double x) { return std::exp(x); },
       .accepts = A::floating},
      {.name = "log",
       .op = kiln::log,
       .reference = [](double x) { return std::log(x); },
       .accepts = A::floating,
       .domain = D::positive},
      {.name = "log1p",
       .op = kiln::log1p,
       .reference = [](double x) { return std::log1p(x); },
       .accepts = A::floating,
       .domain = D::positive},
      {.name = "sqrt",
       .op = kiln::sqrt,
       .reference = [](double x) { return std::sqrt(x); },
       .accepts = A::floating,
       .domain = D::positive},
      {.name = "rsqrt",
       .op = kiln::rsqrt,
       .reference = [](double x) { return 1.0 / std::sqrt(x); },
       .accepts = A::floating,
       .domain = D::positive},
      {.name = "square",
       .op = kiln::square,
       .reference = [](double x) { return x * x; },
       .accepts = A::numeric},
      {.name = "sin",
       .op = kiln::sin,
       .reference = [](double x) { return std::sin(x); },
       .accepts = A::floating},
      {.name = "cos",
       .op = kiln::cos,
       .reference = [](double x) { return std::cos(x); },
       .accepts = A::floating},
      {.name = "tanh",
       .op = kiln::tanh,
       .reference = [](double x) { return std::tanh(x); },
       .accepts = A::floating},
      {.name = "sigmoid",
       .op = kiln::sigmoid,
       .reference = [](double x) { return 1.0 / (1.0 + std::exp(-x)); },
       .accepts = A::floating},
      {.name = "relu",
       .op = kiln::relu,
       .reference = [](double x) { return x < 0 ? 0.0 : x; },
       .accepts = A::numeric,
       .domain = D::off_zero},
      {.name = "softplus", .op = kiln::softplus, .reference = r::softplus, .accepts = A::floating},
      {.name = "erf",
       .op = kiln::erf,
       .reference = [](double x) { return std::erf(x); },
       .accepts = A::floating},
      {.name = "expm1",
       .op = kiln::expm1,
       .reference = [](double x) { return std::expm1(x); },
       .accepts = A::floating},
      {.name = "tan",
       .op = kiln::tan,
       .reference = [](double x) { return std::tan(x); },
       .accepts = A::floating,
       .domain = D::unit},
      {.name = "asin",
       .op = kiln::asin,
       .reference = [](double x) { return std::asin(x); },
       .accepts = A::floating,
       .domain = D::unit},
      {.name = "acos",
       .op = kiln::acos,
       .reference = [](double x) { return std::acos(x); },
       .accepts = A::floating,
       .domain = D::unit},
      {.name = "atan",
       .op = kiln::atan,
       .reference = [](double x) { return std::atan(x); },
       .accepts = A::floating},
      {.name = "sinh",
       .op = kiln::sinh,
       .reference = [](double x) { return std::sinh(x); },
       .accepts = A::floating},
      {.name = "cosh",
       .op = kiln::cosh,
       .reference = [](double x) { return std::cosh(x); },
       .accepts = A::floating},
      {.name = "asinh",
       .op = kiln::asinh,
       .reference = [](double x) { return std::asinh(x); },
       .accepts = A::floating},
      {.name = "acosh",
       .op = kiln::acosh,
       .reference = [](double x) { return std::acosh(x); },
       .accepts = A::floating,
       .domain = D::above_one},
      {.name = "atanh",
       .op = kiln::atanh,
       .reference = [](double x) { return std::atanh(x); },
       .accepts = A::floating,
       .domain = D::unit},
      // Activations: composites of the primitives above (lib/ops/activations.cpp).
      {.name = "gelu",
       .op = +[](const Tensor& x) { return kiln::gelu(x); },
       .reference = [](double x) { return x * (std::erf(x * 0.70710678118654752440) + 1) * 0.5; },
       .accepts = A::floating},
      {.name = "silu",
       .op = kiln::silu,
       .reference = [](double x) { return x / (1 + std::exp(-x)); },
       .accepts = A::floating},
      {.name = "elu",
       .op = +[](const Tensor& x) { return kiln::elu(x); },
       .reference = [](double x) { return x > 0 ? x : std::expm1(x); },
       .accepts = A::floating},
      {.name = "selu",
       .op = kiln::selu,
       .reference =
           [](double x) {
             return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x));
           },
       .accepts = A::floating,
       .domain = D::off_zero},
      {.name = "leaky_relu",
       .op = +[](const Tensor& x) { return kiln::leaky_relu(x); },
       .reference = [](double x) { return x > 0 ? x : 0.01 * x; },
       .accepts = A::floating,
       .domain = D::off_zero},
      {.name = "hard_sigmoid",
       .op = +[](const Tensor& x) { return kiln::hard_sigmoid(x); },
       .reference = [](double x) { return r::minimum(r::maximum(0.2 * x + 0.5, 0.0), 1.0); },
       .accepts = A::floating},
      {.name = "softsign",
       .op = kiln::softsign,
       .reference = [](double x) { return x / (1 + std::fabs(x)); },
       .accepts = A::floating},
      {.name = "mish",
       .op = kiln::mish,
       .reference = [](double x) { return x * std::tanh(r::softplus(x)); },
       .accepts = A::floating},
      {.name = "floor",
       .op = kiln::floor,
       .reference = [](double x) { return std::floor(x); },
       .accepts = A::numeric,
       .differentiable = false,
       .domain = D::off_steps},
      {.name = "ceil",
       .op = kiln::ceil,
       .reference = [](double x) { return std::ceil(x); },
       .accepts = A::numeric,
       .differentiable = false,
       .domain = D::off_steps},
      {.name = "round",
       .op = kiln::round,
       .reference = [](double x) { return std::nearbyint(x); },  // half to even
       .accepts = A::numeric,
       .differentiable = false,
       .domain = D::off_steps},
      {.name = "logical_not",
       .op = kiln::logical_not,
       .reference = [](double x) { return r::truth(x == 0); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::off_zero},
      {.name = "bitwise_not",
       .op = kiln::bitwise_not,
       .reference = [](double x) { return static_cast<double>(~static_cast<std::int64_t>(x)); },
       .accepts = A::integer,
       .differentiable = false},
      {.name = "isnan",
       .op = kiln::isnan,
       .reference = [](double x) { return r::truth(std::isnan(x)); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false},
      {.name = "isfinite",
       .op = kiln::isfinite,
       .reference = [](double x) { return r::truth(std::isfinite(x)); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false},
      // ------------------------------------------------------------------ binary
      {.name = "add",
       .op = kiln::add,
       .reference = [](double a, double b) { return a + b; },
       .accepts = A::numeric},
      {.name = "sub",
       .op = kiln::sub,
       .reference = [](double a, double b) { return a - b; },
       .accepts = A::numeric},
      {.name = "mul",
       .op = kiln::mul,
       .reference = [](double a, double b) { return a * b; },
       .accepts = A::numeric},
      {.name = "div",
       .op = kiln::div,
       .reference = [](double a, double b) { return a / b; },
       .int_reference = r::floor_div,
       .accepts = A::numeric,
       .domain = D::positive_divisor},
      {.name = "pow",
       .op = kiln::pow,
       .reference = [](double a, double b) { return std::pow(a, b); },
       .int_reference = r::int_pow,
       .accepts = A::numeric,
       .domain = D::positive_base},
      {.name = "maximum",
       .op = kiln::maximum,
       .reference = r::maximum,
       .accepts = A::numeric,
       .domain = D::apart},
      {.name = "minimum",
       .op = kiln::minimum,
       .reference = r::minimum,
       .accepts = A::numeric,
       .domain = D::apart},
      {.name = "mod",
       .op = kiln::mod,
       .reference = r::float_mod,
       .int_reference = r::int_mod,
       .accepts = A::numeric,
       .domain = D::within_period},
      {.name = "fmod",
       .op = kiln::fmod,
       .reference = [](double a, double b) { return std::fmod(a, b); },
       .int_reference = [](double a, double b) { return b == 0 ? 0.0 : std::fmod(a, b); },
       .accepts = A::numeric,
       .domain = D::within_period},
      {.name = "trunc_div",
       .op = kiln::trunc_div,
       .reference = [](double a, double b) { return std::trunc(a / b); },
       .int_reference = [](double a, double b) { return b == 0 ? 0.0 : std::trunc(a / b); },
       .accepts = A::numeric,
       .differentiable = false,
       .domain = D::positive_divisor},
      {.name = "atan2",
       .op = kiln::atan2,
       .reference = [](double a, double b) { return std::atan2(a, b); },
       .accepts = A::floating,
       .domain = D::positive_divisor},
      {.name = "equal",
       .op = kiln::equal,
       .reference = [](double a, double b) { return r::truth(a == b); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::apart},
      {.name = "not_equal",
       .op = kiln::not_equal,
       .reference = [](double a, double b) { return r::truth(a != b); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::apart},
      {.name = "less",
       .op = kiln::less,
       .reference = [](double a, double b) { return r::truth(a < b); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::apart},
      {.name = "less_equal",
       .op = kiln::less_equal,
       .reference = [](double a, double b) { return r::truth(a <= b); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::apart},
      {.name = "greater",
       .op = kiln::greater,
       .reference = [](double a, double b) { return r::truth(a > b); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::apart},
      {.name = "greater_equal",
       .op = kiln::greater_equal,
       .reference = [](double a, double b) { return r::truth(a >= b); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::apart},
      {.name = "logical_and",
       .op = kiln::logical_and,
       .reference = [](double a, double b) { return r::truth(a != 0 && b != 0); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::off_zero},
      {.name = "logical_or",
       .op = kiln::logical_or,
       .reference = [](double a, double b) { return r::truth(a != 0 || b != 0); },
       .accepts = A::any,
       .bool_out = true,
       .differentiable = false,
       .domain = D::off_zero},
      {.name = "bitwise_and",
       .op = kiln::bitwise_and,
       .reference = [](double a,
                       double b) { return r::bits(a, b, [](auto x, auto y) { return x & y; }); },
       .accepts = A::integer,
       .differentiable = false},
      {.name = "bitwise_or",
       .op = kiln::bitwise_or,
       .reference = [](double a,
                       double b) { return r::bits(a, b, [](auto x, auto y) { return x | y; }); },
       .accepts = A::integer,
       .differentiable = false},
      {.name = "bitwise_xor",
       .op = kiln::bitwise_xor,
       .reference = [](double a,
                       double b) { return r::bits(a, b, [](auto x, auto y) { return x ^ y; }); },
       .accepts = A::integer,
       .differentiable = false},
      {.name = "left_shift",
       .op = kiln::left_shift,
       .reference = [](double a,
                       double b) { return b < 0 ? 0.0 : a * std::ldexp(1.0, static_cast<int>(b)); },
       .accepts = A::integer,
       .differentiable = false},
      {.name = "right_shift",
       .op = kiln::right_shift,
       .reference =
           [](double a, double b) {
             return b < 0 ? (a < 0 ? -1.0 : 0.0)
                          : std::floor(a / std::ldexp(1.0, static_cast<int>(b)));
           },
       .accepts = A::integer,
       .differentiable = false},
      // ------------------------------------------------------------------ ternary
      {.name = "where",
       .op = kiln::where,
       .reference = [](double c, double a, double b) { return c != 0 ? a : b; },
       .accepts = A::any},
  };
  return ops;
}

// ------------------------------------------------------------------ reference inputs

constexpr double table_nan = std::numeric_limits<double>::quiet_NaN();
constexpr double table_inf = std::numeric_limits<double>::infinity();

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> dtypes = {
      f32, f64, i32,      i64,        boolean, i8,         u8,       f16, bf16, i16, u16,
      u32, u64, f8e4m3fn, f8e4m3fnuz, f8e5m2,  f8e5m2fnuz, f4e2m1fn, i4,  u4,   i2,  u2};
  return dtypes;
}

/// The dtype of argument k of `op` in its `dtype` run: a ternary op's condition is bool.
inline DType argument_dtype(const ElementwiseOp& op, std::size_t k, DType dtype) {
  return op.op.arity() == 3 && k == 0 ? DType::boolean : dtype;
}

/// The reference inputs of `op` in `dtype`: sets of one value list per argument (floating
/// unary ops get a second set of special values).
inline std::vector<std::vector<std::vector<double>>> reference_inputs(const ElementwiseOp& op,
                                                                      DType dtype) {
  constexpr double nan = table_nan, inf = table_inf;
  const bool floating = is_floating(dtype), boolean = dtype == DType::boolean;
  if (op.op.arity() == 1) {
    if (floating)
      return {{{-3.7, -2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.5, 3.7, 10.0, -20.0,
                0.001}},
              {{nan, inf, -inf, -0.0, 1000.0, -1000.0, 89.0, -89.0, 710.0, -710.0, 30.0, -30.0,
                1e-30, -1e-30}}};
    if (boolean) return {{{0, 1, 1, 0}}};
    if (is_unsigned(dtype)) return {{{7, 3, 1, 0, 1, 2, 5, 100}}};
    return {{{-7, -3, -1, 0, 1, 2, 5, 100}}};
  }
  std::vector<double> a, b;
  if (floating) {
    a = {-7, -3, -1, 0, 1, 2, 5, 6, 2.5, -2.5, nan, inf, -0.0, 7.5, 3, 0};
    b = {2, -3, 4, 1, -1, 3, 2, -4, 0.5, 2, 1, 2, 1, -2, 0, 0};
  } else if (boolean) {
    a = {0, 0, 1, 1};
    b = {0, 1, 0, 1};
  } else if (is_unsigned(dtype)) {  // the signed values' magnitudes: the references use double
    a = {7, 3, 1, 0, 1, 2, 5, 6, 7, 7, 1, 1, 3, 0, 2, 9};
    b = {2, 3, 4, 1, 1, 3, 0, 4, 2, 2, 3, 5, 2, 1, 3, 4};
  } else {
    a = {-7, -3, -1, 0, 1, 2, 5, 6, -7, 7, -1, 1, 3, 0, -2, 9};
    b = {2, -3, 4, 1, -1, 3, 0, -4, -2, -2, -3, -5, 2, -1, 3, 4};
  }
  if (op.op.arity() == 2) return {{a, b}};
  std::vector<double> cond;  // true, false, false, true, ...: every pairing of cond and a, b
  for (std::size_t i = 0; i < a.size(); ++i) cond.push_back((i % 3 == 0) ? 1 : 0);
  return {{cond, a, b}};
}

// ------------------------------------------------------------------ tensors and values

/// A tensor of `dtype` holding `values` (which must be representable in it).
/// Calls fn(T{}) with the C++ element type of dtype.
template <class Fn>
decltype(auto) visit_element_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::i32:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::boolean:
      return fn(bool{});
    case DType::i8:
      return fn(std::int8_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::f16:
      return fn(kiln::float16{});
    case DType::bf16:
      return fn(kiln::bfloat16{});
    case DType::i16:
      return fn(std::int16_t{});
    case DType::u16:
      return fn(std::uint16_t{});
    case DType::u32:
      return fn(std::uint32_t{});
    case DType::u64:
      return fn(std::uint64_t{});
    case DType::f8e4m3fn:
      return fn(kiln::float8_e4m3fn{});
    case DType::f8e4m3fnuz:
      return fn(kiln::float8_e4m3fnuz{});
    case DType::f8e5m2:
      return fn(kiln::float8_e5m2{});
    case DType::f8e5m2fnuz:
      return fn(kiln::float8_e5m2fnuz{});
    case DType::f4e2m1fn:
      return fn(kiln::float4_e2m1fn{});
    case DType::i4:
      return fn(kiln::int4{});
    case DType::u4:
      return fn(kiln::uint4{});
    case DType::i2:
      return fn(kiln::int2{});
    case DType::u2:
      return fn(kiln::uint2{});
  }
  throw std::logic_error("unknown dtype");
}

/// The 16-, 8- and 4-bit floats: they convert from float (explicitly) and to float.
template <class T>
inline constexpr bool is_half_v =
    std::is_same_v<T, kiln::float16> || std::is_same_v<T, kiln::bfloat16> ||
    std::is_same_v<T, kiln::float8_e4m3fn> || std::is_same_v<T, kiln::float8_e4m3fnuz> ||
    std::is_same_v<T, kiln::float8_e5m2> || std::is_same_v<T, kiln::float8_e5m2fnuz> ||
    std::is_same_v<T, kiln::float4_e2m1fn>;

template <class T>
inline constexpr bool is_narrow_int_v =
    std::is_same_v<T, kiln::int4> || std::is_same_v<T, kiln::uint4> ||
    std::is_same_v<T, kiln::int2> || std::is_same_v<T, kiln::uint2>;

/// v stored as T: narrow floats round from float, integers wrap (through int64), bools are
/// v != 0.
template <class T>
T stored_as(double v) {
  if constexpr (is_half_v<T>)
    return T(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else if constexpr (std::is_integral_v<T> || is_narrow_int_v<T>)
    return static_cast<T>(static_cast<std::int64_t>(v));
  else
    return static_cast<T>(v);
}

/// An element as double (narrow floats through float, narrow integers through int).
template <class T>
double as_double(T v) {
  if constexpr (is_half_v<T>)
    return static_cast<double>(static_cast<float>(v));
  else if constexpr (is_narrow_int_v<T>)
    return static_cast<double>(static_cast<int>(v));
  else
    return static_cast<double>(v);
}

/// A tensor of dtype holding `values` as stored in it (see stored_as).
inline Tensor make(const std::vector<double>& values, DType dtype, Shape shape = {}) {
  if (shape.empty() && values.size() != 1) shape = Shape{static_cast<std::int64_t>(values.size())};
  return visit_element_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> typed;
    for (double v : values) typed.push_back(stored_as<T>(v));
    return kiln::tensor(typed, shape);
  });
}

/// The elements of t as double (exact for every dtype but i64 and u64 beyond 2^53).
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  visit_element_type(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (auto v : t.to_vector<T>()) out.push_back(as_double(static_cast<T>(v)));
  });
  return out;
}

/// `reference` (computed in double) as stored in dtype, then back to double.
inline double as_dtype(double reference, DType dtype) {
  if (dtype == DType::f64) return reference;
  if (!is_floating(dtype) && std::isnan(reference)) return reference;
  return visit_element_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    return as_double(stored_as<T>(reference));
  });
}

/// What `op` gives, as stored, on the inputs xs (one per argument, not yet stored) in dtype.
inline double expected(const ElementwiseOp& op, std::vector<double> xs, DType dtype) {
  for (std::size_t k = 0; k < xs.size(); ++k) xs[k] = as_dtype(xs[k], argument_dtype(op, k, dtype));
  const Reference& ref =
      !is_floating(dtype) && !op.int_reference.empty() ? op.int_reference : op.reference;
  return as_dtype(ref(xs), dtype);
}

}  // namespace kiln::test

#pragma once
// Row kernels of the elementwise primitives for one xsimd architecture. Included only by
// elementwise_sse2.cpp, elementwise_avx2.cpp and elementwise_avx512.cpp, each compiled
// with its own -m flags; each defines KILN_ELEMENTWISE_ISA (sse2, avx2, avx512) first and
// exports ElementwiseRows<Arch>::table.
//
// One-definition rule: inline or template code that does not depend on the instruction
// set is compiled once per TU with different -m flags, and the linker keeps one copy for
// everyone, possibly the AVX-512 one. So:
// - xsimd is compiled under a per-TU namespace name (the macro `xsimd` below): its plain
//   inline helpers (rem_pio2, constants, SSE pieces of the AVX kernels) then have distinct
//   symbols in each TU;
// - everything of ours is in an anonymous namespace or evaluated at compile time (the
//   table is a constexpr variable), and nothing calls std algorithms or <cmath> inline
//   functions; scalar math goes through __builtin_* (inlined or a libm call).
//
// Element types: f32 float, f64 double, i32 int32_t, i64 int64_t, bool uint8_t (0 or 1).
// Floating-point rows use xsimd batches (tails go through a zero-padded batch, so every
// element gets the same code). Integer and boolean rows are plain loops the compiler
// vectorizes for the TU's instruction set; integer arithmetic wraps through unsigned
// types, so nothing here is undefined behaviour.

#ifndef KILN_ELEMENTWISE_ISA
#error "define KILN_ELEMENTWISE_ISA before including kernels/elementwise_arch.hpp"
#endif

#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/elementwise_table.hpp"

#define KILN_ISA_NAMESPACE_(isa) kiln_xsimd_##isa
#define KILN_ISA_NAMESPACE(isa) KILN_ISA_NAMESPACE_(isa)
#define xsimd KILN_ISA_NAMESPACE(KILN_ELEMENTWISE_ISA)
#include <xsimd/xsimd.hpp>

#include "kernels/copy_rows_arch.hpp"

namespace kiln::detail {

namespace {

template <class T>
inline constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;
template <class T>
inline constexpr bool is_int_v = std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;
template <class T>
inline constexpr bool is_numeric_v = is_float_v<T> || is_int_v<T>;
template <class T>
inline constexpr bool is_any_v = is_numeric_v<T> || std::is_same_v<T, std::uint8_t>;

// ------------------------------------------------------------------ integer helpers

template <class T>
T wrap_neg(T x) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U{0} - static_cast<U>(x));
}
template <class T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <class T>
T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <class T>
T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

/// Floor division; x / 0 is 0 and MIN / -1 wraps to MIN.
template <class T>
T floor_div(T a, T b) {
  if (b == 0) return 0;
  if (b == -1) return wrap_neg(a);
  T q = a / b;
  const T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) --q;
  return q;
}

/// Remainder with the sign of the divisor; x mod 0 is 0.
template <class T>
T floor_mod(T a, T b) {
  if (b == 0 || b == -1) return 0;
  T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/// base ** exponent by squaring, wrapping on overflow; negative exponents give 0 unless
/// |base| == 1.
template <class T>
T int_pow(T base, T exponent) {
  using U = std::make_unsigned_t<T>;
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) != 0 ? -1 : 1;
    return 0;
  }
  U result = 1;
  U factor = static_cast<U>(base);
  U e = static_cast<U>(exponent);
  while (e != 0) {
    if ((e & 1U) != 0) result = static_cast<U>(result * factor);
    factor = static_cast<U>(factor * factor);
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <class T>
T float_mod(T a, T b) {
  T r;
  if constexpr (std::is_same_v<T, float>)
    r = __builtin_fmodf(a, b);
  else
    r = __builtin_fmod(a, b);
  if (r != 0) {
    if ((r < 0) != (b < 0)) r += b;
    return r;
  }
  if constexpr (std::is_same_v<T, float>)
    return __builtin_copysignf(0.0F, b);
  else
    return __builtin_copysign(0.0, b);
}

/// Converts like kiln::cast: float -> integer truncates, NaN -> 0, saturates; any -> bool
/// is x != 0; integer narrowing wraps.
template <class To, class From>
To convert(From x) {
  if constexpr (std::is_same_v<To, std::uint8_t>) {
    return x != 0 ? 1 : 0;
  } else if constexpr (is_int_v<To> && is_float_v<From>) {
    constexpr To lowest = std::numeric_limits<To>::min();
    constexpr To highest = std::numeric_limits<To>::max();
    const double v = static_cast<double>(x);
    if (!(v == v)) return 0;
    if (v <= static_cast<double>(lowest)) return lowest;
    if (v >= static_cast<double>(highest)) return highest;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(x);
  }
}

// ------------------------------------------------------------------ unary ops
// Each op names the input types it accepts and whether it returns bool. Floating-point
// inputs use simd(batch); the others use scalar(x). Ops without simd() use scalar() for
// every type.

struct NumericUnary {
  template <class T>
  static constexpr bool accepts = is_numeric_v<T>;
  static constexpr bool bool_out = false;
  static constexpr bool has_simd = true;
};
struct FloatUnary {
  template <class T>
  static constexpr bool accepts = is_float_v<T>;
  static constexpr bool bool_out = false;
  static constexpr bool has_simd = true;
  template <class T>
  static T scalar(T x) {
    return x;
  }
};
struct PredicateUnary {
  template <class T>
  static constexpr bool accepts = is_any_v<T>;
  static constexpr bool bool_out = true;
  static constexpr bool has_simd = false;
};

struct NegOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return -x;
  }
  template <class T>
  static T scalar(T x) {
    return wrap_neg(x);
  }
};
struct AbsOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::abs(x);
  }
  template <class T>
  static T scalar(T x) {
    return x < 0 ? wrap_neg(x) : x;
  }
};
struct SignOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    const B one(1), zero(0);
    const B s = xsimd::select(x > zero, one, xsimd::select(x < zero, -one, zero));
    return xsimd::select(xsimd::isnan(x), x, s);
  }
  template <class T>
  static T scalar(T x) {
    return static_cast<T>((x > 0 ? 1 : 0) - (x < 0 ? 1 : 0));
  }
};
struct SquareOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return x * x;
  }
  template <class T>
  static T scalar(T x) {
    return wrap_mul(x, x);
  }
};
struct ReluOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::select(x < B(0), B(0), x);
  }
  template <class T>
  static T scalar(T x) {
    return x < 0 ? 0 : x;
  }
};
struct FloorOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::floor(x);
  }
  template <class T>
  static T scalar(T x) {
    return x;
  }
};
struct CeilOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::ceil(x);
  }
  template <class T>
  static T scalar(T x) {
    return x;
  }
};
struct RoundOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::nearbyint(x);
  }
  template <class T>
  static T scalar(T x) {
    return x;
  }
};

struct ExpOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::exp(x);
  }
};
struct LogOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::log(x);
  }
};
struct Log1pOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::log1p(x);
  }
};
struct SqrtOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::sqrt(x);
  }
};
struct RsqrtOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return B(1) / xsimd::sqrt(x);
  }
};
struct SinOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::sin(x);
  }
};
struct CosOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::cos(x);
  }
};
/// exp(y) for float batches over the whole float range, in about 14 instructions: y is
/// clamped to [-87.34, 88.8] (NaN passes through the clamp: min and max return their second
/// operand for NaN), Cody-Waite reduction y = n ln2 + r with |r| <= ln2/2, a degree-5
/// polynomial for exp(r) fitted by kiln for the least relative error (9.2e-8), and 2^n built
/// in the exponent bits. n = 128 gives the exponent bits of +inf, so the result overflows to
/// +inf from y ~ 88.4 on; below -87.34 it stays at about 2^-126 (callers below need neither
/// subnormal results nor the exact overflow point).
template <class B>
B exp_clamped_f32(const B& y) {
  using I = xsimd::batch<std::int32_t, typename B::arch_type>;
  const B clamped = xsimd::min(B(88.8f), xsimd::max(B(-87.33654f), y));
  const B n = xsimd::nearbyint(clamped * B(1.44269504088896341f));
  B r = xsimd::fma(n, B(-0.693359375f), clamped);  // ln2 split: this part is exact in n * hi
  r = xsimd::fma(n, B(2.12194440e-4f), r);
  B p = B(0.00829026196f);
  p = xsimd::fma(p, r, B(0.0418979004f));
  p = xsimd::fma(p, r, B(0.166676372f));
  p = xsimd::fma(p, r, B(0.499991506f));
  p = xsimd::fma(p, r, B(0.999999702f));
  p = xsimd::fma(p, r, B(1.f));
  const I bits = (xsimd::batch_cast<std::int32_t>(n) + I(127)) << 23;
  return p * xsimd::bitwise_cast<B>(bits);
}

/// Float: tanh(x) = x P(x^2) / Q(x^2) on x clamped to [-9, 9] (tanh(9) rounds to 1 in float),
/// with P and Q of degree 4, a rational fit kiln computed for the least relative error
/// (2e-8 before rounding; within 6 ulp in float, exactly odd, tiny x give x). NaN passes
/// through both clamps. 16 instructions and one division, no exp. Double keeps xsimd::tanh.
struct TanhOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    if constexpr (std::is_same_v<typename B::value_type, float>) {
      const B c = xsimd::max(B(-9.f), xsimd::min(B(9.f), x));
      const B s = c * c;
      B p = B(1.33551774e-08f);
      p = xsimd::fma(p, s, B(2.06094537e-05f));
      p = xsimd::fma(p, s, B(0.00349561055f));
      p = xsimd::fma(p, s, B(0.133810446f));
      p = xsimd::fma(p, s, B(1.f));
      B q = B(7.77676917e-07f);
      q = xsimd::fma(q, s, B(0.00032856717f));
      q = xsimd::fma(q, s, B(0.0258770678f));
      q = xsimd::fma(q, s, B(0.467143595f));
      q = xsimd::fma(q, s, B(1.f));
      // Past |x| ~ 8.8 the fit rounds to 1 or a few ulp above it: clamp to exactly +-1.
      return xsimd::max(B(-1.f), xsimd::min(B(1.f), (c * p) / q));
    } else {
      return xsimd::tanh(x);
    }
  }
};
/// 1 / (1 + exp(-x)) keeps its relative precision everywhere: for x < 0, exp(-x) is large and
/// exact to a few ulp, so there is no cancellation; exp(-x) = +inf gives 0 and a tiny exp(-x)
/// gives 1. NaN propagates.
struct SigmoidOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    if constexpr (std::is_same_v<typename B::value_type, float>)
      return B(1.f) / (B(1.f) + exp_clamped_f32(-x));
    else
      return B(1) / (B(1) + xsimd::exp(-x));
  }
};
/// max(x, 0) + log1p(exp(-|x|)).
struct SoftplusOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::select(x > B(0), x, B(0)) + xsimd::log1p(xsimd::exp(-xsimd::abs(x)));
  }
};

struct LogicalNotOp : PredicateUnary {
  template <class T>
  static std::uint8_t scalar(T x) {
    return x == 0 ? 1 : 0;
  }
};
struct IsNanOp : PredicateUnary {
  template <class T>
  static std::uint8_t scalar(T x) {
    if constexpr (is_float_v<T>)
      return x != x ? 1 : 0;
    else
      return 0;
  }
};
struct IsFiniteOp : PredicateUnary {
  template <class T>
  static std::uint8_t scalar(T x) {
    if constexpr (is_float_v<T>)
      return x - x == 0 ? 1 : 0;
    else
      return 1;
  }
};

// ------------------------------------------------------------------ binary ops

struct NumericBinary {
  template <class T>
  static constexpr bool accepts = is_numeric_v<T>;
  static constexpr bool bool_out = false;
  static constexpr bool has_simd = true;
};
struct ScalarNumericBinary {
  template <class T>
  static constexpr bool accepts = is_numeric_v<T>;
  static constexpr bool bool_out = false;
  static constexpr bool has_simd = false;
};
struct PredicateBinary {
  template <class T>
  static constexpr bool accepts = is_any_v<T>;
  static constexpr bool bool_out = true;
  static constexpr bool has_simd = false;
};

struct AddOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a + b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return wrap_add(a, b);
  }
};
struct SubOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a - b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return wrap_sub(a, b);
  }
};
struct MulOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a * b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return wrap_mul(a, b);
  }
};
struct DivOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a / b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return floor_div(a, b);
  }
};
/// libm's pow for floats: xsimd 8.1's pow gets zero, infinite and NaN operands wrong.
struct PowOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (std::is_same_v<T, float>)
      return __builtin_powf(a, b);
    else if constexpr (std::is_same_v<T, double>)
      return __builtin_pow(a, b);
    else
      return int_pow(a, b);
  }
};
/// NaN in either operand gives NaN (like numpy.maximum).
struct MaximumOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return xsimd::select((a >= b) | xsimd::isnan(a), a, b);
  }
  template <class T>
  static T scalar(T a, T b) {
    return a >= b ? a : b;
  }
};
struct MinimumOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return xsimd::select((a <= b) | xsimd::isnan(a), a, b);
  }
  template <class T>
  static T scalar(T a, T b) {
    return a <= b ? a : b;
  }
};
struct ModOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (is_float_v<T>)
      return float_mod(a, b);
    else
      return floor_mod(a, b);
  }
};

struct EqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a == b ? 1 : 0;
  }
};
struct NotEqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a != b ? 1 : 0;
  }
};
struct LessOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a < b ? 1 : 0;
  }
};
struct LessEqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a <= b ? 1 : 0;
  }
};
struct GreaterOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a > b ? 1 : 0;
  }
};
struct GreaterEqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a >= b ? 1 : 0;
  }
};
struct LogicalAndOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a != 0 && b != 0 ? 1 : 0;
  }
};
struct LogicalOrOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a != 0 || b != 0 ? 1 : 0;
  }
};

// ------------------------------------------------------------------ row loops

template <class Op, class T>
inline constexpr bool uses_simd = Op::has_simd&& is_float_v<T>;

template <class Op, class T>
using OutOf = std::conditional_t<Op::bool_out, std::uint8_t, T>;

template <class Arch, class Op, class T, int InStride>
void unary_loop(const T* x, OutOf<Op, T>* y, std::int64_t n) {
  if constexpr (uses_simd<Op, T>) {
    using B = xsimd::batch<T, Arch>;
    constexpr std::int64_t width = B::size;
    std::int64_t i = 0;
    if constexpr (InStride == 1) {
      for (; i + width <= n; i += width) Op::simd(B::load_unaligned(x + i)).store_unaligned(y + i);
    } else {
      const B v = Op::simd(B(x[0]));
      for (; i + width <= n; i += width) v.store_unaligned(y + i);
    }
    if (i < n) {
      T in[width] = {};
      T out[width];
      for (std::int64_t j = 0; j < n - i; ++j) in[j] = x[InStride * (i + j)];
      Op::simd(B::load_unaligned(in)).store_unaligned(out);
      for (std::int64_t j = 0; j < n - i; ++j) y[i + j] = out[j];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = Op::scalar(x[InStride * i]);
  }
}

template <class Arch, class Op, class T>
void unary_row(const void* in, std::int64_t in_stride, void* out, std::int64_t n) {
  const T* x = static_cast<const T*>(in);
  auto* y = static_cast<OutOf<Op, T>*>(out);
  if (in_stride == 0)
    unary_loop<Arch, Op, T, 0>(x, y, n);
  else
    unary_loop<Arch, Op, T, 1>(x, y, n);
}

template <class Arch, class Op, class T, int AStride, int BStride>
void binary_loop(const T* a, const T* b, OutOf<Op, T>* y, std::int64_t n) {
  if constexpr (uses_simd<Op, T>) {
    using B = xsimd::batch<T, Arch>;
    constexpr std::int64_t width = B::size;
    std::int64_t i = 0;
    const B a0(a[0]), b0(b[0]);
    for (; i + width <= n; i += width) {
      const B va = AStride == 1 ? B::load_unaligned(a + i) : a0;
      const B vb = BStride == 1 ? B::load_unaligned(b + i) : b0;
      Op::simd(va, vb).store_unaligned(y + i);
    }
    if (i < n) {
      T in_a[width] = {};
      T in_b[width] = {};
      T out[width];
      for (std::int64_t j = 0; j < n - i; ++j) {
        in_a[j] = a[AStride * (i + j)];
        in_b[j] = b[BStride * (i + j)];
      }
      Op::simd(B::load_unaligned(in_a), B::load_unaligned(in_b)).store_unaligned(out);
      for (std::int64_t j = 0; j < n - i; ++j) y[i + j] = out[j];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = Op::scalar(a[AStride * i], b[BStride * i]);
  }
}

template <class Arch, class Op, class T>
void binary_row(const void* in_a, std::int64_t a_stride, const void* in_b, std::int64_t b_stride,
                void* out, std::int64_t n) {
  const T* a = static_cast<const T*>(in_a);
  const T* b = static_cast<const T*>(in_b);
  auto* y = static_cast<OutOf<Op, T>*>(out);
  if (a_stride == 1 && b_stride == 1)
    binary_loop<Arch, Op, T, 1, 1>(a, b, y, n);
  else if (a_stride == 1)
    binary_loop<Arch, Op, T, 1, 0>(a, b, y, n);
  else if (b_stride == 1)
    binary_loop<Arch, Op, T, 0, 1>(a, b, y, n);
  else
    binary_loop<Arch, Op, T, 0, 0>(a, b, y, n);
}

template <class Arch, class From, class To>
void cast_row(const void* in, std::int64_t in_stride, void* out, std::int64_t n) {
  const From* x = static_cast<const From*>(in);
  To* y = static_cast<To*>(out);
  if (in_stride == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = convert<To>(x[i]);
  } else {
    const To v = convert<To>(x[0]);
    for (std::int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

template <class Arch, class T>
void where_row(const void* in_cond, std::int64_t cond_stride, const void* in_a,
               std::int64_t a_stride, const void* in_b, std::int64_t b_stride, void* out,
               std::int64_t n) {
  const auto* c = static_cast<const std::uint8_t*>(in_cond);
  const T* a = static_cast<const T*>(in_a);
  const T* b = static_cast<const T*>(in_b);
  T* y = static_cast<T*>(out);
  if (cond_stride == 1 && a_stride == 1 && b_stride == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = c[i] != 0 ? a[i] : b[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      y[i] = c[cond_stride * i] != 0 ? a[a_stride * i] : b[b_stride * i];
  }
}

// ------------------------------------------------------------------ table

/// Fills row[dtype] with Entry<element type of dtype>::value for each dtype.
template <template <class> class Entry>
constexpr void fill_by_dtype(auto* row) {
  row[dtype_index(DType::f32)] = Entry<float>::value;
  row[dtype_index(DType::f64)] = Entry<double>::value;
  row[dtype_index(DType::i32)] = Entry<std::int32_t>::value;
  row[dtype_index(DType::i64)] = Entry<std::int64_t>::value;
  row[dtype_index(DType::boolean)] = Entry<std::uint8_t>::value;
}

template <class Arch, class Op>
struct UnaryEntries {
  template <class T>
  struct Entry {
    static constexpr UnaryRowFn value = [] {
      if constexpr (Op::template accepts<T>)
        return &unary_row<Arch, Op, T>;
      else
        return UnaryRowFn{nullptr};
    }();
  };
};

template <class Arch, class Op>
struct BinaryEntries {
  template <class T>
  struct Entry {
    static constexpr BinaryRowFn value = [] {
      if constexpr (Op::template accepts<T>)
        return &binary_row<Arch, Op, T>;
      else
        return BinaryRowFn{nullptr};
    }();
  };
};

template <class Arch, class From>
struct CastEntries {
  template <class To>
  struct Entry {
    static constexpr UnaryRowFn value = &cast_row<Arch, From, To>;
  };
};

template <class Arch>
struct WhereEntries {
  template <class T>
  struct Entry {
    static constexpr WhereRowFn value = &where_row<Arch, T>;
  };
};

template <class Arch, class Op>
constexpr void set_unary(ElementwiseRowTable& table, Prim p) {
  fill_by_dtype<UnaryEntries<Arch, Op>::template Entry>(table.unary[unary_row_index(p)]);
}
template <class Arch, class Op>
constexpr void set_binary(ElementwiseRowTable& table, Prim p) {
  fill_by_dtype<BinaryEntries<Arch, Op>::template Entry>(table.binary[binary_row_index(p)]);
}

template <class Arch>
constexpr ElementwiseRowTable make_row_table(const char* isa_name) {
  ElementwiseRowTable t;
  t.isa_name = isa_name;
  set_unary<Arch, NegOp>(t, Prim::neg);
  set_unary<Arch, AbsOp>(t, Prim::abs);
  set_unary<Arch, SignOp>(t, Prim::sign);
  set_unary<Arch, ExpOp>(t, Prim::exp);
  set_unary<Arch, LogOp>(t, Prim::log);
  set_unary<Arch, Log1pOp>(t, Prim::log1p);
  set_unary<Arch, SqrtOp>(t, Prim::sqrt);
  set_unary<Arch, RsqrtOp>(t, Prim::rsqrt);
  set_unary<Arch, SquareOp>(t, Prim::square);
  set_unary<Arch, SinOp>(t, Prim::sin);
  set_unary<Arch, CosOp>(t, Prim::cos);
  set_unary<Arch, TanhOp>(t, Prim::tanh);
  set_unary<Arch, SigmoidOp>(t, Prim::sigmoid);
  set_unary<Arch, ReluOp>(t, Prim::relu);
  set_unary<Arch, SoftplusOp>(t, Prim::softplus);
  set_unary<Arch, FloorOp>(t, Prim::floor);
  set_unary<Arch, CeilOp>(t, Prim::ceil);
  set_unary<Arch, RoundOp>(t, Prim::round);
  set_unary<Arch, LogicalNotOp>(t, Prim::logical_not);
  set_unary<Arch, IsNanOp>(t, Prim::isnan);
  set_unary<Arch, IsFiniteOp>(t, Prim::isfinite);

  fill_by_dtype<CastEntries<Arch, float>::template Entry>(t.cast[dtype_index(DType::f32)]);
  fill_by_dtype<CastEntries<Arch, double>::template Entry>(t.cast[dtype_index(DType::f64)]);
  fill_by_dtype<CastEntries<Arch, std::int32_t>::template Entry>(t.cast[dtype_index(DType::i32)]);
  fill_by_dtype<CastEntries<Arch, std::int64_t>::template Entry>(t.cast[dtype_index(DType::i64)]);
  fill_by_dtype<CastEntries<Arch, std::uint8_t>::template Entry>(
      t.cast[dtype_index(DType::boolean)]);

  set_binary<Arch, AddOp>(t, Prim::add);
  set_binary<Arch, SubOp>(t, Prim::sub);
  set_binary<Arch, MulOp>(t, Prim::mul);
  set_binary<Arch, DivOp>(t, Prim::div);
  set_binary<Arch, PowOp>(t, Prim::pow);
  set_binary<Arch, MaximumOp>(t, Prim::maximum);
  set_binary<Arch, MinimumOp>(t, Prim::minimum);
  set_binary<Arch, ModOp>(t, Prim::mod);
  set_binary<Arch, EqualOp>(t, Prim::equal);
  set_binary<Arch, NotEqualOp>(t, Prim::not_equal);
  set_binary<Arch, LessOp>(t, Prim::less);
  set_binary<Arch, LessEqualOp>(t, Prim::less_equal);
  set_binary<Arch, GreaterOp>(t, Prim::greater);
  set_binary<Arch, GreaterEqualOp>(t, Prim::greater_equal);
  set_binary<Arch, LogicalAndOp>(t, Prim::logical_and);
  set_binary<Arch, LogicalOrOp>(t, Prim::logical_or);

  fill_by_dtype<WhereEntries<Arch>::template Entry>(t.where);
  t.copy_rows = &copy_rows<Arch>;
  return t;
}

}  // namespace

/// The row table of instruction set Arch, built at compile time.
template <class Arch>
struct ElementwiseRows {
  static constexpr ElementwiseRowTable table = make_row_table<Arch>(Arch::name());
};

}  // namespace kiln::detail

#pragma once
// The unary elementwise operations (one struct per primitive: scalar() and, for floating-point
// batches, simd()) for one xsimd architecture, and the helpers they and the binary ones
// (kernels/elementwise_ops_binary_arch.hpp) use. Included only by elementwise_arch.hpp, after it
// has set up xsimd under the instruction set's own namespace; the same one-definition rules
// apply (everything here is in an anonymous namespace, scalar math goes through __builtin_*).
//
// Every vector operation here means the same on SSE2, AVX2 and AVX-512 (docs/architecture.md,
// "What each instruction set computes"): where xsimd 8.1 differs between them (negation,
// floor and ceil of small negative values), the ops use the helpers below instead.

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/elementwise_ops_arch.hpp"
#endif

#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>

namespace kiln::detail {

namespace {

/// x * y + z rounded once, at every instruction set and optimization level. xsimd 8.1 has no
/// AVX-512F fma: its generic one is x * y + z, which GCC contracts into one FMA only when it
/// optimizes, so a debug build's AVX-512 kernels rounded twice where a release build's rounded
/// once (the generated zmm loops, which emit vfmadd, then disagreed with the debug build's
/// rows). kiln's own formulas call this instead of xsimd::fma.
template <class B>
B fused_multiply_add(const B& x, const B& y, const B& z) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<typename B::arch_type, xsimd::avx512f>) {
    if constexpr (std::is_same_v<typename B::value_type, float>)
      return B(_mm512_fmadd_ps(x, y, z));
    else if constexpr (std::is_same_v<typename B::value_type, double>)
      return B(_mm512_fmadd_pd(x, y, z));
  }
#endif
  return xsimd::fma(x, y, z);
}

/// x * y - z rounded once, as fused_multiply_add.
template <class B>
B fused_multiply_subtract(const B& x, const B& y, const B& z) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<typename B::arch_type, xsimd::avx512f>) {
    if constexpr (std::is_same_v<typename B::value_type, float>)
      return B(_mm512_fmsub_ps(x, y, z));
    else if constexpr (std::is_same_v<typename B::value_type, double>)
      return B(_mm512_fmsub_pd(x, y, z));
  }
#endif
  return xsimd::fms(x, y, z);
}

template <class T>
inline constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;
template <class T>
inline constexpr bool is_int_v =
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, std::uint64_t>;
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
  if constexpr (std::is_unsigned_v<T>) {
    return a / b;
  } else {
    if (b == -1) return wrap_neg(a);
    T q = a / b;
    const T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) --q;
    return q;
  }
}

/// Remainder with the sign of the divisor; x mod 0 is 0.
template <class T>
T floor_mod(T a, T b) {
  if constexpr (std::is_unsigned_v<T>) {
    return b == 0 ? 0 : a % b;
  } else {
    if (b == 0 || b == -1) return 0;
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

/// base ** exponent by squaring, wrapping on overflow; negative exponents give 0 unless
/// |base| == 1.
template <class T>
T int_pow(T base, T exponent) {
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent & 1) != 0 ? -1 : 1;
      return 0;
    }
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

// ------------------------------------------------------------------ vector helpers
// Operations whose xsimd 8.1 versions differ between instruction sets, written so that they
// mean the same on all three.

/// A batch with only the sign bit set in every lane.
template <class B>
B sign_bits() {
  return B(typename B::value_type(-0.0));
}

/// -x: the sign bit flipped, also for zeros and NaN. xsimd's unary minus is an XOR on SSE2 and
/// AVX but 0 - x on AVX-512, which gives +0 for +0.
template <class B>
B flip_sign(const B& x) {
  return x ^ sign_bits<B>();
}

/// r with x's sign bit set in addition. For an r that IEEE gives the sign of x, also when it is
/// zero (floor, ceil, round, log1p of x), this is exact: it restores the -0 that xsimd's
/// generic floor and ceil, used on SSE2 (trunc through an integer conversion), return as +0
/// for -0 and for ceil of (-1, 0), and that xsimd's log1p returns for -0 on every instruction
/// set; it changes nothing else (NaN stays NaN).
template <class B>
B with_sign_of(const B& r, const B& x) {
  return r | (x & sign_bits<B>());
}

/// x clamped to [lo, hi], NaN passing through. x86 min and max return their second operand
/// when either is NaN (MINPS/MAXPS and their AVX and AVX-512 forms, which xsimd::min and
/// xsimd::max are on all three instruction sets), so x goes second.
template <class B>
B clamp_keeping_nan(const B& x, typename B::value_type lo, typename B::value_type hi) {
  return xsimd::min(B(hi), xsimd::max(B(lo), x));
}

/// The Cody-Waite reduction of exp for float batches: y = n ln2 + r with n = round(y / ln2)
/// and |r| <= ln2/2, ln2 split so that n times its high part is exact. y must be clamped by
/// the caller (|n| at most 150).
template <class B>
struct ExpReduced {
  B n;  // an integer
  B r;
};
template <class B>
ExpReduced<B> exp_reduce_f32(const B& clamped) {
  const B n = xsimd::nearbyint(clamped * B(1.44269504088896341f));
  B r = fused_multiply_add(n, B(-0.693359375f), clamped);
  r = fused_multiply_add(n, B(2.12194440e-4f), r);
  return {n, r};
}

/// 2^n as a float batch, n an integer in [-126, 127], built in the exponent bits.
template <class B>
B exp2_bits_f32(const B& n) {
  using I = xsimd::batch<std::int32_t, typename B::arch_type>;
  return xsimd::bitwise_cast<B>((xsimd::batch_cast<std::int32_t>(n) + I(127)) << 23);
}

/// exp(y) = p * scale for float batches over the whole float range, in about 14 instructions:
/// y is clamped to [-87.34, 88.8] (NaN passes through the clamp: min and max return their second
/// operand for NaN), reduced (exp_reduce_f32), p = exp(r) by a degree-5 polynomial fitted by kiln
/// for the least relative error (9.2e-8), and scale = 2^n built in the exponent bits. n = 128
/// gives the exponent bits of +inf, so the result overflows to +inf from y ~ 88.4 on; below
/// -87.34 it stays at about 2^-126 (callers below need neither subnormal results nor the exact
/// overflow point). The two factors are returned apart so a caller writes its own use of the
/// product (sigmoid's fma), rather than leaving to the compiler whether p * scale + 1 is
/// contracted: a generated fused loop (kernels/fused_loop_writer.hpp) must give these bits.
template <class B>
struct ExpParts {
  B p;
  B scale;
};
template <class B>
ExpParts<B> exp_clamped_f32_parts(const B& y) {
  const auto [n, r] = exp_reduce_f32(clamp_keeping_nan(y, -87.33654f, 88.8f));
  B p = B(0.00829026196f);  // degree 5, relative error 9.2e-8
  p = fused_multiply_add(p, r, B(0.0418979004f));
  p = fused_multiply_add(p, r, B(0.166676372f));
  p = fused_multiply_add(p, r, B(0.499991506f));
  p = fused_multiply_add(p, r, B(0.999999702f));
  p = fused_multiply_add(p, r, B(1.f));
  return {p, exp2_bits_f32(n)};
}

/// f(0), f(1), ..., f(K - 1), written out in that order: the loop over the K batches of each step
/// of the exps below (ExpBelowOverflowOp), unrolled at every optimization level so that the batches
/// stay in registers.
template <int K, class F>
[[gnu::always_inline]] inline void for_each_batch(F&& f) {
  [&]<int... k>(std::integer_sequence<int, k...>) { (f(k), ...); }
  (std::make_integer_sequence<int, K>{});
}

/// exp's Cody-Waite reduction as exp_reduce_f32, with n rounded once: t = x log2(e) + (1.5 2^23
/// + 127) in one fma, where floats are 1 apart, rounds the exact product to the integer n (it is
/// never half-way: log2(e)'s float has the odd factor 66,863, which no float times it can cancel
/// to leave an odd multiple of 1/2 under 2^24), and n = t - (1.5 2^23 + 127) exactly. t's low
/// mantissa bits hold n + 127, 2^n's exponent bits for n in [-126, 127]. x must be clamped by the
/// caller to |x| <= 104 (t stays in its binade). Two operations where nearbyint takes three.
/// K batches at once, each step for all K before the next (ExpBelowOverflowOp).
template <class B, int K>
struct ExpRounded {
  B n[K];  // integers
  B r[K];
  B t[K];  // bits: n + 127 in the low mantissa bits
};
/// The rounding alone: e.t and e.n of exp_reduce_rounded_f32 (which ExpOfNonPositiveForSumOp
/// shares), r left for the caller.
template <class B, int K>
[[gnu::always_inline]] inline void exp_round_f32(const B (&clamped)[K], ExpRounded<B, K>& e) {
  constexpr float offset = 12583039.0f;  // 1.5 * 2^23 + 127
  for_each_batch<K>(
      [&](int k) { e.t[k] = fused_multiply_add(clamped[k], B(1.44269504088896341f), B(offset)); });
  for_each_batch<K>([&](int k) { e.n[k] = e.t[k] - B(offset); });
}
template <class B, int K>
[[gnu::always_inline]] inline ExpRounded<B, K> exp_reduce_rounded_f32(const B (&clamped)[K]) {
  ExpRounded<B, K> e;
  exp_round_f32(clamped, e);
  for_each_batch<K>(
      [&](int k) { e.r[k] = fused_multiply_add(e.n[k], B(-0.693359375f), clamped[k]); });
  for_each_batch<K>([&](int k) { e.r[k] = fused_multiply_add(e.n[k], B(2.12194440e-4f), e.r[k]); });
  return e;
}

/// exp(r) for |r| <= ln2/2 as 1 + r + ..., a degree-6 polynomial fitted by kiln for the least
/// relative error (3.1e-9), in Horner's form: kiln's exps on AVX-512 and AVX2 share it, so they
/// give the same bits wherever the result is a normal float. Into p, K batches at once.
template <class B, int K>
[[gnu::always_inline]] inline void exp_poly_f32(const B (&r)[K], B (&p)[K]) {
  for_each_batch<K>([&](int k) { p[k] = B(1.381461276e-3f); });
  for (const float c :
       {8.368710056e-3f, 4.166838899e-2f, 1.666652113e-1f, 4.999999404e-1f, 1.f, 1.f})
    for_each_batch<K>([&](int k) { p[k] = fused_multiply_add(p[k], r[k], B(c)); });
}

/// y[k] *= 2^n[k], the last step of kiln's exps (and of ExpOfNonPositiveForSumOp's): vscalefps by
/// n on AVX-512, exact until the product leaves the normal range and rounded once there; on AVX2
/// a product by 2^n built from t's bits shifted into the exponent field (0 where n = -127).
template <class B, int K>
[[gnu::always_inline]] inline void exp_scale_f32(const ExpRounded<B, K>& e, B (&y)[K]) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<typename B::arch_type, xsimd::avx512f>) {
    for_each_batch<K>([&](int k) { y[k] = B(_mm512_scalef_ps(y[k], e.n[k])); });
    return;
  }
#endif
  using I = xsimd::batch<std::int32_t, typename B::arch_type>;
  for_each_batch<K>(
      [&](int k) { y[k] = y[k] * xsimd::bitwise_cast<B>(xsimd::bitwise_cast<I>(e.t[k]) << 23); });
}

#if defined(__AVX512F__)
/// exp(x) of AVX-512 float batches, the exp primitive's there: within 0.9 ulp of double,
/// subnormal results included, in 13 instructions where xsimd's exp takes about 25 (softmax's
/// exp pass was the part of its time that did not hide under the memory's). x is clamped to
/// [-104, 89], beyond which exp(x) rounds to 0 or overflows (NaN passes through), reduced
/// (exp_reduce_f32), exp(r) is exp_poly_f32, and vscalefps computes p 2^n, exact until it
/// leaves the normal range and rounded once there. K batches at once, in two halves that a loop
/// may overlap (ExpBelowOverflowOp): begin (the clamp and the reduction) and finish (exp(r) and
/// its scale, into y). kClamp false: the caller knows every x is in [-88, 0] or NaN, where the
/// clamp changes nothing, and it is left out.
template <bool kClamp = true, class B, int K>
[[gnu::always_inline]] inline ExpRounded<B, K> exp_f32_avx512_begin(const B (&x)[K]) {
  B clamped[K];
  for_each_batch<K>(
      [&](int k) { clamped[k] = kClamp ? clamp_keeping_nan(x[k], -104.0f, 89.0f) : x[k]; });
  return exp_reduce_rounded_f32(clamped);
}
template <class B, int K>
[[gnu::always_inline]] inline void exp_f32_avx512_finish(const ExpRounded<B, K>& e, B (&y)[K]) {
  exp_poly_f32(e.r, y);
  exp_scale_f32(e, y);
}
#endif

/// exp(x) of AVX2 (FMA) float batches for x below exp_overflow_from (88.37) or NaN, in 13
/// instructions where xsimd's exp takes about 25: exp_f32_avx512's steps with 2^n from t's bits
/// shifted into the exponent field instead of vscalefps, so the two give the same bits wherever
/// the result is a normal float. x is clamped below at -88 (NaN passes through). Below the
/// normal range it keeps the subnormal results down to x = -87.68 (2^-126.5; n = -126, one
/// rounding of p 2^n, as vscalefps), and gives 0 below, where n = -127 makes the exponent bits
/// 0: a second power of two or a test per vector for the rest cost softmax's unrolled exp pass
/// 10-20% (xsimd's exp gives 0 from -87.34 on). Above 88.37 the lanes are not exp(x) (n = 128
/// and up leave the exponent field): ExpOp replaces them (exp_near_overflow), as it does
/// xsimd's, and softmax's x - max is at most 0. K batches at once, begun and finished as
/// exp_f32_avx512's.
template <bool kClamp = true, class B, int K>
[[gnu::always_inline]] inline ExpRounded<B, K> exp_f32_avx2_begin(const B (&x)[K]) {
  B clamped[K];
  for_each_batch<K>([&](int k) { clamped[k] = kClamp ? xsimd::max(B(-88.0f), x[k]) : x[k]; });
  return exp_reduce_rounded_f32(clamped);
}
template <class B, int K>
[[gnu::always_inline]] inline void exp_f32_avx2_finish(const ExpRounded<B, K>& e, B (&y)[K]) {
  exp_poly_f32(e.r, y);
  exp_scale_f32(e, y);
}

// ------------------------------------------------------------------ unary ops
// Which input types each op accepts and whether it returns bool are columns of
// primitives.def; scalar() returns the output's element type. Floating-point inputs use
// simd(batch); the others use scalar(x). Ops without simd() use scalar() for every type.

struct NumericUnary {
  static constexpr bool has_simd = true;
};
struct FloatUnary {
  static constexpr bool has_simd = true;
  template <class T>
  static T scalar(T x) {
    return x;
  }
};
struct PredicateUnary {
  static constexpr bool has_simd = false;
};
/// Integer-only ops, one element at a time (their rows accept i32 and i64 only).
struct IntegerUnary {
  static constexpr bool has_simd = false;
};

struct NegOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return flip_sign(x);
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
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < 0 ? wrap_neg(x) : x;
  }
};
struct SignOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    const B one(1), minus_one(-1), zero(0);
    const B s = xsimd::select(x > zero, one, xsimd::select(x < zero, minus_one, zero));
    return xsimd::select(xsimd::isnan(x), x, s);
  }
  template <class T>
  static T scalar(T x) {
    if constexpr (std::is_unsigned_v<T>)
      return x > 0 ? 1 : 0;
    else
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
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < 0 ? 0 : x;
  }
};
struct FloorOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return with_sign_of(xsimd::floor(x), x);
  }
  template <class T>
  static T scalar(T x) {
    return x;
  }
};
struct CeilOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return with_sign_of(xsimd::ceil(x), x);
  }
  template <class T>
  static T scalar(T x) {
    return x;
  }
};
struct RoundOp : NumericUnary {
  template <class B>
  static B simd(const B& x) {
    return with_sign_of(xsimd::nearbyint(x), x);
  }
  template <class T>
  static T scalar(T x) {
    return x;
  }
};

/// Whether the exp primitive of batch type B is kiln's exp_f32_avx512, right up to the overflow
/// point, rather than kiln's exp_f32_avx2 or xsimd's exp, which need ExpOp's near-overflow test.
template <class B>
inline constexpr bool kiln_exp_v =
#if defined(__AVX512F__)
    std::is_same_v<typename B::value_type, float>&&
        std::is_same_v<typename B::arch_type, xsimd::avx512f>;
#else
    false;
#endif

/// Whether B's exp is exp_f32_avx2: float batches of AVX2 with FMA (the AVX2 table's).
template <class B>
inline constexpr bool kiln_exp_avx2_v = std::is_same_v<typename B::value_type, float>&&
    std::is_same_v<typename B::arch_type, xsimd::fma3<xsimd::avx2>>;

/// Where xsimd's exp (and exp_f32_avx2) starts to overflow early (exp_near_overflow), a little
/// below x = (n - 1/2) ln2 for the largest n (88.376 for float, 709.436 for double).
template <class T>
inline constexpr T exp_overflow_from = std::is_same_v<T, float> ? T(88.37f) : T(709.43);

/// xsimd's exp builds 2^n in the exponent bits, which cannot hold the largest n (128 for float,
/// 1024 for double): from x = (n - 1/2) ln2 on (88.376, 709.436) it gives +inf where exp(x) is
/// still finite (up to 88.72, 709.78). There exp(x) = exp(x - h) e^h with h = 0.693359375 (ln2's
/// high part: x - h is exact at these magnitudes, both being multiples of x's ulp), within 2 ulp
/// or so. Out of line, so that the loops that call exp pay only a compare and a test per vector.
template <class B>
[[gnu::noinline, gnu::cold]] B exp_near_overflow(const B& x, const B& e) {
  using T = typename B::value_type;
  constexpr T e_to_h = std::is_same_v<T, float> ? T(2.0004244f) : T(2.0004244339097745);
  return xsimd::select(x >= B(exp_overflow_from<T>), xsimd::exp(x - B(T(0.693359375))) * B(e_to_h),
                       e);
}

/// exp where x is below exp_overflow_from, as softmax's x - max <= 0 is: ExpOp's bits there,
/// without its test.
///
/// The exp ops of the softmax rows (this, ExpOp and ExpOfNonPositiveForSumOp) take K batches at
/// once, each step for all K before the next, so that a core has K independent chains of
/// dependent operations to schedule instead of one, and in two halves: begin (the clamp and the
/// reduction, whose state is an ExpRounded) and finish (the polynomial and the scale). A loop
/// that finishes one group while it begins the next keeps the core's scheduler fed with ready
/// operations (kernels/softmax_rows_arch.hpp, softmax_exps). each(x) is begin then finish, in
/// place. kClamp false: every x is in [-88, 0] or NaN (a softmax row whose elements are within
/// 87 of its max), where the clamp changes nothing and is left out.
struct ExpBelowOverflowOp {
  template <bool kClamp = true, int K, class B>
  [[gnu::always_inline]] static ExpRounded<B, K> begin(const B (&x)[K]) {
#if defined(__AVX512F__)
    if constexpr (kiln_exp_v<B>) return exp_f32_avx512_begin<kClamp>(x);
#endif
    if constexpr (kiln_exp_avx2_v<B>) {
      return exp_f32_avx2_begin<kClamp>(x);
    } else {
      ExpRounded<B, K> e;  // xsimd's exp: begin only keeps x
      for_each_batch<K>([&](int k) { e.r[k] = x[k]; });
      return e;
    }
  }
  template <int K, class B>
  [[gnu::always_inline]] static void finish(const ExpRounded<B, K>& e, B (&y)[K]) {
#if defined(__AVX512F__)
    if constexpr (kiln_exp_v<B>) {
      exp_f32_avx512_finish(e, y);
      return;
    }
#endif
    if constexpr (kiln_exp_avx2_v<B>)
      exp_f32_avx2_finish(e, y);
    else
      for_each_batch<K>([&](int k) { y[k] = xsimd::exp(e.r[k]); });
  }
  template <bool kClamp = true, int K, class B>
  [[gnu::always_inline]] static void each(B (&x)[K]) {
    finish(begin<kClamp>(x), x);
  }
  template <class B>
  static B simd(const B& x) {
    B one[1] = {x};
    each(one);
    return one[0];
  }
};

struct ExpOp : FloatUnary {
  /// begin keeps x; finish is simd on each batch (the near-overflow test is per batch). It takes
  /// any x: it clamps.
  template <bool kClamp = true, int K, class B>
  static ExpRounded<B, K> begin(const B (&x)[K]) {
    static_assert(kClamp, "ExpOp takes any x: it clamps");
    ExpRounded<B, K> e;
    for_each_batch<K>([&](int k) { e.r[k] = x[k]; });
    return e;
  }
  template <int K, class B>
  static void finish(const ExpRounded<B, K>& e, B (&y)[K]) {
    for_each_batch<K>([&](int k) { y[k] = simd(e.r[k]); });
  }
  template <class B>
  static B simd(const B& x) {
    const B e = ExpBelowOverflowOp::simd(x);
    if constexpr (!kiln_exp_v<B>) {  // kiln's is right up to the overflow point
      if (xsimd::any(x >= B(exp_overflow_from<typename B::value_type>))) [[unlikely]]
        return exp_near_overflow(x, e);
    }
    return e;
  }
};

/// exp(y) of K float batches for a sum of them that nobody reads one by one (the exp pass of
/// log_softmax and logsumexp rows, where y = x - max <= 0, or NaN): the work of
/// ExpBelowOverflowOp's exp less two fused multiply-adds (a sum of exps from L1 on the Zen 2:
/// 2.1 ns per 8 floats instead of 2.5), and a little less accurate. Begun and finished as
/// ExpBelowOverflowOp's (with f in ExpRounded's r).
/// - y is clamped below as kiln's exps clamp it (-88 at AVX2, -104 at AVX-512; NaN passes
///   through), unless kClamp is false.
/// - t rounds y log2(e) to n as exp_reduce_rounded_f32's, but f = y log2(e) - n is one fused
///   multiply-subtract with log2(e)'s float instead of Cody-Waite's y - n ln2 in two steps. That
///   float is 1.3e-8 off, relatively: f is off by |y| 1.9e-8 and the term by |y| 1.3e-8. A sum of
///   exp(y) weights its terms by exp(y), and exp(y) |y| <= 1/e, so the sum moves by at most
///   5e-9 of its largest term.
/// - 2^f for |f| <= 1/2 by a degree-5 polynomial with constant term 1, fitted by kiln for the
///   least relative error (9.3e-8; 1.5e-7 with Horner's roundings in float), where exp_poly_f32
///   takes degree 6. y = 0 gives 1 exactly.
/// - The result is p 2^n as kiln's exps build it (the exponent bits at AVX2, vscalefps at
///   AVX-512).
/// Other batch types (double, SSE2) take ExpBelowOverflowOp's exp.
struct ExpOfNonPositiveForSumOp {
  template <class B>
  static constexpr bool kilns = kiln_exp_v<B> || kiln_exp_avx2_v<B>;

  template <bool kClamp = true, int K, class B>
  [[gnu::always_inline]] static ExpRounded<B, K> begin(const B (&y)[K]) {
    if constexpr (!kilns<B>) {
      return ExpBelowOverflowOp::begin<kClamp>(y);
    } else {
      const B lowest(kiln_exp_v<B> ? -104.0f : -88.0f);
      B clamped[K];
      ExpRounded<B, K> e;
      for_each_batch<K>([&](int k) { clamped[k] = kClamp ? xsimd::max(lowest, y[k]) : y[k]; });
      exp_round_f32(clamped, e);
      for_each_batch<K>([&](int k) {
        e.r[k] = fused_multiply_subtract(clamped[k], B(1.44269504088896341f), e.n[k]);
      });
      return e;
    }
  }
  template <int K, class B>
  [[gnu::always_inline]] static void finish(const ExpRounded<B, K>& e, B (&y)[K]) {
    if constexpr (!kilns<B>) {
      ExpBelowOverflowOp::finish(e, y);
    } else {
      for_each_batch<K>([&](int k) { y[k] = B(1.3269518968e-3f); });
      for (const float c :
           {9.6712913364e-3f, 5.5507108569e-2f, 2.4022246897e-1f, 6.9314700365e-1f, 1.f})
        for_each_batch<K>([&](int k) { y[k] = fused_multiply_add(y[k], e.r[k], B(c)); });
      exp_scale_f32(e, y);
    }
  }
  template <class B>
  static B simd(const B& y) {
    B one[1] = {y};
    finish(begin(one), one);
    return one[0];
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
    return with_sign_of(xsimd::log1p(x), x);
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
/// The Gauss error function, xsimd's rational approximations (the same arithmetic on every
/// instruction set; erf(-0) = -0, erf(+-inf) = +-1, NaN stays NaN).
struct ErfOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return with_sign_of(xsimd::erf(x), x);
  }
};
/// Floating ops computed by the C library's float and double functions, one element at a
/// time: the same code on every instruction set (none of these is on a hot path of the models
/// kiln runs; a vector version would need its special values checked per instruction set).
struct LibmUnary {
  static constexpr bool has_simd = false;
};
#define KILN_LIBM_UNARY(Op, fn)               \
  struct Op : LibmUnary {                     \
    template <class T>                        \
    static T scalar(T x) {                    \
      if constexpr (std::is_same_v<T, float>) \
        return __builtin_##fn##f(x);          \
      else                                    \
        return __builtin_##fn(x);             \
    }                                         \
  };
KILN_LIBM_UNARY(Expm1Op, expm1)
KILN_LIBM_UNARY(TanOp, tan)
KILN_LIBM_UNARY(AsinOp, asin)
KILN_LIBM_UNARY(AcosOp, acos)
KILN_LIBM_UNARY(AtanOp, atan)
KILN_LIBM_UNARY(SinhOp, sinh)
KILN_LIBM_UNARY(CoshOp, cosh)
KILN_LIBM_UNARY(AsinhOp, asinh)
KILN_LIBM_UNARY(AcoshOp, acosh)
KILN_LIBM_UNARY(AtanhOp, atanh)
#undef KILN_LIBM_UNARY
struct CosOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::cos(x);
  }
};
/// Float: tanh(x) = x P(x^2) / Q(x^2) on x clamped to [-9, 9] (tanh(9) rounds to 1 in float),
/// with P and Q of degree 4, a rational fit kiln computed for the least relative error
/// (2e-8 before rounding; within 6 ulp in float, exactly odd, tiny x give x). NaN passes
/// through both clamps. 16 instructions and one division, no exp. Double keeps xsimd::tanh.
struct TanhOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    if constexpr (std::is_same_v<typename B::value_type, float>) {
      const B c = clamp_keeping_nan(x, -9.f, 9.f);
      const B s = c * c;
      B p = B(1.33551774e-08f);
      p = fused_multiply_add(p, s, B(2.06094537e-05f));
      p = fused_multiply_add(p, s, B(0.00349561055f));
      p = fused_multiply_add(p, s, B(0.133810446f));
      p = fused_multiply_add(p, s, B(1.f));
      B q = B(7.77676917e-07f);
      q = fused_multiply_add(q, s, B(0.00032856717f));
      q = fused_multiply_add(q, s, B(0.0258770678f));
      q = fused_multiply_add(q, s, B(0.467143595f));
      q = fused_multiply_add(q, s, B(1.f));
      // Past |x| ~ 8.8 the fit rounds to 1 or a few ulp above it: clamp to exactly +-1.
      return clamp_keeping_nan((c * p) / q, -1.f, 1.f);
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
    if constexpr (std::is_same_v<typename B::value_type, float>) {
      const ExpParts<B> e = exp_clamped_f32_parts(flip_sign(x));
      return B(1.f) / fused_multiply_add(e.p, e.scale, B(1.f));  // 1 + exp(-x), rounded once
    } else
      return B(1) / (B(1) + xsimd::exp(flip_sign(x)));
  }
};
/// max(x, 0) + log1p(exp(-|x|)).
struct SoftplusOp : FloatUnary {
  template <class B>
  static B simd(const B& x) {
    return xsimd::select(x > B(0), x, B(0)) + xsimd::log1p(xsimd::exp(flip_sign(xsimd::abs(x))));
  }
};

struct LogicalNotOp : PredicateUnary {
  template <class T>
  static std::uint8_t scalar(T x) {
    return x == 0 ? 1 : 0;
  }
};
struct BitwiseNotOp : IntegerUnary {
  template <class T>
  static T scalar(T x) {
    static_assert(std::is_integral_v<T>, "bitwise ops take integers only (primitives.def)");
    return static_cast<T>(~x);
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

}  // namespace

}  // namespace kiln::detail

#pragma once
// Bit-level conversions between float and the 8- and 4-bit floats (kiln::minifloat), in integer
// arithmetic only, so they mean the same on every instruction set.
//
// Internal linkage and nothing but builtins: the per-instruction-set kernel units include this
// (through kernels/convert.hpp), so no inline function with external linkage may be compiled
// with their -m flags (see kernels/elementwise_arch.hpp on the one-definition rule).

#include <cstdint>

#include "core/half_bits.hpp"
#include "kiln/dtype.hpp"

namespace kiln::detail {

namespace {

/// What a format does with values it cannot hold.
enum class MinifloatSpecials : std::uint8_t {
  ieee,    // all-ones exponent: infinity (mantissa 0) or NaN; overflow gives infinity
  fn,      // no infinity; all-ones exponent and mantissa is NaN; overflow gives NaN
  fnuz,    // no infinity and no -0: the pattern of -0 (sign bit only) is the one NaN
  finite,  // no infinity and no NaN: overflow and NaN saturate to the largest value
};

/// The layout of one format: sign bit above `exponent_bits` exponent bits above
/// `mantissa_bits` mantissa bits, exponent bias, and its specials.
struct MinifloatLayout {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  MinifloatSpecials specials;
  std::uint32_t max_finite;  // the bit pattern of the largest finite value
  std::uint32_t nan;         // the bit pattern of a positive NaN (unused for `finite`)
};

constexpr MinifloatLayout minifloat_layout(MinifloatFormat f) {
  switch (f) {
    case MinifloatFormat::e4m3fn:
      return {4, 3, 7, MinifloatSpecials::fn, 0x7e, 0x7f};
    case MinifloatFormat::e4m3fnuz:
      return {4, 3, 8, MinifloatSpecials::fnuz, 0x7f, 0x80};
    case MinifloatFormat::e5m2:
      return {5, 2, 15, MinifloatSpecials::ieee, 0x7b, 0x7e};
    case MinifloatFormat::e5m2fnuz:
      return {5, 2, 16, MinifloatSpecials::fnuz, 0x7f, 0x80};
    case MinifloatFormat::e2m1fn:
      return {2, 1, 1, MinifloatSpecials::finite, 0x7, 0};
  }
  return {};
}

/// float -> format F, rounding to nearest even once. Overflow (and infinity) gives infinity for
/// `ieee`, NaN for `fn` and `fnuz`, the largest value for `finite`; NaN gives NaN (with its sign
/// where the format has one) or, for `finite`, the largest positive value; a result of zero in
/// `fnuz` is +0. These are ml_dtypes' rules.
template <MinifloatFormat F>
std::uint8_t minifloat_bits_from_float(float value) {
  constexpr MinifloatLayout L = minifloat_layout(F);
  constexpr int M = L.mantissa_bits;
  constexpr std::uint32_t sign_bit = 1U << (L.exponent_bits + M);
  const std::uint32_t x = float_bits(value);
  const std::uint32_t sign = (x >> 31) != 0 ? sign_bit : 0U;
  const std::uint32_t magnitude = x & 0x7fffffffU;

  if (magnitude > 0x7f800000U) {  // NaN
    if constexpr (L.specials == MinifloatSpecials::finite)
      return static_cast<std::uint8_t>(L.max_finite);
    if constexpr (L.specials == MinifloatSpecials::fnuz) return static_cast<std::uint8_t>(L.nan);
    return static_cast<std::uint8_t>(sign | L.nan);
  }
  const auto overflow = [&]() -> std::uint8_t {
    if constexpr (L.specials == MinifloatSpecials::ieee)
      return static_cast<std::uint8_t>(sign | (((1U << L.exponent_bits) - 1) << M));
    else if constexpr (L.specials == MinifloatSpecials::fn)
      return static_cast<std::uint8_t>(sign | L.nan);
    else if constexpr (L.specials == MinifloatSpecials::fnuz)
      return static_cast<std::uint8_t>(L.nan);
    else
      return static_cast<std::uint8_t>(sign | L.max_finite);
  };
  if (magnitude == 0x7f800000U) return overflow();  // infinity

  // magnitude = m24 * 2^(e - 23) with m24 holding the implicit bit (float subnormals are far
  // below every format's smallest subnormal and round to zero below).
  const int e = static_cast<int>(magnitude >> 23) - 127;
  const std::uint32_t m24 = (magnitude & 0x7fffffU) | (magnitude >= 0x800000U ? 0x800000U : 0U);
  constexpr int min_normal_exponent = 1 - L.bias;
  if (e > (1 << L.exponent_bits) - L.bias) return overflow();  // far beyond the largest value
  // Units of the result's last mantissa place: 2^(e - M) for normal results, the subnormal
  // unit 2^(min_normal_exponent - M) below.
  const int shift = 23 - M + (e < min_normal_exponent ? min_normal_exponent - e : 0);
  std::uint32_t code;
  if (shift > 24) {
    code = 0;  // below half the smallest subnormal
  } else {
    std::uint32_t units = m24 >> shift;
    const std::uint32_t rest = m24 & ((1U << shift) - 1);
    const std::uint32_t half = 1U << (shift - 1);
    if (rest > half || (rest == half && (units & 1U) != 0)) ++units;
    // A normal result's units hold the implicit bit, so exponent field (e + bias) is
    // ((e + bias - 1) << M) + units; a carry out of the mantissa raises the exponent. A
    // subnormal result's units are its code, which a carry makes the smallest normal.
    code =
        e < min_normal_exponent ? units : (static_cast<std::uint32_t>(e + L.bias - 1) << M) + units;
  }
  if (code > L.max_finite) return overflow();
  if constexpr (L.specials == MinifloatSpecials::fnuz)
    if (code == 0) return 0;  // no -0
  return static_cast<std::uint8_t>(sign | code);
}

/// Format F -> float, exact.
template <MinifloatFormat F>
float float_from_minifloat_bits(std::uint8_t b) {
  constexpr MinifloatLayout L = minifloat_layout(F);
  constexpr int M = L.mantissa_bits;
  constexpr std::uint32_t sign_bit = 1U << (L.exponent_bits + M);
  constexpr std::uint32_t exponent_mask = (1U << L.exponent_bits) - 1;
  const std::uint32_t sign = (b & sign_bit) != 0 ? 0x80000000U : 0U;
  const std::uint32_t exponent = (b >> M) & exponent_mask;
  const std::uint32_t mantissa = b & ((1U << M) - 1);
  if constexpr (L.specials == MinifloatSpecials::fnuz)
    if (b == L.nan) return bits_float(0x7fc00000U);
  if constexpr (L.specials == MinifloatSpecials::fn)
    if ((b & ~sign_bit) == L.nan) return bits_float(sign | 0x7fc00000U);
  if constexpr (L.specials == MinifloatSpecials::ieee)
    if (exponent == exponent_mask) return bits_float(sign | 0x7f800000U | (mantissa << (23 - M)));
  if (exponent == 0) {  // zero or subnormal: mantissa units of 2^(1 - bias - M), exact in float
    const float magnitude = static_cast<float>(mantissa) *
                            bits_float(static_cast<std::uint32_t>(127 + 1 - L.bias - M) << 23);
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 127 - static_cast<std::uint32_t>(L.bias)) << 23) |
                    (mantissa << (23 - M)));
}

}  // namespace

}  // namespace kiln::detail

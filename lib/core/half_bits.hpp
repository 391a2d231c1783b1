#pragma once
// Bit-level conversions between float and the 16-bit floats (f16, bf16), and the
// round-to-odd step that makes double -> 16-bit float and integer -> 16-bit float round once.
//
// Internal linkage and nothing but builtins: the per-instruction-set kernel units include this
// (through kernels/convert.hpp), so no inline function with external linkage may be compiled
// with their -m flags (see kernels/elementwise_arch.hpp on the one-definition rule).

#include <cstdint>

namespace kiln::detail {

namespace {

inline std::uint32_t float_bits(float f) { return __builtin_bit_cast(std::uint32_t, f); }
inline float bits_float(std::uint32_t b) { return __builtin_bit_cast(float, b); }

/// binary32 -> binary16, rounding to nearest even. Overflow gives infinity, NaN stays a (quiet)
/// NaN with the top of its payload, values below the smallest subnormal round to zero.
inline std::uint16_t f16_bits_from_float(float f) {
  std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000U);
  x &= 0x7fffffffU;
  if (x >= 0x7f800000U)  // infinity or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00U |
                                      (x > 0x7f800000U ? 0x200U | ((x >> 13) & 0x3ffU) : 0U));
  if (x >= 0x477ff000U) return static_cast<std::uint16_t>(sign | 0x7c00U);  // >= 65520
  if (x < 0x38800000U) {
    // Below 2^-14, binary16's subnormal range: its unit is 2^-24, the unit of a float in
    // [0.5, 1), so adding 0.5 leaves the rounded (to nearest even) count of units in the low bits.
    const float shifted = bits_float(x) + 0.5F;
    return static_cast<std::uint16_t>(sign | (float_bits(shifted) - 0x3f000000U));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const std::uint32_t odd = (x >> 13) & 1U;
  x += 0xc8000fffU + odd;
  return static_cast<std::uint16_t>(sign | (x >> 13));
}

/// binary16 -> binary32, exact.
inline float float_from_f16_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fU;
  const std::uint32_t mantissa = h & 0x3ffU;
  if (exponent == 0x1fU) return bits_float(sign | 0x7f800000U | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24F;
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 112U) << 23) | (mantissa << 13));
}

/// binary32 -> bfloat16 (its upper half), rounding to nearest even; NaN stays a quiet NaN.
inline std::uint16_t bf16_bits_from_float(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffU) > 0x7f800000U) return static_cast<std::uint16_t>((x >> 16) | 0x40U);
  return static_cast<std::uint16_t>((x + 0x7fffU + ((x >> 16) & 1U)) >> 16);
}

/// bfloat16 -> binary32, exact.
inline float float_from_bf16_bits(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

/// v rounded to a float by round-to-odd: truncated toward zero, with the lowest mantissa bit
/// set when that lost anything. A float has more than two bits beyond the 16-bit floats'
/// mantissas, so rounding this float to f16 or bf16 (to nearest even) gives the same result as
/// rounding v directly: one rounding, not two. Wide is double or long double (which holds every
/// 64-bit integer exactly).
template <class Wide>
float round_to_odd_float(Wide v) {
  float f = static_cast<float>(v);
  if (!(f == f)) return f;  // NaN
  Wide back = static_cast<Wide>(f);
  if (back == v) return f;
  const bool too_far = v < 0 ? back < v : back > v;
  std::uint32_t bits = float_bits(f);
  if (too_far) --bits;  // one step toward zero (f is nonzero; infinity steps to the largest)
  return bits_float(bits | 1U);
}

}  // namespace

}  // namespace kiln::detail

#pragma once
// The one conversion rule of kiln::cast, for every place that converts an element: the cast
// row kernels of each instruction set, pad's fill value, and the creation ops' values.
//
// float -> integer truncates toward zero, NaN gives 0, and values beyond the integer's range
// saturate to its lowest or highest value (for every integer dtype); any -> bool is x != 0
// (NaN gives true); integer narrowing and signed <-> unsigned wrap; anything -> f16 or bf16
// rounds to nearest even, once (f16 overflows to infinity beyond 65504), and so does anything ->
// an 8- or 4-bit float (overflow as kiln::minifloat documents); the 4- and 2-bit integers
// follow the integer rules (floats truncate and saturate, integers wrap); f16, bf16, the
// minifloats and the narrow integers -> anything converts the exact value; everything else is
// static_cast.
//
// The To of convert_element is the dtype's C++ type: `bool` converts as x != 0 and returns its
// storage, a std::uint8_t holding 0 or 1; `std::uint8_t` is the u8 dtype, an integer. A From of
// std::uint8_t may be either (a stored bool is 0 or 1, which converts the same as an integer).
//
// Internal linkage and nothing but compile-time std templates: the per-instruction-set units
// include this too (see kernels/elementwise_arch.hpp on the one-definition rule).

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/half_bits.hpp"
#include "core/minifloat_bits.hpp"
#include "kiln/dtype.hpp"

namespace kiln::detail {

namespace {

/// The element type that stores dtype type T: bool is one byte.
template <class T>
using storage_t = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

template <class T>
inline constexpr bool is_minifloat_v = false;
template <MinifloatFormat F>
inline constexpr bool is_minifloat_v<minifloat<F>> = true;

template <class T>
inline constexpr bool is_narrow_int_v = false;
template <int Bits, bool Signed>
inline constexpr bool is_narrow_int_v<narrow_int<Bits, Signed>> = true;

/// The 8-, 4- and 2-bit dtypes' types: their cast rows are kernels/cast_narrow.cpp's.
template <class T>
inline constexpr bool is_narrow_v = is_minifloat_v<T> || is_narrow_int_v<T>;

/// x as a float that rounds to the same 16-, 8- or 4-bit float as x itself: x for floats, a
/// round-to-odd float for doubles and integers (core/half_bits.hpp).
template <class From>
float float_for_rounding(From x) {
  if constexpr (std::is_same_v<From, float>)
    return x;
  else if constexpr (std::is_same_v<From, double>)
    return round_to_odd_float(x);
  else
    return round_to_odd_float(static_cast<long double>(x));
}

template <class T>
struct FormatOf;
template <MinifloatFormat F>
struct FormatOf<minifloat<F>> {
  static constexpr MinifloatFormat value = F;
};
/// The MinifloatFormat of minifloat type T.
template <class T>
inline constexpr MinifloatFormat format_of = FormatOf<T>::value;

template <MinifloatFormat F>
float from_minifloat(minifloat<F> m) {
  return float_from_minifloat_bits<F>(m.bits);
}

/// The narrow integer To of float x: truncated toward zero, saturated, NaN gives 0.
template <class To, class From>
To narrow_int_from_float(From x) {
  const double v = static_cast<double>(x);
  if (!(v == v)) return To(0);
  if (v <= To::lowest) return To(To::lowest);
  if (v >= To::highest) return To(To::highest);
  return To(static_cast<long long>(v));
}

/// The 16-bit float nearest to x (ties to even), rounded once: doubles and integers go through
/// a round-to-odd float first (core/half_bits.hpp).
template <class Half, class From>
Half to_half(From x) {
  const float f = float_for_rounding(x);
  if constexpr (std::is_same_v<Half, float16>)
    return float16::from_bits(f16_bits_from_float(f));
  else
    return bfloat16::from_bits(bf16_bits_from_float(f));
}

template <class Half>
float from_half(Half h) {
  if constexpr (std::is_same_v<Half, float16>)
    return float_from_f16_bits(h.bits);
  else
    return float_from_bf16_bits(h.bits);
}

template <class To, class From>
storage_t<To> convert_element(From x) {
  if constexpr (std::is_same_v<To, From> && (is_half_v<From> || is_narrow_v<From>)) {
    return x;
  } else if constexpr (is_half_v<From>) {
    return convert_element<To>(from_half(x));
  } else if constexpr (is_minifloat_v<From>) {
    return convert_element<To>(from_minifloat(x));
  } else if constexpr (is_narrow_int_v<From>) {
    return convert_element<To>(static_cast<std::int32_t>(x.value));
  } else if constexpr (is_half_v<To>) {
    return to_half<To>(x);
  } else if constexpr (is_minifloat_v<To>) {
    return To::from_bits(minifloat_bits_from_float<format_of<To>>(float_for_rounding(x)));
  } else if constexpr (is_narrow_int_v<To>) {
    if constexpr (std::is_floating_point_v<From>)
      return narrow_int_from_float<To>(x);
    else
      return To(static_cast<long long>(x));  // the low bits: wraps, as every integer narrowing
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != 0 ? 1 : 0;
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
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

}  // namespace

}  // namespace kiln::detail

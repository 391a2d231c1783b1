#pragma once
// The one conversion rule of kiln::cast, for every place that converts an element: the cast
// row kernels of each instruction set, pad's fill value, and the creation ops' values.
//
// float -> integer truncates toward zero, NaN gives 0, and values beyond the integer's range
// saturate to its lowest or highest value (for every integer dtype); any -> bool is x != 0
// (NaN gives true); integer narrowing and signed <-> unsigned wrap; anything -> f16 or bf16
// rounds to nearest even, once (f16 overflows to infinity beyond 65504), and f16 or bf16 ->
// anything converts the exact float value; everything else is static_cast.
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
#include "kiln/dtype.hpp"

namespace kiln::detail {

namespace {

/// The element type that stores dtype type T: bool is one byte.
template <class T>
using storage_t = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

/// The 16-bit float nearest to x (ties to even), rounded once: doubles and integers go through
/// a round-to-odd float first (core/half_bits.hpp).
template <class Half, class From>
Half to_half(From x) {
  float f;
  if constexpr (std::is_same_v<From, float>)
    f = x;
  else if constexpr (std::is_same_v<From, double>)
    f = round_to_odd_float(x);
  else
    f = round_to_odd_float(static_cast<long double>(x));
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
  if constexpr (is_half_v<From>) {
    if constexpr (std::is_same_v<To, From>)
      return x;
    else
      return convert_element<To>(from_half(x));
  } else if constexpr (is_half_v<To>) {
    return to_half<To>(x);
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

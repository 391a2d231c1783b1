#pragma once
/// @file dtype.hpp
/// Element types.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace kiln {

/// A 16-bit IEEE 754 binary16 float ("half"): 1 sign bit, 5 exponent bits, 10 mantissa bits.
/// The C++ element type of DType::f16. It stores the bits; converting from float (explicit)
/// rounds to nearest even (values beyond 65504 become infinity), converting to float (implicit)
/// is exact.
struct float16 {
  std::uint16_t bits = 0;

  float16() = default;
  /// The nearest float16 to value (ties to even; NaN stays NaN).
  explicit float16(float value);
  /// The exact float value (implicit: widening loses nothing).
  operator float() const;
  /// The float16 whose bit pattern is b.
  static constexpr float16 from_bits(std::uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

/// A 16-bit "brain" float: the upper half of an f32 (1 sign, 8 exponent, 7 mantissa bits), so
/// it has f32's range with less precision. The C++ element type of DType::bf16. Converting
/// from float rounds to nearest even; converting to float is exact.
struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  /// The nearest bfloat16 to value (ties to even; NaN stays NaN).
  explicit bfloat16(float value);
  /// The exact float value (implicit: widening loses nothing).
  operator float() const;
  /// The bfloat16 whose bit pattern is b.
  static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

/// Element type of a tensor. Booleans are stored as one byte holding 0 or 1.
///
/// Ops compute in kiln's compute dtypes: f32, f64, i32, i64, bool and u64. A tensor of any other
/// dtype is computed in its compute_dtype() and the result cast back: f16 and bf16 in f32; i8,
/// u8, i16 and u16 in i32; u32 in i64. Integer results wrap exactly as they would computed in
/// the narrow type, and each f16 or bf16 result is rounded once from the f32 result. Ops that
/// only move or select elements (reshape, transpose, slice, concat, pad, gather, where...) and
/// cast work on every dtype directly. u64 computes natively in the elementwise ops, the
/// reductions, and the scans, sorts and scatters; the other ops (matmul, convolution, linear
/// algebra, recurrent layers) refuse it and ask for a cast. See docs/guide/tensors.md.
enum class DType : std::uint8_t {
  f32,
  f64,
  i32,
  i64,
  boolean,
  i8,
  u8,
  f16,
  bf16,
  i16,
  u16,
  u32,
  u64
};

/// The number of dtypes (DType values are 0 .. num_dtypes - 1).
inline constexpr std::size_t num_dtypes = 13;

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType boolean = DType::boolean;
inline constexpr DType i8 = DType::i8;
inline constexpr DType u8 = DType::u8;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType i16 = DType::i16;
inline constexpr DType u16 = DType::u16;
inline constexpr DType u32 = DType::u32;
inline constexpr DType u64 = DType::u64;

/// Bytes per element.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
    case DType::u64:
      return 8;
    case DType::f32:
    case DType::i32:
    case DType::u32:
      return 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
    case DType::u16:
      return 2;
    case DType::boolean:
    case DType::i8:
    case DType::u8:
      return 1;
  }
  return 0;
}

/// Short name as printed in messages: "f32", "f64", "i32", "i64", "bool", "i8", "u8", "f16",
/// "bf16", "i16", "u16", "u32", "u64".
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i16:
      return "i16";
    case DType::u16:
      return "u16";
    case DType::u32:
      return "u32";
    case DType::u64:
      return "u64";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_unsigned(DType t) {
  return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64;
}
constexpr bool is_integer(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::i8 || t == DType::i16 || is_unsigned(t);
}

/// The dtype ops compute a dtype in: f32 for f16 and bf16, i32 for i8, u8, i16 and u16, i64
/// for u32, and the dtype itself for f32, f64, i32, i64, bool and u64.
constexpr DType compute_dtype(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16:
      return DType::f32;
    case DType::i8:
    case DType::u8:
    case DType::i16:
    case DType::u16:
      return DType::i32;
    case DType::u32:
      return DType::i64;
    default:
      return t;
  }
}

/// The DType that stores C++ type T (float, double, int32_t, int64_t, bool, int8_t, uint8_t,
/// float16, bfloat16, int16_t, uint16_t, uint32_t, uint64_t).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::boolean;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::i32;
  else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, long long>)
    return DType::i64;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return DType::i8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::u8;
  else if constexpr (std::is_same_v<T, float16>)
    return DType::f16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return DType::bf16;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return DType::i16;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return DType::u16;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return DType::u32;
  else if constexpr (std::is_same_v<T, std::uint64_t> || std::is_same_v<T, unsigned long long>)
    return DType::u64;
  else
    static_assert(sizeof(T) == 0, "kiln: unsupported element type");
}

/// True for the C++ types that have a kiln dtype.
template <class T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bool> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, long long> || std::is_same_v<T, std::int8_t> ||
    std::is_same_v<T, std::uint8_t> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16> ||
    std::is_same_v<T, std::int16_t> || std::is_same_v<T, std::uint16_t> ||
    std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::uint64_t> ||
    std::is_same_v<T, unsigned long long>;

}  // namespace kiln

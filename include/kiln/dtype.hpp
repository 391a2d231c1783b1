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

/// The formats of kiln's 8-bit and 4-bit floats, named as ONNX, ml_dtypes and PyTorch name them:
/// e<exponent bits>m<mantissa bits>, "fn" for finite (no infinity; e4m3fn keeps one NaN
/// pattern per sign, e2m1fn none), "uz" for unsigned zero (no -0; the pattern of -0 is the one
/// NaN, and the exponent bias is one more than IEEE's).
enum class MinifloatFormat : std::uint8_t {
  e4m3fn,    ///< 8 bits: largest 448, smallest subnormal 2^-9, NaN, no infinity
  e4m3fnuz,  ///< 8 bits: largest 240, smallest subnormal 2^-10, one NaN (0x80)
  e5m2,      ///< 8 bits, IEEE-style: largest 57344, infinities and NaNs
  e5m2fnuz,  ///< 8 bits: largest 57344, smallest subnormal 2^-17, one NaN (0x80)
  e2m1fn     ///< 4 bits: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; no NaN or infinity
};

/// An 8-bit or 4-bit float of the given format; it stores its bit pattern in one byte (a
/// 4-bit float in the low half). Converting from float (explicit) rounds to nearest even, once.
/// A value beyond the largest finite one becomes infinity (e5m2) or NaN (e4m3fn and the fnuz
/// formats), as in ml_dtypes and PyTorch; e2m1fn, which has neither, saturates to +-6, and
/// takes NaN to +6. Converting to float (implicit) is exact.
template <MinifloatFormat Format>
struct minifloat {
  std::uint8_t bits = 0;

  minifloat() = default;
  /// The nearest value of this format to value (ties to even; see the type's note on overflow).
  explicit minifloat(float value);
  /// The exact float value (implicit: widening loses nothing).
  operator float() const;
  /// The value whose bit pattern is b.
  static constexpr minifloat from_bits(std::uint8_t b) {
    minifloat m;
    m.bits = b;
    return m;
  }
};

using float8_e4m3fn = minifloat<MinifloatFormat::e4m3fn>;      ///< C++ type of DType::f8e4m3fn
using float8_e4m3fnuz = minifloat<MinifloatFormat::e4m3fnuz>;  ///< of DType::f8e4m3fnuz
using float8_e5m2 = minifloat<MinifloatFormat::e5m2>;          ///< of DType::f8e5m2
using float8_e5m2fnuz = minifloat<MinifloatFormat::e5m2fnuz>;  ///< of DType::f8e5m2fnuz
using float4_e2m1fn = minifloat<MinifloatFormat::e2m1fn>;      ///< of DType::f4e2m1fn

extern template struct minifloat<MinifloatFormat::e4m3fn>;
extern template struct minifloat<MinifloatFormat::e4m3fnuz>;
extern template struct minifloat<MinifloatFormat::e5m2>;
extern template struct minifloat<MinifloatFormat::e5m2fnuz>;
extern template struct minifloat<MinifloatFormat::e2m1fn>;

/// A Bits-bit two's-complement (Signed) or unsigned integer, stored one per byte as its value
/// (sign-extended), as ml_dtypes stores int4. Converting from int (explicit) keeps the low Bits
/// bits, as every integer narrowing in kiln wraps; converting to int (implicit) is exact.
template <int Bits, bool Signed>
struct narrow_int {
  static_assert(Bits > 0 && Bits < 8);
  using Storage = std::conditional_t<Signed, std::int8_t, std::uint8_t>;
  /// The smallest and largest values: -8 and 7 for int4, 0 and 15 for uint4.
  static constexpr int lowest = Signed ? -(1 << (Bits - 1)) : 0;
  static constexpr int highest = Signed ? (1 << (Bits - 1)) - 1 : (1 << Bits) - 1;

  Storage value = 0;

  narrow_int() = default;
  /// value's low Bits bits (wrapping, like a static_cast to a narrower integer).
  explicit constexpr narrow_int(long long v) : value(wrap(v)) {}
  /// The exact value.
  constexpr operator int() const { return value; }

  /// v's low Bits bits as this type's value.
  static constexpr Storage wrap(long long v) {
    const auto low = static_cast<unsigned>(static_cast<unsigned long long>(v) & ((1U << Bits) - 1));
    if (Signed && (low >> (Bits - 1)) != 0)
      return static_cast<Storage>(static_cast<int>(low) - (1 << Bits));
    return static_cast<Storage>(low);
  }
};

using int4 = narrow_int<4, true>;    ///< C++ type of DType::i4: -8 .. 7
using uint4 = narrow_int<4, false>;  ///< of DType::u4: 0 .. 15
using int2 = narrow_int<2, true>;    ///< of DType::i2: -2 .. 1
using uint2 = narrow_int<2, false>;  ///< of DType::u2: 0 .. 3

/// Element type of a tensor. Booleans are stored as one byte holding 0 or 1.
///
/// Ops compute in kiln's compute dtypes: f32, f64, i32, i64, bool and u64. A tensor of any other
/// dtype is computed in its compute_dtype() and the result cast back: f16, bf16 and the 8- and
/// 4-bit floats in f32; i8, u8, i16, u16 and the 4- and 2-bit integers in i32; u32 in i64. Integer
/// results wrap exactly as they would computed in the narrow type, and each f16 or bf16 result is
/// rounded once from the f32 result. Ops that only move or select elements (reshape, transpose,
/// slice, concat, pad, gather, where...) and cast work on every dtype directly. u64 computes
/// natively in the elementwise ops, the reductions, and the scans, sorts and scatters; the other
/// ops (matmul, convolution, linear algebra, recurrent layers) refuse it and ask for a cast. See
/// docs/guide/tensors.md.
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
  u64,
  f8e4m3fn,
  f8e4m3fnuz,
  f8e5m2,
  f8e5m2fnuz,
  f4e2m1fn,
  i4,
  u4,
  i2,
  u2
};

/// The number of dtypes (DType values are 0 .. num_dtypes - 1).
inline constexpr std::size_t num_dtypes = 22;

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
inline constexpr DType f8e4m3fn = DType::f8e4m3fn;
inline constexpr DType f8e4m3fnuz = DType::f8e4m3fnuz;
inline constexpr DType f8e5m2 = DType::f8e5m2;
inline constexpr DType f8e5m2fnuz = DType::f8e5m2fnuz;
inline constexpr DType f4e2m1fn = DType::f4e2m1fn;
inline constexpr DType i4 = DType::i4;
inline constexpr DType u4 = DType::u4;
inline constexpr DType i2 = DType::i2;
inline constexpr DType u2 = DType::u2;

/// Bytes per element (the 4-bit and 2-bit dtypes take one byte each in memory).
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
    case DType::f8e4m3fn:
    case DType::f8e4m3fnuz:
    case DType::f8e5m2:
    case DType::f8e5m2fnuz:
    case DType::f4e2m1fn:
    case DType::i4:
    case DType::u4:
    case DType::i2:
    case DType::u2:
      return 1;
  }
  return 0;
}

/// Short name as printed in messages: "f32", "f64", "i32", "i64", "bool", "i8", "u8", "f16",
/// "bf16", "i16", "u16", "u32", "u64", "f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz",
/// "f4e2m1fn", "i4", "u4", "i2", "u2".
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
    case DType::f8e4m3fn:
      return "f8e4m3fn";
    case DType::f8e4m3fnuz:
      return "f8e4m3fnuz";
    case DType::f8e5m2:
      return "f8e5m2";
    case DType::f8e5m2fnuz:
      return "f8e5m2fnuz";
    case DType::f4e2m1fn:
      return "f4e2m1fn";
    case DType::i4:
      return "i4";
    case DType::u4:
      return "u4";
    case DType::i2:
      return "i2";
    case DType::u2:
      return "u2";
  }
  return "?";
}

/// The 8-bit and 4-bit floats (f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f4e2m1fn).
constexpr bool is_minifloat(DType t) {
  return t == DType::f8e4m3fn || t == DType::f8e4m3fnuz || t == DType::f8e5m2 ||
         t == DType::f8e5m2fnuz || t == DType::f4e2m1fn;
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 ||
         is_minifloat(t);
}
constexpr bool is_unsigned(DType t) {
  return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64 ||
         t == DType::u4 || t == DType::u2;
}
constexpr bool is_integer(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::i8 || t == DType::i16 ||
         t == DType::i4 || t == DType::i2 || is_unsigned(t);
}

/// The dtype ops compute a dtype in: f32 for f16, bf16 and the 8- and 4-bit floats, i32 for i8,
/// u8, i16, u16 and the 4- and 2-bit integers, i64 for u32, and the dtype itself for f32, f64,
/// i32, i64, bool and u64.
constexpr DType compute_dtype(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16:
    case DType::f8e4m3fn:
    case DType::f8e4m3fnuz:
    case DType::f8e5m2:
    case DType::f8e5m2fnuz:
    case DType::f4e2m1fn:
      return DType::f32;
    case DType::i8:
    case DType::u8:
    case DType::i16:
    case DType::u16:
    case DType::i4:
    case DType::u4:
    case DType::i2:
    case DType::u2:
      return DType::i32;
    case DType::u32:
      return DType::i64;
    default:
      return t;
  }
}

/// The DType that stores C++ type T (float, double, int32_t, int64_t, bool, int8_t, uint8_t,
/// float16, bfloat16, int16_t, uint16_t, uint32_t, uint64_t, float8_e4m3fn, float8_e4m3fnuz,
/// float8_e5m2, float8_e5m2fnuz, float4_e2m1fn, int4, uint4, int2, uint2).
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
  else if constexpr (std::is_same_v<T, float8_e4m3fn>)
    return DType::f8e4m3fn;
  else if constexpr (std::is_same_v<T, float8_e4m3fnuz>)
    return DType::f8e4m3fnuz;
  else if constexpr (std::is_same_v<T, float8_e5m2>)
    return DType::f8e5m2;
  else if constexpr (std::is_same_v<T, float8_e5m2fnuz>)
    return DType::f8e5m2fnuz;
  else if constexpr (std::is_same_v<T, float4_e2m1fn>)
    return DType::f4e2m1fn;
  else if constexpr (std::is_same_v<T, int4>)
    return DType::i4;
  else if constexpr (std::is_same_v<T, uint4>)
    return DType::u4;
  else if constexpr (std::is_same_v<T, int2>)
    return DType::i2;
  else if constexpr (std::is_same_v<T, uint2>)
    return DType::u2;
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
    std::is_same_v<T, unsigned long long> || std::is_same_v<T, float8_e4m3fn> ||
    std::is_same_v<T, float8_e4m3fnuz> || std::is_same_v<T, float8_e5m2> ||
    std::is_same_v<T, float8_e5m2fnuz> || std::is_same_v<T, float4_e2m1fn> ||
    std::is_same_v<T, int4> || std::is_same_v<T, uint4> || std::is_same_v<T, int2> ||
    std::is_same_v<T, uint2>;

}  // namespace kiln

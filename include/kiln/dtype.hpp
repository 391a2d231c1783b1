#pragma once
/// @file dtype.hpp
/// Element types.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace kiln {

/// Element type of a tensor. Booleans are stored as one byte holding 0 or 1.
///
/// i8 and u8 are storage dtypes: they hold quantized values (kiln::quantize) and byte data, and
/// they load from and save to files, cast to and from every dtype, and go through the ops that
/// only move or select elements (reshape, transpose, slice, concat, pad, gather, broadcast_to,
/// where). Ops that compute refuse them with an error that says to cast first (see
/// is_storage_only).
enum class DType : std::uint8_t { f32, f64, i32, i64, boolean, i8, u8 };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType boolean = DType::boolean;
inline constexpr DType i8 = DType::i8;
inline constexpr DType u8 = DType::u8;

/// Bytes per element.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::boolean:
    case DType::i8:
    case DType::u8:
      return 1;
  }
  return 0;
}

/// Short name as printed in messages: "f32", "f64", "i32", "i64", "bool", "i8", "u8".
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
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
constexpr bool is_integer(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::i8 || t == DType::u8;
}
/// The dtypes that hold data but are not computed with (i8, u8): ops other than cast and the
/// element-moving ones refuse them ("cast first").
constexpr bool is_storage_only(DType t) { return t == DType::i8 || t == DType::u8; }

/// The DType that stores C++ type T (float, double, int32_t, int64_t, bool, int8_t, uint8_t).
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
  else
    static_assert(sizeof(T) == 0, "kiln: unsupported element type");
}

/// True for the C++ types that have a kiln dtype.
template <class T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bool> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, long long> || std::is_same_v<T, std::int8_t> ||
    std::is_same_v<T, std::uint8_t>;

}  // namespace kiln

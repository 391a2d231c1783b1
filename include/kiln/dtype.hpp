#pragma once
/// @file dtype.hpp
/// Element types.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace kiln {

/// Element type of a tensor. Booleans are stored as one byte holding 0 or 1.
enum class DType : std::uint8_t { f32, f64, i32, i64, boolean };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType boolean = DType::boolean;

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
      return 1;
  }
  return 0;
}

/// Short name as printed in messages: "f32", "f64", "i32", "i64", "bool".
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
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
constexpr bool is_integer(DType t) { return t == DType::i32 || t == DType::i64; }

/// The DType that stores C++ type T (float, double, int32_t, int64_t, bool).
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
  else
    static_assert(sizeof(T) == 0, "kiln: unsupported element type");
}

/// True for the C++ types that have a kiln dtype.
template <class T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bool> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, long long>;

}  // namespace kiln

#pragma once
// Calling a generic lambda with the C++ type of a runtime dtype.

#include <cstdint>
#include <type_traits>

#include "kiln/dtype.hpp"

namespace kiln::detail {

/// Calls fn(T{}) where T is dtype's C++ type (float, double, int32_t, int64_t, bool, int8_t,
/// uint8_t).
template <class Fn>
void visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      break;
    case DType::f64:
      fn(double{});
      break;
    case DType::i32:
      fn(std::int32_t{});
      break;
    case DType::i64:
      fn(std::int64_t{});
      break;
    case DType::boolean:
      fn(bool{});
      break;
    case DType::i8:
      fn(std::int8_t{});
      break;
    case DType::u8:
      fn(std::uint8_t{});
      break;
  }
}

/// Like visit_dtype, but with the storage type: booleans are stored as std::uint8_t.
template <class Fn>
void visit_storage_type(DType dtype, Fn&& fn) {
  visit_dtype(dtype, [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), bool>)
      fn(std::uint8_t{});
    else
      fn(tag);
  });
}

}  // namespace kiln::detail

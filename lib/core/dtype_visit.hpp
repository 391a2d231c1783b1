#pragma once
// Calling a generic lambda with the C++ type of a runtime dtype.

#include <cstdint>
#include <type_traits>

#include "kiln/dtype.hpp"

namespace kiln::detail {
/// Throws: a kernel that computes was given a dtype ops compute in a wider one.
[[noreturn]] void fail_not_computed(DType dtype, const char* op);
}  // namespace kiln::detail

namespace kiln::detail {

/// Calls fn(T{}) where T is dtype's C++ type (float, double, int32_t, int64_t, bool, int8_t,
/// uint8_t, float16, bfloat16, int16_t, uint16_t, uint32_t, uint64_t, the minifloats and the
/// narrow_ints).
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
    case DType::f16:
      fn(float16{});
      break;
    case DType::bf16:
      fn(bfloat16{});
      break;
    case DType::i16:
      fn(std::int16_t{});
      break;
    case DType::u16:
      fn(std::uint16_t{});
      break;
    case DType::u32:
      fn(std::uint32_t{});
      break;
    case DType::u64:
      fn(std::uint64_t{});
      break;
    case DType::f8e4m3fn:
      fn(float8_e4m3fn{});
      break;
    case DType::f8e4m3fnuz:
      fn(float8_e4m3fnuz{});
      break;
    case DType::f8e5m2:
      fn(float8_e5m2{});
      break;
    case DType::f8e5m2fnuz:
      fn(float8_e5m2fnuz{});
      break;
    case DType::f4e2m1fn:
      fn(float4_e2m1fn{});
      break;
    case DType::i4:
      fn(int4{});
      break;
    case DType::u4:
      fn(uint4{});
      break;
    case DType::i2:
      fn(int2{});
      break;
    case DType::u2:
      fn(uint2{});
      break;
  }
}

/// Whether kernels compute on element type T (kiln::compute_dtype's results but bool).
template <class T>
inline constexpr bool is_compute_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>;

/// Calls fn(T{}) for the dtypes kernels compute on (kiln::compute_dtype's results): float,
/// double, int32_t, int64_t, uint64_t, and std::uint8_t for bool (its storage). Ops reach
/// kernels with other dtypes only when they move elements; a compute kernel given one fails.
template <class Fn>
void visit_compute_type(DType dtype, const char* op, Fn&& fn) {
  if (compute_dtype(dtype) != dtype) fail_not_computed(dtype, op);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>)
      fn(std::uint8_t{});
    else if constexpr (is_compute_type_v<T>)
      fn(tag);
  });
}

}  // namespace kiln::detail

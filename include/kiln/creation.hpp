#pragma once
/// @file creation.hpp
/// Functions that make new tensors from data or a fill rule.

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
Tensor tensor_from_bytes(const void* data, std::int64_t count, DType dtype, const Shape& shape,
                         bool shape_given);
}

/// A tensor holding a copy of `data` with the given shape (1-D of data.size() when the
/// shape is omitted). The dtype follows the element type: float → f32, double → f64,
/// int32_t → i32, int64_t → i64, bool → boolean. Throws if the sizes disagree.
template <class T>
Tensor tensor(std::span<const T> data, const Shape& shape) {
  static_assert(is_element_type_v<T>, "kiln::tensor: unsupported element type");
  return detail::tensor_from_bytes(data.data(), static_cast<std::int64_t>(data.size()),
                                   dtype_of<T>(), shape, true);
}
template <class T>
Tensor tensor(std::span<const T> data) {
  return detail::tensor_from_bytes(data.data(), static_cast<std::int64_t>(data.size()),
                                   dtype_of<T>(), Shape{}, false);
}
template <class T>
Tensor tensor(const std::vector<T>& data, const Shape& shape) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<std::uint8_t> bytes(data.begin(), data.end());
    return detail::tensor_from_bytes(bytes.data(), static_cast<std::int64_t>(bytes.size()),
                                     DType::boolean, shape, true);
  } else {
    return tensor(std::span<const T>(data), shape);
  }
}
template <class T>
Tensor tensor(const std::vector<T>& data) {
  return tensor(data, Shape{static_cast<std::int64_t>(data.size())});
}
template <class T>
Tensor tensor(std::initializer_list<T> data, const Shape& shape) {
  return tensor(std::vector<T>(data), shape);
}
template <class T>
Tensor tensor(std::initializer_list<T> data) {
  return tensor(std::vector<T>(data));
}

/// A rank-0 tensor. The dtype follows the C++ type (see tensor()).
template <class T>
Tensor scalar(T value) {
  static_assert(is_element_type_v<T>, "kiln::scalar: unsupported element type");
  if constexpr (std::is_same_v<T, bool>) {
    std::uint8_t b = value ? 1 : 0;
    return detail::tensor_from_bytes(&b, 1, DType::boolean, Shape{}, true);
  } else {
    return detail::tensor_from_bytes(&value, 1, dtype_of<T>(), Shape{}, true);
  }
}
/// A rank-0 tensor of the given dtype holding `value` converted to it.
Tensor scalar(double value, DType dtype);

Tensor zeros(const Shape& shape, DType dtype = f32);
Tensor ones(const Shape& shape, DType dtype = f32);
/// Every element equal to `value` converted to dtype.
Tensor full(const Shape& shape, double value, DType dtype = f32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

/// [start, stop) in steps of `step` (step != 0), like numpy.arange.
Tensor arange(double start, double stop, double step = 1.0, DType dtype = f32);
/// [0, stop) in steps of 1.
Tensor arange(std::int64_t stop, DType dtype = i64);
/// `num` evenly spaced values from start to stop inclusive.
Tensor linspace(double start, double stop, std::int64_t num, DType dtype = f32);
/// n x m matrix with ones on the diagonal (m = n when m < 0).
Tensor eye(std::int64_t n, std::int64_t m = -1, DType dtype = f32);

}  // namespace kiln

#pragma once
/// @file xtensor.hpp
/// Opt-in interop with xtensor: copy an xtensor expression into a kiln::Tensor, or read a
/// tensor's elements through an xtensor adaptor without copying.
///
/// This is the only public kiln header that includes xtensor; include it only where you
/// need the interop, e.g.
///
///     xt::xarray<double> a = {{1., 2.}, {3., 4.}};
///     kiln::Tensor t = kiln::from_xtensor(a + 1.0);       // f64, shape [2,2]
///     auto view = kiln::as_xtensor<double>(t);            // reads t's buffer in place
///     double total = xt::sum(view)();

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xoperation.hpp>

#include "kiln/creation.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

/// A new tensor holding a copy of the values of the xtensor expression `expression`
/// (containers, views and lazy expressions alike; lazy ones are evaluated first). The
/// tensor's shape is the expression's shape and its dtype follows the element type
/// (float → f32, double → f64, int32_t → i32, int64_t → i64, bool → boolean); other
/// element types do not compile. Throws kiln::Error if the rank exceeds Shape::max_rank.
template <class E>
Tensor from_xtensor(const xt::xexpression<E>& expression) {
  using Element = std::decay_t<typename E::value_type>;
  static_assert(is_element_type_v<Element>,
                "kiln::from_xtensor: the element type has no kiln dtype");
  // Booleans are stored as one byte holding 0 or 1.
  using Stored = std::conditional_t<std::is_same_v<Element, bool>, std::uint8_t, Element>;
  const xt::xarray<Stored, xt::layout_type::row_major> values =
      xt::cast<Stored>(expression.derived_cast());
  if (values.dimension() > Shape::max_rank)
    throw Error(fmt::format("[from_xtensor] rank {} exceeds the maximum rank {}",
                            values.dimension(), Shape::max_rank));
  std::vector<std::int64_t> dims(values.shape().begin(), values.shape().end());
  return detail::tensor_from_bytes(values.data(), static_cast<std::int64_t>(values.size()),
                                   dtype_of<Element>(), Shape(dims), true);
}

/// A read-only xtensor adaptor (an xt::xarray_adaptor over `const T*`) that reads the
/// elements of `tensor` in place, without copying, using the tensor's shape and strides;
/// non-contiguous views (transposed, sliced, broadcast) work too. T must be the C++ type
/// of the tensor's dtype (bool for boolean), else kiln::Error; an undefined tensor is an
/// error as well.
///
/// The adaptor does not own or keep alive the buffer: it must not outlive `tensor` (or
/// another tensor sharing its buffer). Copy it into an xt::xarray to keep the values.
template <class T>
auto as_xtensor(const Tensor& tensor) {
  static_assert(is_element_type_v<T>, "kiln::as_xtensor: the element type has no kiln dtype");
  if (!tensor.defined()) throw Error("[as_xtensor] argument 0 is an undefined tensor");
  if (tensor.dtype() != dtype_of<T>())
    throw Error(fmt::format("[as_xtensor] tensor has dtype {}, but {} was requested",
                            dtype_name(tensor.dtype()), dtype_name(dtype_of<T>())));
  const Shape& shape = tensor.shape();
  const Shape& strides = tensor.strides();
  std::vector<std::size_t> adaptor_shape(shape.begin(), shape.end());
  std::vector<std::ptrdiff_t> adaptor_strides(strides.begin(), strides.end());
  const T* first = static_cast<const T*>(tensor.data());
  return xt::adapt(first, static_cast<std::size_t>(tensor.size()), xt::no_ownership(),
                   std::move(adaptor_shape), std::move(adaptor_strides));
}

}  // namespace kiln

#pragma once
/// @file format.hpp
/// Printing tensors with fmt: `fmt::print("{}\n", t)` prints like NumPy, e.g.
/// `tensor([[1., 2.],
///          [3., 4.]], dtype=f32, shape=[2,2])`; large tensors elide their middle.
/// fmt::formatter specializations exist for kiln::Tensor, kiln::Shape and kiln::DType.

#include <fmt/format.h>

#include <string>

#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln {
/// The NumPy-like text of t (what the fmt formatter prints).
std::string to_string(const Tensor& t);
}  // namespace kiln

// The specializations are hidden from Doxygen (it cannot place a specialization of a class of
// another library); the file comment lists them.
/// @cond KILN_FMT_FORMATTERS
template <>
struct fmt::formatter<kiln::Tensor> : fmt::formatter<std::string> {
  template <class Ctx>
  auto format(const kiln::Tensor& t, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(kiln::to_string(t), ctx);
  }
};

template <>
struct fmt::formatter<kiln::Shape> : fmt::formatter<std::string> {
  template <class Ctx>
  auto format(const kiln::Shape& s, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};

template <>
struct fmt::formatter<kiln::DType> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(kiln::DType d, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::dtype_name(d), ctx);
  }
};
/// @endcond

#pragma once
/// @file tensor.hpp
/// kiln::Tensor, the immutable n-dimensional array handle.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"

namespace kiln {

namespace detail {
struct TensorImpl;
}

/// A cheap-to-copy handle to an immutable n-dimensional array. Copies share the same
/// value. Ops never modify their inputs; they return new tensors, which may share the
/// input's buffer (views such as reshape of a contiguous tensor, transpose, slice).
///
/// A default-constructed Tensor is *undefined*: it has no value, and passing it to an op
/// throws kiln::Error.
class Tensor {
 public:
  Tensor() = default;

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  const Shape& shape() const;
  std::int64_t ndim() const;
  /// Number of elements.
  std::int64_t size() const;
  /// Dimension i; negative i counts from the end.
  std::int64_t dim(std::int64_t i) const;
  /// Element strides of the underlying buffer (a view may be non-contiguous).
  const Shape& strides() const;
  bool is_contiguous() const;
  /// Whether this is an indexed-slices value (a row-sparse gradient; see kiln/sparse.hpp).
  /// Its dtype() and shape() are those of the dense tensor it stands for.
  bool is_indexed_slices() const;
  /// This tensor if it is contiguous, else a contiguous copy (an indexed-slices value: its
  /// dense tensor).
  Tensor contiguous() const;

  /// Pointer to the first element. The tensor must be contiguous if you read it as a
  /// flat array; the pointer stays valid while any tensor sharing the buffer lives.
  const void* data() const;

  /// The elements in row-major order. T must be the C++ type of dtype(), else kiln::Error.
  template <class T>
  std::vector<T> to_vector() const {
    check_element_type(dtype_of<T>(), "to_vector");
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size()));
      copy_to(bytes.data());
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(static_cast<std::size_t>(size()));
      copy_to(out.data());
      return out;
    }
  }

  /// The single element of a one-element tensor (any rank), else kiln::Error.
  template <class T>
  T item() const {
    check_element_type(dtype_of<T>(), "item");
    check_single_element();
    if constexpr (std::is_same_v<T, bool>) {
      std::uint8_t b = 0;
      copy_to(&b);
      return b != 0;
    } else {
      T v{};
      copy_to(&v);
      return v;
    }
  }

  /// The element at `index`, one index per dim (negative ones count from the end), read in
  /// place: `x.at<float>({i, j})`. T must be the C++ type of dtype(); the wrong number of
  /// indices, an index out of range or a symbolic tensor (inside a trace) is a kiln::Error.
  template <class T>
  T at(std::initializer_list<std::int64_t> index) const {
    check_element_type(dtype_of<T>(), "at");
    if constexpr (std::is_same_v<T, bool>) {
      std::uint8_t b = 0;
      copy_element_to(index.begin(), index.size(), &b);
      return b != 0;
    } else {
      T v{};
      copy_element_to(index.begin(), index.size(), &v);
      return v;
    }
  }

  /// Internal: the shared implementation (used by kiln's own code).
  const std::shared_ptr<detail::TensorImpl>& impl() const { return impl_; }
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

 private:
  void check_element_type(DType requested, const char* op) const;
  void check_single_element() const;
  /// Copies the elements, row-major, into dst (which holds size() elements).
  void copy_to(void* dst) const;
  /// Copies the element at index[0, count) into dst (one element of dtype()).
  void copy_element_to(const std::int64_t* index, std::size_t count, void* dst) const;

  std::shared_ptr<detail::TensorImpl> impl_;
};

}  // namespace kiln

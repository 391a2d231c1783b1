#pragma once
// The value behind a kiln::Tensor handle, and helpers kiln's own code uses on it.

#include <cstdint>
#include <memory>

#include "core/storage.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

/// Contiguous row-major strides (in elements) of `shape`.
Shape contiguous_strides(const Shape& shape);
/// Whether (shape, strides) is row-major contiguous; size-1 dims may have any stride.
inline bool is_contiguous_layout(const Shape& shape, const Shape& strides) {
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return shape.numel() == 0;
    expected *= shape[i];
  }
  return true;
}

/// The parts of an indexed-slices value: a row-sparse tensor of the TensorImpl's (dense) dtype
/// and shape whose rows indices[i] hold values[i] (rows named twice add up) and whose other rows
/// are zero. See kiln/sparse.hpp.
struct RowSlices {
  Tensor indices;       // i32 or i64 [m]
  Tensor values;        // [m, dense dims after the first...]
  bool unique = false;  // no row is named twice (padding aside)
  bool padded = false;  // entries -1 are unused (their values are zero)
};

struct TensorImpl {
  DType dtype;
  Shape shape;
  Shape strides;                            // in elements
  std::int64_t offset = 0;                  // in elements, from storage->data()
  std::shared_ptr<Storage> storage;         // null for a symbolic tensor
  std::uint64_t trace_id = 0;               // symbolic: the trace it belongs to (0: concrete)
  std::int32_t node = -1;                   // symbolic: its node in that trace's graph
  std::shared_ptr<const RowSlices> slices;  // set: an indexed-slices value (storage is null)

  TensorImpl(DType dt, const Shape& sh, const Shape& st, std::int64_t off,
             std::shared_ptr<Storage> s)
      : dtype(dt), shape(sh), strides(st), offset(off), storage(std::move(s)) {
    count_tensor_created();
  }
  ~TensorImpl() { count_tensor_destroyed(); }
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  char* data() const {
    return static_cast<char*>(storage->data()) +
           offset * static_cast<std::int64_t>(dtype_size(dtype));
  }
  bool is_contiguous() const;
  bool is_symbolic() const { return trace_id != 0; }
  bool is_slices() const { return slices != nullptr; }
};

/// Throws "[op] ... symbolic ..." when t is a symbolic tensor of a function being traced.
void check_concrete(const TensorImpl& t, const char* op);

/// A new, uninitialized contiguous tensor for op `op`, which errors name (a shape with too
/// many elements, or out of memory).
Tensor empty(const Shape& shape, DType dtype, const char* op = "empty");
/// empty() for a layout checked in advance (a compiled plan's output buffers): `strides` are
/// shape's contiguous strides and `bytes` its size, so nothing is recomputed or validated.
Tensor empty_checked(const Shape& shape, const Shape& strides, DType dtype, std::size_t bytes);
/// A view of `base`'s buffer with the given shape, strides and offset (in elements).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset);
/// A view of `base`'s buffer as elements of `dtype` (a compiled plan's arena, a byte tensor,
/// seen as one of its values): shape, strides and offset in elements of dtype.
Tensor make_view(const Tensor& base, DType dtype, const Shape& shape, const Shape& strides,
                 std::int64_t offset);

/// Typed pointer to the first element of an (eager) tensor.
template <class T>
T* data_ptr(const Tensor& t) {
  return reinterpret_cast<T*>(t.impl()->data());
}

}  // namespace kiln::detail

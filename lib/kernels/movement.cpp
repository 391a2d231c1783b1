// Kernels of the data-movement primitives. Eager dispatch turns reshape, transpose,
// broadcast_to and slice into views when it can; these kernels are the copying versions a
// compiled plan (or a non-viewable reshape) runs. Attrs contracts: lib/ops/shape_ops.cpp.
//
// Every kernel writes the contiguous `out`. Inputs are read through their strides, except
// gather's x, which must be contiguous (as KernelCall promises).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "kernels/convert.hpp"
#include "kernels/kernel.hpp"
#include "kernels/streaming.hpp"
#include "kernels/strided_loop.hpp"

namespace kiln::detail {

namespace {

Shape row_major_strides(const Shape& shape) {
  Shape strides;
  strides.resize(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

/// p moved by `elements` elements of dtype.
void* advance(void* p, std::int64_t elements, DType dtype) {
  return static_cast<char*>(p) + elements * static_cast<std::int64_t>(dtype_size(dtype));
}

void copy_reshape(const ArrayRef& in, const ArrayRef& out) {
  copy_strided(in, ArrayRef{out.data, out.dtype, in.shape, row_major_strides(in.shape)});
}

void copy_transpose(const ArrayRef& in, const ArrayRef& out, const Attrs& attrs) {
  Shape strides;
  for (auto axis : attrs.axes) strides.push_back(in.strides[static_cast<std::size_t>(axis)]);
  copy_strided(ArrayRef{in.data, in.dtype, out.shape, strides}, out);
}

void copy_broadcast(const ArrayRef& in, const ArrayRef& out) {
  Shape strides;
  strides.resize(out.shape.size());
  const std::size_t lead = out.shape.size() - in.shape.size();
  for (std::size_t i = 0; i < in.shape.size(); ++i)
    strides[lead + i] = in.shape[i] == 1 ? 0 : in.strides[i];
  copy_strided(ArrayRef{in.data, in.dtype, out.shape, strides}, out);
}

void copy_slice(const ArrayRef& in, const ArrayRef& out, const Attrs& attrs) {
  if (out.numel() == 0) return;
  Shape strides;
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < in.shape.size(); ++d) {
    const std::int64_t start = attrs.ints[2 * d], step = attrs.ints[2 * d + 1];
    offset += start * in.strides[d];
    strides.push_back(in.strides[d] * step);
  }
  copy_strided(ArrayRef{advance(in.data, offset, in.dtype), in.dtype, out.shape, strides}, out);
}

void copy_concat(std::span<const ArrayRef> parts, const ArrayRef& out, const Attrs& attrs) {
  if (out.numel() == 0) return;
  const auto axis = static_cast<std::size_t>(attrs.axis);
  std::int64_t position = 0;
  for (const ArrayRef& part : parts) {
    copy_strided(part, ArrayRef{advance(out.data, position * out.strides[axis], out.dtype),
                                out.dtype, part.shape, out.strides});
    position += part.shape[axis];
  }
}

/// Every element of out set to `value`, converted by the cast rules.
void fill(const ArrayRef& out, double value) {
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(out.ptr<storage_t<T>>(), out.numel(), convert_element<T>(value));
  });
}

void copy_pad(const ArrayRef& in, const ArrayRef& out, const Attrs& attrs) {
  if (out.numel() == 0) return;
  fill(out, attrs.value);
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < in.shape.size(); ++d) offset += attrs.ints[2 * d] * out.strides[d];
  copy_strided(in,
               ArrayRef{advance(out.data, offset, out.dtype), out.dtype, in.shape, out.strides});
}

/// The indices in row-major order, negative ones counted from the end of an axis of size
/// `size`; throws for any index outside the axis.
template <class I>
std::vector<std::int64_t> read_indices(const ArrayRef& indices, std::int64_t axis,
                                       std::int64_t size) {
  std::vector<std::int64_t> result;
  result.reserve(static_cast<std::size_t>(indices.numel()));
  const auto c = coalesce<1>(indices.shape, {&indices.strides});
  const std::int64_t inner_stride = c.strides[0][c.rank - 1];
  const I* base = indices.ptr<const I>();
  for_each_row(c, [&](const std::array<std::int64_t, 1>& offset, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t index = base[offset[0] + i * inner_stride];
      if (index < -size || index >= size)
        fail("gather", "index {} out of range for axis {} of size {}", index, axis, size);
      result.push_back(index < 0 ? index + size : index);
    }
  });
  return result;
}

template <class T>
void gather_rows(const ArrayRef& x, const std::vector<std::int64_t>& indices, std::int64_t axis,
                 const ArrayRef& out) {
  const auto a = static_cast<std::size_t>(axis);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < a; ++d) outer *= x.shape[d];
  for (std::size_t d = a + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const std::int64_t axis_size = x.shape[a];
  const auto count = static_cast<std::int64_t>(indices.size());
  const T* src = x.ptr<const T>();
  T* dst = out.ptr<T>();
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* src_block = src + o * axis_size * inner;
    T* dst_block = dst + o * count * inner;
    if (inner == 1) {
      for (std::int64_t j = 0; j < count; ++j)
        dst_block[j] = src_block[indices[static_cast<std::size_t>(j)]];
    } else {
      const auto row_bytes = static_cast<std::int64_t>(inner * sizeof(T));
      for (std::int64_t j = 0; j < count; ++j) {
        if (j + prefetch_rows_ahead < count)
          prefetch_row(
              src_block + indices[static_cast<std::size_t>(j + prefetch_rows_ahead)] * inner,
              row_bytes, false);
        std::memcpy(dst_block + j * inner, src_block + indices[static_cast<std::size_t>(j)] * inner,
                    static_cast<std::size_t>(inner) * sizeof(T));
      }
    }
  }
}

void gather(const ArrayRef& x, const ArrayRef& indices, const ArrayRef& out, const Attrs& attrs) {
  const std::int64_t size = x.shape[static_cast<std::size_t>(attrs.axis)];
  std::vector<std::int64_t> picked;
  if (indices.dtype == DType::i32)
    picked = read_indices<std::int32_t>(indices, attrs.axis, size);
  else if (indices.dtype == DType::i64)
    picked = read_indices<std::int64_t>(indices, attrs.axis, size);
  else
    fail("gather", "indices must be i32 or i64, got {}", dtype_name(indices.dtype));
  if (out.numel() == 0) return;
  switch (dtype_size(x.dtype)) {
    case 1:
      gather_rows<std::uint8_t>(x, picked, attrs.axis, out);
      break;
    case 2:
      gather_rows<std::uint16_t>(x, picked, attrs.axis, out);
      break;
    case 4:
      gather_rows<std::uint32_t>(x, picked, attrs.axis, out);
      break;
    case 8:
      gather_rows<std::uint64_t>(x, picked, attrs.axis, out);
      break;
    default:
      break;
  }
}

}  // namespace

void run_movement(const KernelCall& call) {
  const int arity = info(call.prim).arity;
  if (call.inputs.empty() || (arity >= 0 && call.inputs.size() != static_cast<std::size_t>(arity)))
    fail(name(call.prim), "expects {} inputs, got {}",
         arity < 0 ? "one or more" : std::to_string(arity), call.inputs.size());
  const ArrayRef& in = call.inputs[0];
  switch (call.prim) {
    case Prim::reshape:
      copy_reshape(in, call.out);
      break;
    case Prim::transpose:
      copy_transpose(in, call.out, call.attrs);
      break;
    case Prim::broadcast_to:
      copy_broadcast(in, call.out);
      break;
    case Prim::slice:
      copy_slice(in, call.out, call.attrs);
      break;
    case Prim::concat:
      copy_concat(call.inputs, call.out, call.attrs);
      break;
    case Prim::pad:
      copy_pad(in, call.out, call.attrs);
      break;
    case Prim::gather:
      gather(in, call.inputs[1], call.out, call.attrs);
      break;
    case Prim::bitcast:  // same element size, both contiguous: the bytes as they are
      if (in.numel() > 0)
        std::memcpy(call.out.data, in.data,
                    static_cast<std::size_t>(in.numel()) * dtype_size(in.dtype));
      break;
    default:
      fail(name(call.prim), "is not a movement primitive");
  }
}

}  // namespace kiln::detail

// Kernels of the indexing primitives: running sums and products, sorting, and reads and writes
// at computed positions (along one axis, or by coordinate tuples). The attrs contracts are in
// lib/ops/indexing.cpp. Inputs arrive contiguous; every kernel writes the contiguous `out`.
// Index values are checked here, when they are known: negative ones count from the end of
// their axis, anything outside the axis is an error naming the op.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/kernel.hpp"

namespace kiln::detail {

namespace {

/// The mode of scatter and scatter_nd (attrs.ints[0]); kiln::ScatterMode has the same values.
enum class Combine : std::int64_t { assign = 0, add = 1, multiply = 2, maximum = 3, minimum = 4 };

/// A shape seen as [outer, n, inner] around one axis.
struct AroundAxis {
  std::int64_t outer = 1, n = 1, inner = 1;
};

AroundAxis around(const Shape& shape, std::size_t axis) {
  AroundAxis a;
  for (std::size_t d = 0; d < axis; ++d) a.outer *= shape[d];
  a.n = shape[axis];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) a.inner *= shape[d];
  return a;
}

/// An index tensor's values as i64, in row-major order.
std::vector<std::int64_t> index_values(const ArrayRef& indices) {
  const auto count = static_cast<std::size_t>(indices.numel());
  std::vector<std::int64_t> values(count);
  if (indices.dtype == DType::i64)
    std::copy_n(indices.ptr<const std::int64_t>(), count, values.begin());
  else
    std::copy_n(indices.ptr<const std::int32_t>(), count, values.begin());
  return values;
}

/// index within an axis of `size`, negative counting from the end; else an error.
std::int64_t resolve(std::int64_t index, std::int64_t size, std::size_t axis, Prim p) {
  if (index < -size || index >= size)
    fail(name(p), "index {} is out of range for axis {} of size {}", index, axis, size);
  return index < 0 ? index + size : index;
}

template <class T>
void combine_into(T& target, T value, Combine mode) {
  switch (mode) {
    case Combine::assign:
      target = value;
      break;
    case Combine::add:
      target = static_cast<T>(target + value);
      break;
    case Combine::multiply:
      target = static_cast<T>(target * value);
      break;
    case Combine::maximum:
      if (is_nan_element(target)) break;
      if (is_nan_element(value) || value > target) target = value;
      break;
    case Combine::minimum:
      if (is_nan_element(target)) break;
      if (is_nan_element(value) || value < target) target = value;
      break;
  }
}

// ------------------------------------------------------------------------ scans

template <class T, bool kProduct>
void running(const ArrayRef& in, const ArrayRef& out, std::size_t axis, bool exclusive,
             bool reverse) {
  const AroundAxis a = around(in.shape, axis);
  const T* x = in.ptr<const T>();
  T* y = out.ptr<T>();
  // The line's step s in scan order is at position line(s).
  const auto line = [&](std::int64_t s) { return reverse ? a.n - 1 - s : s; };
  for (std::int64_t o = 0; o < a.outer; ++o) {
    if (a.n == 0) break;
    const T* xb = x + o * a.n * a.inner;
    T* yb = y + o * a.n * a.inner;
    T* first = yb + line(0) * a.inner;
    if (exclusive)
      std::fill_n(first, a.inner, static_cast<T>(kProduct ? 1 : 0));
    else
      std::copy_n(xb + line(0) * a.inner, a.inner, first);
    for (std::int64_t s = 1; s < a.n; ++s) {
      const T* prev = yb + line(s - 1) * a.inner;
      const T* term = xb + line(exclusive ? s - 1 : s) * a.inner;
      T* yr = yb + line(s) * a.inner;
      for (std::int64_t i = 0; i < a.inner; ++i)
        yr[i] = kProduct ? static_cast<T>(prev[i] * term[i]) : static_cast<T>(prev[i] + term[i]);
    }
  }
}

// ------------------------------------------------------------------------ sorting

/// Whether a sorts strictly before b: ascending with NaN after every number, or descending
/// with NaN before every number.
template <class T, bool kDescending>
bool sorts_before(T a, T b) {
  if constexpr (kDescending) {
    if (is_nan_element(b)) return false;
    if (is_nan_element(a)) return true;
    return a > b;
  } else {
    if (is_nan_element(a)) return false;
    if (is_nan_element(b)) return true;
    return a < b;
  }
}

template <class T, bool kDescending>
void argsort_lines(const ArrayRef& in, const ArrayRef& out, std::size_t axis, std::int64_t k) {
  const AroundAxis a = around(in.shape, axis);
  if (k < 0) k = a.n;
  if (k > a.n)
    fail("top_k", "k {} exceeds the size {} of axis {} of shape {}", k, a.n, axis, in.shape);
  const T* x = in.ptr<const T>();
  auto* y = out.ptr<std::int64_t>();
  std::vector<T> line(static_cast<std::size_t>(a.n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(a.n));
  const auto before = [&line](std::int64_t i, std::int64_t j) {
    const T u = line[static_cast<std::size_t>(i)], v = line[static_cast<std::size_t>(j)];
    if (sorts_before<T, kDescending>(u, v)) return true;
    if (sorts_before<T, kDescending>(v, u)) return false;
    return i < j;  // equal (or both NaN): the earlier position first
  };
  for (std::int64_t o = 0; o < a.outer; ++o) {
    for (std::int64_t i = 0; i < a.inner; ++i) {
      const T* src = x + o * a.n * a.inner + i;
      for (std::int64_t r = 0; r < a.n; ++r) line[static_cast<std::size_t>(r)] = src[r * a.inner];
      std::iota(order.begin(), order.end(), std::int64_t{0});
      if (k < a.n)
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      else
        std::sort(order.begin(), order.end(), before);
      std::int64_t* dst = y + o * k * a.inner + i;
      for (std::int64_t r = 0; r < k; ++r) dst[r * a.inner] = order[static_cast<std::size_t>(r)];
    }
  }
}

// ------------------------------------------------------------------------ along one axis

/// Walks the positions of `shape` in row-major order, keeping the offset of the same
/// coordinates (the axis coordinate left out) in an array with `strides`.
class Walk {
 public:
  Walk(const Shape& shape, const Shape& strides, std::size_t axis)
      : shape_(shape), strides_(strides), axis_(axis), coords_(shape.size(), 0) {}
  std::int64_t offset() const { return offset_; }
  void next() {
    for (std::size_t d = shape_.size(); d-- > 0;) {
      const std::int64_t step = d == axis_ ? 0 : strides_[d];
      if (++coords_[d] < shape_[d]) {
        offset_ += step;
        return;
      }
      offset_ -= step * (shape_[d] - 1);
      coords_[d] = 0;
    }
  }

 private:
  const Shape& shape_;
  const Shape& strides_;
  std::size_t axis_;
  std::vector<std::int64_t> coords_;
  std::int64_t offset_ = 0;
};

/// The sizes the front ends could not check while tracing (dynamic dims): indices no larger than
/// x off the axis, and updates (if any) shaped as indices.
void check_along(const ArrayRef& x, const ArrayRef& indices, const ArrayRef* updates,
                 std::size_t axis, Prim p) {
  for (std::size_t d = 0; d < x.shape.size(); ++d)
    if (d != axis && indices.shape[d] > x.shape[d])
      fail(name(p), "indices of shape {} exceed x of shape {} along axis {}", indices.shape,
           x.shape, d);
  if (updates != nullptr && updates->shape != indices.shape)
    fail(name(p), "updates of shape {} need the shape of indices {}", updates->shape,
         indices.shape);
}

template <class T>
void take_along(const ArrayRef& x, const ArrayRef& indices, const ArrayRef& out, std::size_t axis,
                Prim p) {
  check_along(x, indices, nullptr, axis, p);
  const std::vector<std::int64_t> picked = index_values(indices);
  const Shape x_strides = contiguous_strides(x.shape);
  const std::int64_t size = x.shape[axis], stride = x_strides[axis];
  const T* src = x.ptr<const T>();
  T* dst = out.ptr<T>();
  Walk walk(indices.shape, x_strides, axis);
  for (std::size_t l = 0; l < picked.size(); ++l, walk.next())
    dst[l] = src[walk.offset() + resolve(picked[l], size, axis, p) * stride];
}

template <class T>
void scatter_along(const ArrayRef& x, const ArrayRef& indices, const ArrayRef& updates,
                   const ArrayRef& out, std::size_t axis, Combine mode, Prim p) {
  check_along(x, indices, &updates, axis, p);
  const std::vector<std::int64_t> picked = index_values(indices);
  const Shape x_strides = contiguous_strides(x.shape);
  const std::int64_t size = x.shape[axis], stride = x_strides[axis];
  T* dst = out.ptr<T>();
  std::copy_n(x.ptr<const T>(), x.numel(), dst);
  const T* values = updates.ptr<const T>();
  Walk walk(indices.shape, x_strides, axis);
  for (std::size_t l = 0; l < picked.size(); ++l, walk.next())
    combine_into(dst[walk.offset() + resolve(picked[l], size, axis, p) * stride], values[l], mode);
}

// ------------------------------------------------------------------------ coordinate tuples

/// gather_nd and scatter_nd's view of x and indices: `batches` batches; in each, `tuples`
/// coordinate tuples of length `m` (over x's axes batch_dims .. batch_dims + m), each selecting a
/// slice of `slice` contiguous elements.
struct TupleLayout {
  std::int64_t batches = 1, tuples = 1, m = 0, slice = 1, batch_elements = 1;
  std::size_t batch_dims = 0;
  Shape x_strides;
};

TupleLayout tuple_layout(const ArrayRef& x, const ArrayRef& indices, std::int64_t batch_dims,
                         Prim p) {
  for (std::size_t d = 0; d < static_cast<std::size_t>(batch_dims); ++d)
    if (x.shape[d] != indices.shape[d])
      fail(name(p), "batch dim {} differs: x of shape {}, indices of shape {}", d, x.shape,
           indices.shape);
  TupleLayout t;
  t.batch_dims = static_cast<std::size_t>(batch_dims);
  t.m = indices.shape[indices.shape.size() - 1];
  for (std::size_t d = 0; d < t.batch_dims; ++d) t.batches *= x.shape[d];
  for (std::size_t d = t.batch_dims; d + 1 < indices.shape.size(); ++d)
    t.tuples *= indices.shape[d];
  for (std::size_t d = t.batch_dims + static_cast<std::size_t>(t.m); d < x.shape.size(); ++d)
    t.slice *= x.shape[d];
  for (std::size_t d = t.batch_dims; d < x.shape.size(); ++d) t.batch_elements *= x.shape[d];
  t.x_strides = contiguous_strides(x.shape);
  return t;
}

/// The offset in x (within its batch) of tuple `tuple` of batch `batch`.
std::int64_t tuple_offset(const TupleLayout& t, const std::vector<std::int64_t>& picked,
                          const ArrayRef& x, std::int64_t batch, std::int64_t tuple, Prim p) {
  std::int64_t offset = 0;
  const std::int64_t* coords = picked.data() + (batch * t.tuples + tuple) * t.m;
  for (std::int64_t j = 0; j < t.m; ++j) {
    const std::size_t axis = t.batch_dims + static_cast<std::size_t>(j);
    offset += resolve(coords[j], x.shape[axis], axis, p) * t.x_strides[axis];
  }
  return offset;
}

template <class T>
void gather_tuples(const ArrayRef& x, const ArrayRef& indices, const ArrayRef& out,
                   std::int64_t batch_dims, Prim p) {
  const TupleLayout t = tuple_layout(x, indices, batch_dims, p);
  const std::vector<std::int64_t> picked = index_values(indices);
  const T* src = x.ptr<const T>();
  T* dst = out.ptr<T>();
  for (std::int64_t b = 0; b < t.batches; ++b)
    for (std::int64_t g = 0; g < t.tuples; ++g) {
      const T* from = src + b * t.batch_elements + tuple_offset(t, picked, x, b, g, p);
      std::copy_n(from, t.slice, dst + (b * t.tuples + g) * t.slice);
    }
}

template <class T>
void scatter_tuples(const ArrayRef& x, const ArrayRef& indices, const ArrayRef& updates,
                    const ArrayRef& out, std::int64_t batch_dims, Combine mode, Prim p) {
  const TupleLayout t = tuple_layout(x, indices, batch_dims, p);
  if (updates.numel() != t.batches * t.tuples * t.slice)
    fail(name(p), "updates of shape {} do not match indices of shape {} into x of shape {}",
         updates.shape, indices.shape, x.shape);
  const std::vector<std::int64_t> picked = index_values(indices);
  T* dst = out.ptr<T>();
  std::copy_n(x.ptr<const T>(), x.numel(), dst);
  const T* values = updates.ptr<const T>();
  for (std::int64_t b = 0; b < t.batches; ++b)
    for (std::int64_t g = 0; g < t.tuples; ++g) {
      T* to = dst + b * t.batch_elements + tuple_offset(t, picked, x, b, g, p);
      const T* from = values + (b * t.tuples + g) * t.slice;
      for (std::int64_t i = 0; i < t.slice; ++i) combine_into(to[i], from[i], mode);
    }
}

}  // namespace

void run_indexing(const KernelCall& call) {
  const auto arity = static_cast<std::size_t>(info(call.prim).arity);
  if (call.inputs.size() != arity)
    fail(name(call.prim), "expects {} inputs, got {}", arity, call.inputs.size());
  const ArrayRef& x = call.inputs[0];
  const Attrs& attrs = call.attrs;
  const auto axis = static_cast<std::size_t>(attrs.axis);
  const Prim p = call.prim;
  const auto mode = [&attrs] { return static_cast<Combine>(attrs.ints.at(0)); };
  visit_compute_type(x.dtype, name(p).data(), [&](auto tag) {
    using T = decltype(tag);
    switch (p) {
      case Prim::cumsum:
        running<T, false>(x, call.out, axis, attrs.ints.at(0) != 0, attrs.ints.at(1) != 0);
        break;
      case Prim::cumprod:
        running<T, true>(x, call.out, axis, attrs.ints.at(0) != 0, attrs.ints.at(1) != 0);
        break;
      case Prim::argsort:
        if (attrs.ints.at(1) != 0)
          argsort_lines<T, true>(x, call.out, axis, attrs.ints[0]);
        else
          argsort_lines<T, false>(x, call.out, axis, attrs.ints[0]);
        break;
      case Prim::take_along_axis:
        take_along<T>(x, call.inputs[1], call.out, axis, p);
        break;
      case Prim::scatter:
        scatter_along<T>(x, call.inputs[1], call.inputs[2], call.out, axis, mode(), p);
        break;
      case Prim::gather_nd:
        gather_tuples<T>(x, call.inputs[1], call.out, attrs.axis, p);
        break;
      case Prim::scatter_nd:
        scatter_tuples<T>(x, call.inputs[1], call.inputs[2], call.out, attrs.axis, mode(), p);
        break;
      default:
        fail(name(p), "is not an indexing primitive");
    }
  });
}

}  // namespace kiln::detail

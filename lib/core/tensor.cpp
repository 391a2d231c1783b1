#include "kiln/tensor.hpp"

#include <cstring>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"

namespace kiln {

namespace detail {

Shape contiguous_strides(const Shape& shape) {
  Shape strides;
  strides.resize(shape.size());
  if (shape.has_dynamic_dims()) return strides;  // symbolic tensors have no layout yet
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

bool TensorImpl::is_contiguous() const { return is_contiguous_layout(shape, strides); }

void check_concrete(const TensorImpl& t, const char* op) {
  if (t.is_slices())
    fail(op,
         "this tensor is an indexed-slices value (a row-sparse gradient, {} {}): it has no dense "
         "buffer; use kiln::to_dense(t) for one",
         dtype_name(t.dtype), t.shape);
  if (t.is_symbolic())
    fail(op,
         "cannot read the value of a symbolic tensor ({} {}) while its function is being traced: "
         "values exist only when the compiled function runs. Use kiln::where for data-dependent "
         "choices, or pass the value as a static (non-tensor) argument",
         dtype_name(t.dtype), t.shape);
}

Tensor empty(const Shape& shape, DType dtype, const char* op) {
  // `span`, the product of the non-zero dims, bounds the strides: it must not overflow even
  // when a zero dim makes the tensor empty.
  std::int64_t n = 1;
  std::int64_t span = 1;
  bool overflow = false;
  for (auto d : shape) {
    if (d < 0) fail(op, "negative dimension in shape {}", shape);
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
    if (d != 0) overflow = overflow || __builtin_mul_overflow(span, d, &span);
  }
  if (overflow || n > (std::int64_t{1} << 50)) fail(op, "shape {} has too many elements", shape);
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  return Tensor(std::allocate_shared<TensorImpl>(CachedAllocator<TensorImpl>{}, dtype, shape,
                                                 contiguous_strides(shape), 0,
                                                 allocate_storage(bytes, op)));
}

Tensor empty_checked(const Shape& shape, const Shape& strides, DType dtype, std::size_t bytes) {
  return Tensor(std::allocate_shared<TensorImpl>(CachedAllocator<TensorImpl>{}, dtype, shape,
                                                 strides, 0, allocate_storage(bytes)));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides,
                 std::int64_t offset) {
  const auto& b = *base.impl();
  return Tensor(std::allocate_shared<TensorImpl>(CachedAllocator<TensorImpl>{}, b.dtype, shape,
                                                 strides, offset, b.storage));
}

Tensor make_view(const Tensor& base, DType dtype, const Shape& shape, const Shape& strides,
                 std::int64_t offset) {
  return Tensor(std::allocate_shared<TensorImpl>(CachedAllocator<TensorImpl>{}, dtype, shape,
                                                 strides, offset, base.impl()->storage));
}

Tensor tensor_from_bytes(const void* data, std::int64_t count, DType dtype, const Shape& shape,
                         bool shape_given) {
  const Shape s = shape_given ? shape : Shape{count};
  for (auto d : s)
    if (d < 0) fail("tensor", "negative dimension in shape {}", s);
  if (s.numel() != count)
    fail("tensor", "{} values do not fill shape {} ({} elements)", count, s, s.numel());
  Tensor t = empty(s, dtype);
  if (count > 0)
    std::memcpy(t.impl()->data(), data, static_cast<std::size_t>(count) * dtype_size(dtype));
  return t;
}

}  // namespace detail

namespace {
const detail::TensorImpl& checked(const std::shared_ptr<detail::TensorImpl>& impl,
                                  const char* what) {
  if (!impl) detail::fail("tensor", "{} of an undefined tensor", what);
  return *impl;
}
}  // namespace

DType Tensor::dtype() const { return checked(impl_, "dtype").dtype; }
const Shape& Tensor::shape() const { return checked(impl_, "shape").shape; }
std::int64_t Tensor::ndim() const {
  return static_cast<std::int64_t>(checked(impl_, "ndim").shape.size());
}
std::int64_t Tensor::size() const { return checked(impl_, "size").shape.numel(); }
std::int64_t Tensor::dim(std::int64_t i) const { return checked(impl_, "dim").shape.at(i); }
const Shape& Tensor::strides() const { return checked(impl_, "strides").strides; }
bool Tensor::is_contiguous() const { return checked(impl_, "is_contiguous").is_contiguous(); }
bool Tensor::is_indexed_slices() const { return impl_ != nullptr && impl_->is_slices(); }
const void* Tensor::data() const {
  const auto& impl = checked(impl_, "data");
  detail::check_concrete(impl, "data");
  return impl.data();
}

void Tensor::check_element_type(DType requested, const char* op) const {
  const auto& impl = checked(impl_, op);
  if (impl.dtype != requested)
    detail::fail(op, "tensor has dtype {}, but {} was requested", dtype_name(impl.dtype),
                 dtype_name(requested));
}

void Tensor::copy_element_to(const std::int64_t* index, std::size_t count, void* dst) const {
  const auto& impl = checked(impl_, "at");
  if (impl.is_slices()) return detail::densify_slices(*this).copy_element_to(index, count, dst);
  detail::check_concrete(impl, "at");
  if (count != impl.shape.size())
    detail::fail("at", "tensor of shape {} needs {} indices, got {}", impl.shape, impl.shape.size(),
                 count);
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < count; ++d) {
    const std::int64_t extent = impl.shape[d];
    const std::int64_t i = index[d] < 0 ? index[d] + extent : index[d];
    if (i < 0 || i >= extent)
      detail::fail("at", "index {} is out of range for dim {} of size {} (shape {})", index[d], d,
                   extent, impl.shape);
    offset += i * impl.strides[d];
  }
  const std::size_t size = dtype_size(impl.dtype);
  std::memcpy(dst, impl.data() + offset * static_cast<std::int64_t>(size), size);
}

void Tensor::check_single_element() const {
  const auto& impl = checked(impl_, "item");
  if (!impl.is_slices()) detail::check_concrete(impl, "item");
  if (impl.shape.numel() != 1)
    detail::fail("item", "tensor of shape {} has {} elements, item() needs exactly one", impl.shape,
                 impl.shape.numel());
}

}  // namespace kiln

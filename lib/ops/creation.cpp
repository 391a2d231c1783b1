#include "kiln/creation.hpp"

#include <cmath>
#include <limits>

#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/convert.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

/// A new tensor whose element i is f(i) converted to dtype.
template <class F>
Tensor generate(const char* op, const Shape& shape, DType dtype, F&& f) {
  Tensor t = detail::empty(shape, dtype, op);
  const std::int64_t n = shape.numel();
  detail::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* p = detail::data_ptr<detail::storage_t<T>>(t);
    for (std::int64_t i = 0; i < n; ++i) p[i] = detail::convert_element<T>(f(i));
  });
  return t;
}

void check_shape(const Shape& shape, const char* op) {
  if (shape.has_dynamic_dims()) {
    detail::check_dims(shape, op);  // valid symbols of the current trace
    return;
  }
  std::int64_t count = 1;
  for (auto d : shape) {
    if (d < 0) detail::fail(op, "negative dimension in shape {}", shape);
    if (__builtin_mul_overflow(count, d, &count))
      detail::fail(op, "shape {} has too many elements", shape);
  }
}

/// full() for op `op`, which errors name.
Tensor fill(const char* op, const Shape& shape, double value, DType dtype) {
  check_shape(shape, op);
  if (shape.has_dynamic_dims()) {
    // Inside a trace with dynamic dims: the fill becomes a broadcast of one captured scalar,
    // whose size is fixed only when the function runs.
    const Tensor one = scalar(value, dtype);
    return detail::apply(detail::Prim::broadcast_to, {one}, detail::no_attrs(), dtype, shape);
  }
  Tensor t = detail::empty(shape, dtype, op);
  const std::int64_t n = shape.numel();
  detail::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* p = detail::data_ptr<detail::storage_t<T>>(t);
    std::fill(p, p + n, detail::convert_element<T>(value));
  });
  return t;
}

}  // namespace

Tensor scalar(double value, DType dtype) {
  return generate("scalar", Shape{}, dtype, [&](std::int64_t) { return value; });
}

Tensor full(const Shape& shape, double value, DType dtype) {
  return fill("full", shape, value, dtype);
}

Tensor zeros(const Shape& shape, DType dtype) { return fill("zeros", shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return fill("ones", shape, 1.0, dtype); }

// The defined() check runs in its own statement: argument evaluation order is unspecified.
Tensor zeros_like(const Tensor& t) {
  detail::check_defined(t, "zeros_like");
  return fill("zeros_like", t.shape(), 0.0, t.dtype());
}
Tensor ones_like(const Tensor& t) {
  detail::check_defined(t, "ones_like");
  return fill("ones_like", t.shape(), 1.0, t.dtype());
}
Tensor full_like(const Tensor& t, double value) {
  detail::check_defined(t, "full_like");
  return fill("full_like", t.shape(), value, t.dtype());
}

Tensor arange(double start, double stop, double step, DType dtype) {
  if (step == 0.0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    detail::fail("arange", "start, stop and step must be finite and step nonzero (got {}, {}, {})",
                 start, stop, step);
  const double count = std::ceil((stop - start) / step);
  if (count > 1e12) detail::fail("arange", "{} elements is too many", count);
  const auto n = static_cast<std::int64_t>(std::max(0.0, count));
  return generate("arange", Shape{n}, dtype,
                  [&](std::int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor arange(std::int64_t stop, DType dtype) {
  if (stop < 0) detail::fail("arange", "stop {} is negative", stop);
  return generate("arange", Shape{stop}, dtype,
                  [](std::int64_t i) { return static_cast<double>(i); });
}

Tensor linspace(double start, double stop, std::int64_t num, DType dtype) {
  if (num < 0) detail::fail("linspace", "num {} is negative", num);
  const double step = num > 1 ? (stop - start) / static_cast<double>(num - 1) : 0.0;
  return generate("linspace", Shape{num}, dtype, [&](std::int64_t i) {
    return i == num - 1 && num > 1 ? stop : start + static_cast<double>(i) * step;
  });
}

Tensor eye(std::int64_t n, std::int64_t m, DType dtype) {
  if (m < 0) m = n;
  if (n < 0) detail::fail("eye", "n {} is negative", n);
  check_shape(Shape{n, m}, "eye");
  return generate("eye", Shape{n, m}, dtype,
                  [&](std::int64_t i) { return i / m == i % m ? 1.0 : 0.0; });
}

}  // namespace kiln

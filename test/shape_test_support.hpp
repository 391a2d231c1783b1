#pragma once
// Helpers shared by the shape and data-movement tests (test_shape_ops.cpp,
// test_shape_errors.cpp).

#include <kiln/kiln.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/tensor_impl.hpp"
#include "kernels/kernel.hpp"

namespace shape_test {

using kiln::Shape;
using kiln::Slice;
using kiln::Tensor;
using Values = std::vector<double>;

inline constexpr std::int64_t none = Slice::none;

/// 0, 1, 2, ... in the given shape (built without any op under test).
inline Tensor iota(const Shape& shape, kiln::DType dtype = kiln::f32) {
  const std::int64_t n = shape.numel();
  switch (dtype) {
    case kiln::DType::f64: {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(i);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::i32: {
      std::vector<std::int32_t> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
      return kiln::tensor(v, shape);
    }
    case kiln::DType::i64: {
      std::vector<std::int64_t> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
      return kiln::tensor(v, shape);
    }
    case kiln::DType::boolean: {
      std::vector<bool> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i % 2 == 1;
      return kiln::tensor(v, shape);
    }
    default: {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
      return kiln::tensor(v, shape);
    }
  }
}

/// The elements of t in row-major order, as doubles (any dtype).
inline std::vector<double> values(const Tensor& t) {
  const auto widen = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  switch (t.dtype()) {
    case kiln::DType::f32:
      return widen(t.to_vector<float>());
    case kiln::DType::f64:
      return t.to_vector<double>();
    case kiln::DType::i32:
      return widen(t.to_vector<std::int32_t>());
    case kiln::DType::i64:
      return widen(t.to_vector<std::int64_t>());
    case kiln::DType::boolean:
      return widen(t.to_vector<bool>());
    case kiln::DType::i8:
      return widen(t.to_vector<std::int8_t>());
    case kiln::DType::u8:
      return widen(t.to_vector<std::uint8_t>());
    case kiln::DType::f16:
      return widen(t.to_vector<kiln::float16>());
    case kiln::DType::bf16:
      return widen(t.to_vector<kiln::bfloat16>());
    case kiln::DType::i16:
      return widen(t.to_vector<std::int16_t>());
    case kiln::DType::u16:
      return widen(t.to_vector<std::uint16_t>());
    case kiln::DType::u32:
      return widen(t.to_vector<std::uint32_t>());
    case kiln::DType::u64:
      return widen(t.to_vector<std::uint64_t>());
    case kiln::DType::f8e4m3fn:
    case kiln::DType::f8e4m3fnuz:
    case kiln::DType::f8e5m2:
    case kiln::DType::f8e5m2fnuz:
    case kiln::DType::f4e2m1fn:
    case kiln::DType::i4:
    case kiln::DType::u4:
    case kiln::DType::i2:
    case kiln::DType::u2:
      return kiln::cast(t, kiln::f64).to_vector<double>();
  }
  return {};
}

inline bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.impl()->storage == b.impl()->storage;
}

/// The message of the kiln::Error that f throws, or "no error".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "no error";
}

/// Runs the kernel of p on the (contiguous) inputs into a new tensor of dtype and shape.
inline Tensor run_kernel(kiln::detail::Prim p, const std::vector<Tensor>& inputs,
                         const kiln::detail::Attrs& attrs, kiln::DType dtype, const Shape& shape) {
  Tensor out = kiln::detail::empty(shape, dtype);
  std::vector<kiln::detail::ArrayRef> refs;
  for (const Tensor& t : inputs) refs.push_back(kiln::detail::array_ref(t));
  const kiln::detail::ArrayRef out_ref = kiln::detail::array_ref(out);
  kiln::detail::kernel_for(p)(kiln::detail::KernelCall{p, refs, out_ref, attrs});
  return out;
}

/// Reference tile: out[i] = x[i mod x.shape] for every multi-index i of out.
inline std::vector<double> tile_reference(const Tensor& x, const std::vector<std::int64_t>& reps) {
  const Shape& in = x.shape();
  Shape out_shape = in;
  for (std::size_t d = 0; d < in.size(); ++d) out_shape[d] *= reps[d];
  const std::vector<double> src = values(x);
  std::vector<double> out;
  for (std::int64_t flat = 0; flat < out_shape.numel(); ++flat) {
    std::int64_t rest = flat, src_index = 0, src_stride = 1;
    for (std::size_t d = in.size(); d-- > 0;) {
      const std::int64_t coord = rest % out_shape[d];
      rest /= out_shape[d];
      src_index += (coord % in[d]) * src_stride;
      src_stride *= in[d];
    }
    out.push_back(src[static_cast<std::size_t>(src_index)]);
  }
  return out;
}

/// Reference transpose: out[i] = x[i permuted back].
inline std::vector<double> transpose_reference(const Tensor& x,
                                               const std::vector<std::int64_t>& perm) {
  const Shape& in = x.shape();
  const Shape in_strides = kiln::detail::contiguous_strides(in);
  Shape out_shape;
  for (auto p : perm) out_shape.push_back(in[static_cast<std::size_t>(p)]);
  const std::vector<double> src = values(x);
  std::vector<double> out;
  for (std::int64_t flat = 0; flat < out_shape.numel(); ++flat) {
    std::int64_t rest = flat, src_index = 0;
    for (std::size_t d = out_shape.size(); d-- > 0;) {
      src_index += (rest % out_shape[d]) * in_strides[static_cast<std::size_t>(perm[d])];
      rest /= out_shape[d];
    }
    out.push_back(src[static_cast<std::size_t>(src_index)]);
  }
  return out;
}

}  // namespace shape_test

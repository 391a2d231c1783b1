#pragma once
// The one path every op takes after its front end has validated the arguments and
// inferred the output: apply(prim, inputs, attrs, dtype, shape).

#include <array>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/kernel.hpp"
#include "kernels/lowering.hpp"

namespace kiln::detail {

/// Runs primitive p on `inputs` and returns its output of the given dtype and shape.
/// The front end has already checked every argument; apply() does not re-validate.
/// While a GradientTape records, the application is recorded on it.
Tensor apply(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs, DType out_dtype,
             const Shape& out_shape);
/// The eager part of apply() alone: no tracing, no tape, inputs known to be concrete (for the
/// executor of a compiled plan, which runs only when neither applies).
Tensor run_primitive(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                     DType out_dtype, const Shape& out_shape);
/// The attributes of a primitive that takes none: one shared instance, so a call does not
/// build and destroy an empty Attrs (120 bytes cleared) each time.
inline const Attrs empty_attrs{};
inline const Attrs& no_attrs() { return empty_attrs; }
/// For a list of tensors (concat).
Tensor apply(Prim p, std::span<const Tensor> inputs, const Attrs& attrs, DType out_dtype,
             const Shape& out_shape);
/// For a fixed list, without copying the handles: apply(Prim::add, {a, b}, ...).
inline Tensor apply(Prim p, std::initializer_list<std::reference_wrapper<const Tensor>> inputs,
                    const Attrs& attrs, DType out_dtype, const Shape& out_shape) {
  std::array<const Tensor*, 4> small{};
  std::vector<const Tensor*> large;
  const Tensor** ptrs = small.data();
  if (inputs.size() > small.size()) {
    large.resize(inputs.size());
    ptrs = large.data();
  }
  std::size_t n = 0;
  for (const Tensor& t : inputs) ptrs[n++] = &t;
  return apply(p, std::span<const Tensor* const>(ptrs, n), attrs, out_dtype, out_shape);
}

/// Throws "[op] argument <index> is an undefined tensor".
void check_defined(const Tensor& t, std::string_view op, int index = 0);
/// Throws "[op] needs a floating-point dtype ..." (or numeric) unless `accepts` admits dtype.
void check_accepts(DType dtype, Accepts accepts, std::string_view op);
/// Throws "[op] dtypes differ: f32 vs f64" unless a and b share a dtype.
void check_same_dtype(const Tensor& a, const Tensor& b, std::string_view op);
/// NumPy broadcast of two shapes, or "[op] shapes [..] and [..] cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
/// Checks that every dim of `shape` is a size >= 0 or, while tracing, a dynamic dim of the
/// trace: "[op] negative dimension -3 in shape [-3,2]".
void check_dims(const Shape& shape, std::string_view op);
/// One dim as text: "32", or "?0" for a dynamic dim.
std::string dim_text(std::int64_t dim);
/// Throws "[op] <what> is a dynamic dim ..." for ops that need a static size there.
void require_static_dim(std::int64_t dim, std::string_view op, std::string_view what);
/// The same for every dim of `shape`.
void require_static_shape(const Shape& shape, std::string_view op, std::string_view what);
/// Axis in [-rank, rank) → [0, rank), or "[op] axis 3 out of range for rank 2".
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, std::string_view op);

}  // namespace kiln::detail

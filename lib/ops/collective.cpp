// Front ends of the collective primitives: validation and the output's type.
#include "ops/collective.hpp"

#include "core/fail.hpp"
#include "ops/dispatch.hpp"

namespace kiln::detail {

namespace {
Attrs collective_attrs(CollectiveKind kind, DType dtype, double scale,
                       const CollectiveParams& params = {}) {
  Attrs attrs;
  attrs.ints = {static_cast<std::int64_t>(kind)};
  if (kind == CollectiveKind::replicas) {
    attrs.ints.push_back(params.replicas);
    attrs.ints.push_back(params.max_lag_rounds);
  }
  attrs.dtype = dtype;
  attrs.value = scale;
  return attrs;
}
}  // namespace

Tensor collective_start(CollectiveKind kind, std::span<const Tensor> inputs,
                        const CollectiveParams& params) {
  constexpr const char* op = "distributed.collective_start";
  if (inputs.empty()) fail(op, "needs at least one tensor");
  const DType dtype = inputs[0].dtype();
  for (const Tensor& t : inputs) {
    if (!t.defined()) fail(op, "got an undefined tensor");
    if (t.dtype() != dtype)
      fail(op, "joins tensors of one dtype, got {} and {}", dtype_name(dtype),
           dtype_name(t.dtype()));
  }
  if (kind != CollectiveKind::gather && dtype != f32 && dtype != f64)
    fail(op, "sums f32 or f64 tensors, got {} (kiln::cast to f32 first)", dtype_name(dtype));
  if (compute_dtype(dtype) != dtype)
    fail(op, "gathers tensors of kiln's compute dtypes, got {} (kiln::cast to {} first)",
         dtype_name(dtype), dtype_name(compute_dtype(dtype)));
  if (kind == CollectiveKind::gather && (inputs.size() != 1 || inputs[0].ndim() == 0))
    fail(op, "gathers one tensor with a first dim");
  if (kind == CollectiveKind::replicas && (params.replicas < 1 || params.max_lag_rounds < 1))
    fail(op, "replicas needs replicas >= 1 and max_lag_rounds >= 1, got {} and {}", params.replicas,
         params.max_lag_rounds);
  return apply(Prim::collective_start, inputs, collective_attrs(kind, dtype, 1.0, params), i64,
               Shape{});
}

Tensor collective_wait(const Tensor& ticket, CollectiveKind kind, DType dtype, const Shape& shape,
                       double scale) {
  return apply(Prim::collective_wait, {ticket}, collective_attrs(kind, dtype, scale), dtype, shape);
}

}  // namespace kiln::detail

// kiln::matmul front end.
//
// Prim::matmul contract (kernel in lib/kernels/matmul.cpp; no attrs):
//   inputs  a [..., m, k] and b [..., k, n]: contiguous, or 2-d strided layouts the kernel reads
//           in place (see matmul_reads_in_place), rank >= 2, equal dtype among
//           f32, f64, i32, i64. Their batch dims (all but the last two) broadcast like
//           NumPy; a size-1 (or missing) batch dim means that matrix is reused.
//   output  [broadcast batch dims..., m, n], contiguous, the inputs' dtype.
//   f32/f64 use libxsmm JIT kernels for small problems and OpenBLAS for large ones;
//   i32/i64 wrap on overflow. k == 0 gives zeros.
#include <algorithm>

#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

constexpr std::string_view op_name = "matmul";

/// Broadcast of the batch dims of a2 and b2 (rank >= 2 each); errors show the operands'
/// original shapes.
Shape batch_broadcast(const Shape& a2, const Shape& b2, const Tensor& a, const Tensor& b) {
  const std::size_t a_rank = a2.size() - 2, b_rank = b2.size() - 2;
  const std::size_t rank = std::max(a_rank, b_rank);
  Shape out;
  out.resize(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a_rank ? 1 : a2[i - (rank - a_rank)];
    const std::int64_t db = i < rank - b_rank ? 1 : b2[i - (rank - b_rank)];
    if (da != db && da != 1 && db != 1)
      detail::fail(op_name, "batch dimensions of {} and {} cannot be broadcast", a.shape(),
                   b.shape());
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_result_size(const Shape& shape, DType dtype) {
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(dtype));
  for (auto d : shape)
    if (!is_dynamic_dim(d) && __builtin_mul_overflow(bytes, d, &bytes))
      detail::fail(op_name, "result shape {} is too large", shape);
}

Tensor reshape_view(const Tensor& x, const Shape& shape) {
  return detail::apply(detail::Prim::reshape, {x}, detail::no_attrs(), x.dtype(), shape);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, op_name, 0);
  detail::check_defined(b, op_name, 1);
  if (a.ndim() == 0 || b.ndim() == 0)
    detail::fail(op_name, "operands must be at least 1-D, got shapes {} and {}", a.shape(),
                 b.shape());
  detail::check_same_dtype(a, b, op_name);
  if (!is_floating(a.dtype()) && !is_integer(a.dtype()))
    detail::fail(op_name, "dtype {} is not supported ({} x {}); use kiln::cast", a.dtype(),
                 a.shape(), b.shape());

  const bool a_vector = a.ndim() == 1, b_vector = b.ndim() == 1;
  // Vectors as matrices; matrices by reference (no handle copies on the common path).
  Tensor a_row, b_column;
  if (a_vector) a_row = reshape_view(a, Shape{1, a.dim(0)});
  if (b_vector) b_column = reshape_view(b, Shape{b.dim(0), 1});
  const Tensor& a2 = a_vector ? a_row : a;
  const Tensor& b2 = b_vector ? b_column : b;
  const Shape& as = a2.shape();
  const Shape& bs = b2.shape();
  const std::int64_t m = as[as.size() - 2], k = as.back();
  const std::int64_t n = bs.back();
  if (k != bs[bs.size() - 2])
    detail::fail(op_name, "inner dimensions differ: {} x {}", a.shape(), b.shape());

  Shape out_shape = batch_broadcast(as, bs, a, b);
  out_shape.push_back(m);
  out_shape.push_back(n);
  check_result_size(out_shape, a.dtype());
  Tensor out =
      detail::apply(detail::Prim::matmul, {a2, b2}, detail::no_attrs(), a.dtype(), out_shape);
  if (!a_vector && !b_vector) return out;

  Shape result_shape = out_shape;
  if (b_vector) result_shape.erase(result_shape.size() - 1);
  if (a_vector) result_shape.erase(result_shape.size() - (b_vector ? 1 : 2));
  return reshape_view(out, result_shape);
}

}  // namespace kiln

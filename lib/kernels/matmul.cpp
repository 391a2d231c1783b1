// Matrix product kernels: f32/f64 products through the GEMM backends of kernels/gemm.hpp (over
// the batch matrices of a batched product), a wrapping i-k-j loop for integers. The contract is
// documented in lib/ops/matmul.cpp.

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "core/fail.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"

namespace kiln::detail {

namespace {

/// Multiply-adds a parallel_for chunk should hold at least (smaller work stays inline).
constexpr std::int64_t parallel_chunk_work = 1 << 17;

std::int64_t grain_for(std::int64_t work_per_item) {
  return std::max<std::int64_t>(1, parallel_chunk_work / std::max<std::int64_t>(1, work_per_item));
}

/// Whether a 2-d (or batched) operand's rows are contiguous: the usual, untransposed layout.
bool is_row_major(const ArrayRef& x) {
  const std::size_t r = x.shape.size();
  return x.shape[r - 1] == 1 || x.strides[r - 1] == 1;
}

/// The row stride of a matrix operand with `cols` columns: its own for a strided 2-d operand
/// (transposed: the stride of its second dim), `cols` for a contiguous one.
std::int64_t leading_dim(const ArrayRef& x, std::int64_t cols) {
  if (x.shape.size() != 2 || x.shape[0] <= 1 || x.shape[1] <= 1) return cols;
  return is_row_major(x) ? x.strides[0] : x.strides[1];
}

/// Offsets (in elements) of the matrices of a and b that output matrix i multiplies,
/// walking the output batch dims in row-major order.
struct BatchWalk {
  std::size_t rank = 0;
  Shape dims;      // output batch dims
  Shape a_stride;  // 0 where a is broadcast
  Shape b_stride;
  std::int64_t count = 1;

  BatchWalk(const ArrayRef& a, const ArrayRef& b, const ArrayRef& out) {
    rank = out.shape.size() - 2;
    dims.resize(rank);
    a_stride.resize(rank);
    b_stride.resize(rank);
    const std::size_t a_lead = rank - (a.shape.size() - 2);
    const std::size_t b_lead = rank - (b.shape.size() - 2);
    for (std::size_t d = 0; d < rank; ++d) {
      dims[d] = out.shape[d];
      count *= dims[d];
      if (d >= a_lead && a.shape[d - a_lead] != 1) a_stride[d] = a.strides[d - a_lead];
      if (d >= b_lead && b.shape[d - b_lead] != 1) b_stride[d] = b.strides[d - b_lead];
    }
  }

  /// True when every output matrix uses the same b.
  bool b_shared() const {
    for (std::size_t d = 0; d < rank; ++d)
      if (dims[d] != 1 && b_stride[d] != 0) return false;
    return true;
  }

  /// True when a's matrices lie back to back in output order (a reads as [count*m, k]).
  bool a_dense(std::int64_t matrix_elems) const {
    std::int64_t expected = matrix_elems;
    for (std::size_t d = rank; d-- > 0;) {
      if (dims[d] == 1) continue;
      if (a_stride[d] != expected) return false;
      expected *= dims[d];
    }
    return true;
  }

  /// Element offsets of the a and b matrices that output matrix `index` multiplies.
  std::pair<std::int64_t, std::int64_t> offsets(std::int64_t index) const {
    std::int64_t a_off = 0, b_off = 0;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t i = index % dims[d];
      index /= dims[d];
      a_off += i * a_stride[d];
      b_off += i * b_stride[d];
    }
    return {a_off, b_off};
  }
};

}  // namespace

bool matmul_reads_in_place(const ArrayRef& x, int which) {
  if (x.dtype != DType::f32 && x.dtype != DType::f64) return false;
  if (x.shape.size() != 2 || x.shape[0] <= 1 || x.shape[1] <= 1) return false;
  const bool rows_apart = x.strides[1] == 1 && x.strides[0] >= x.shape[1];
  const bool transposed = x.strides[0] == 1 && x.strides[1] >= x.shape[0];
  // A transposed b (a backward pass's dy W^T) is read by oneDNN and OpenBLAS only: worth it for
  // a large matrix, whose copy costs a pass over it per product; a small one is copied and
  // its product runs on a libxsmm kernel, far faster than the libraries' on small shapes.
  constexpr std::int64_t large_b = std::int64_t{1} << 16;
  if (which == 1 && transposed) return x.shape[0] * x.shape[1] >= large_b;
  return rows_apart || transposed;
}

namespace {

/// The f32/f64 product for fixed operand layouts: the GEMM kernel (kernels/gemm.hpp) and the
/// walk over batch matrices, chosen once. Eager calls build one per call; a compiled plan keeps
/// one per matmul step (see plan_matmul).
template <class T>
class FloatMatmul {
 public:
  FloatMatmul(const ArrayRef& a, const ArrayRef& b, const ArrayRef& out, bool accumulate = false,
              bool scaled = false)
      : walk_(a, b, out),
        m_(a.shape[a.shape.size() - 2]),
        n_(b.shape.back()),
        k_(a.shape.back()),
        gemm_(choose(a, b, accumulate, scaled)) {}

  /// Whether the product runs on oneDNN or OpenBLAS (not on libxsmm kernels).
  bool on_library() const { return gemm_.backend() != GemmBackend::xsmm; }

  /// For type deduction only (std::visit over the dtypes).
  static T* element() { return nullptr; }

  void operator()(const T* a_data, const T* b_data, T* out_data, T alpha = 1) const {
    if (merged_ || walk_.count == 1) {
      gemm_(a_data, b_data, out_data, alpha);
      return;
    }
    auto multiply = [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const auto [a_off, b_off] = walk_.offsets(i);
        gemm_(a_data + a_off, b_data + b_off, out_data + i * m_ * n_, alpha);
      }
    };
    // A kernel that spreads itself over the cores runs matrix after matrix; single-threaded
    // ones (small libxsmm kernels) share the matrices out over the pool.
    if (gemm_.spreads_itself())
      multiply(0, walk_.count);
    else
      parallel_for(walk_.count, grain_for(m_ * n_ * k_), multiply);
  }

 private:
  Gemm<T> choose(const ArrayRef& a, const ArrayRef& b, bool accumulate, bool scaled) {
    constexpr std::int64_t blas_max = INT_MAX;
    if (m_ > blas_max || n_ > blas_max || k_ > blas_max)
      fail("matmul", "[{},{}] x [{},{}] exceeds the BLAS dimension limit {}", m_, k_, k_, n_,
           blas_max);
    // 2-d operands may be strided (see matmul_reads_in_place): rows apart by a leading dim, or
    // for a, a transposed matrix (a backward pass's x^T), read by the kernel without a copy.
    const int lda = static_cast<int>(leading_dim(a, k_));
    const int ldb = static_cast<int>(leading_dim(b, n_));  // transposed: B^T's row stride
    const bool trans_a = a.shape.size() == 2 && !is_row_major(a);
    const bool trans_b = b.shape.size() == 2 && !is_row_major(b);
    const auto n = static_cast<int>(n_), k = static_cast<int>(k_);
    // Matrices sharing one b with a's matrices back to back are one [count*m, k] x [k, n] (a
    // scan's input projection computed for all steps at once, lib/jit/loop_hoisting.cpp).
    merged_ = !trans_a && walk_.count > 1 && walk_.b_shared() && walk_.a_dense(m_ * k_) &&
              walk_.count * m_ <= blas_max;
    const std::int64_t rows = merged_ ? walk_.count * m_ : m_;
    GemmShape shape{static_cast<int>(rows), n, k, trans_a, lda, ldb, accumulate};
    shape.trans_b = trans_b;
    shape.scaled = scaled;
    return Gemm<T>::planned(shape);
  }

  BatchWalk walk_;
  std::int64_t m_, n_, k_;
  bool merged_ = false;
  Gemm<T> gemm_;
};

/// Integer product in i-k-j order; arithmetic in the unsigned type so overflow wraps.
template <class T>
void matmul_integer(const ArrayRef& a, const ArrayRef& b, const ArrayRef& out,
                    const BatchWalk& walk, std::int64_t m, std::int64_t n, std::int64_t k) {
  using U = std::make_unsigned_t<T>;
  const T* a_data = a.ptr<const T>();
  const T* b_data = b.ptr<const T>();
  T* out_data = out.ptr<T>();
  parallel_for(walk.count * m, grain_for(n * k), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t index = row / m, i = row % m;
      const auto [a_off, b_off] = walk.offsets(index);
      const T* a_row = a_data + a_off + i * k;
      const T* b_mat = b_data + b_off;
      U* c_row = reinterpret_cast<U*>(out_data + row * n);
      std::fill(c_row, c_row + n, U{0});
      for (std::int64_t p = 0; p < k; ++p) {
        const U a_ip = static_cast<U>(a_row[p]);
        const U* b_row = reinterpret_cast<const U*>(b_mat + p * n);
        for (std::int64_t j = 0; j < n; ++j) c_row[j] = static_cast<U>(c_row[j] + a_ip * b_row[j]);
      }
    }
  });
}

}  // namespace

void run_linalg(const KernelCall& call) {
  if (call.prim != Prim::matmul) fail(name(call.prim), "no linear-algebra kernel");
  const ArrayRef& a = call.inputs[0];
  const ArrayRef& b = call.inputs[1];
  const ArrayRef& out = call.out;
  const std::int64_t m = a.shape[a.shape.size() - 2];
  const std::int64_t k = a.shape.back();
  const std::int64_t n = b.shape.back();
  if (out.numel() == 0) return;
  if (k == 0) {
    std::memset(out.data, 0, static_cast<std::size_t>(out.numel()) * dtype_size(out.dtype));
    return;
  }
  switch (out.dtype) {
    case DType::f32:
      FloatMatmul<float>(a, b, out)(a.ptr<const float>(), b.ptr<const float>(), out.ptr<float>());
      break;
    case DType::f64:
      FloatMatmul<double>(a, b, out)(a.ptr<const double>(), b.ptr<const double>(),
                                     out.ptr<double>());
      break;
    case DType::i32:
      matmul_integer<std::int32_t>(a, b, out, BatchWalk(a, b, out), m, n, k);
      break;
    case DType::i64:
      matmul_integer<std::int64_t>(a, b, out, BatchWalk(a, b, out), m, n, k);
      break;
    default:
      fail("matmul", "{} operands are not supported", dtype_name(out.dtype));
      break;
  }
}

struct MatmulPlan {
  std::variant<FloatMatmul<float>, FloatMatmul<double>> product;
};

std::shared_ptr<const MatmulPlan> plan_matmul(const ArrayRef& a, const ArrayRef& b,
                                              const ArrayRef& out, bool accumulate, bool scaled) {
  if (out.numel() == 0 || a.shape.back() == 0) return nullptr;
  if (out.dtype == DType::f32)
    return std::make_shared<const MatmulPlan>(
        MatmulPlan{FloatMatmul<float>(a, b, out, accumulate, scaled)});
  if (out.dtype == DType::f64)
    return std::make_shared<const MatmulPlan>(
        MatmulPlan{FloatMatmul<double>(a, b, out, accumulate, scaled)});
  return nullptr;
}

bool planned_on_library(const MatmulPlan& plan) {
  return std::visit([](const auto& product) { return product.on_library(); }, plan.product);
}

void run_planned_matmul(const MatmulPlan& plan, const void* a, const void* b, void* out,
                        double alpha) {
  std::visit(
      [&](const auto& product) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(product.element())>>;
        product(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out),
                static_cast<T>(alpha));
      },
      plan.product);
}

}  // namespace kiln::detail

// Matrix product kernels: libxsmm JIT kernels for small f32/f64 problems, OpenBLAS for
// large ones, a wrapping i-k-j loop for integers. The contract is documented in
// lib/ops/matmul.cpp.
#include <cblas.h>
#include <libxsmm.h>

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
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"

namespace kiln::detail {

namespace {

/// Problems with m*n*k up to this many multiply-adds go to libxsmm. Measured on the 2-core
/// AVX2 machine (docs/performance.md): libxsmm beats OpenBLAS on every shape up to 128^3
/// (also skewed ones such as 8x512x512) and they meet near 192^3.
constexpr std::int64_t small_gemm_limit = 128 * 128 * 128;

/// Rows per libxsmm call when a tall product runs in blocks (FloatMatmul): libxsmm ran 16- to
/// 512-row blocks of [1600,64] x [64,64] equally fast here, and smaller blocks share better
/// between the cores.
constexpr std::int64_t max_block_rows = 256;

/// Multiply-adds above which a product run in blocks of rows spreads the blocks over the cores.
constexpr std::int64_t spread_work = std::int64_t{1} << 24;

/// Multiply-adds a parallel_for chunk should hold at least (smaller work stays inline).
constexpr std::int64_t parallel_chunk_work = 1 << 17;

std::int64_t grain_for(std::int64_t work_per_item) {
  return std::max<std::int64_t>(1, parallel_chunk_work / std::max<std::int64_t>(1, work_per_item));
}

/// One GEMM problem, row-major C[m,n] = A[m,k] B[k,n]: A's rows lda elements apart (or, when
/// trans_a, A stored as [k,m] with rows lda apart), B's rows ldb apart, C tight.
struct GemmShape {
  int m, n, k;
  bool trans_a;
  int lda, ldb;
  bool accumulate = false;  // C += A B instead of C = A B
  bool operator==(const GemmShape&) const = default;
};

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

/// libxsmm generates code for the CPU it runs on; when KILN_SIMD lowers kiln's level, it
/// generates for that level instead (unless LIBXSMM_TARGET chose a target): AVX2 for avx2, and
/// nothing for sse2, where every product goes to OpenBLAS (OpenBLAS chooses its kernels when
/// it is loaded, from OPENBLAS_CORETYPE or the CPU).
void ensure_xsmm_initialized() {
  static const bool initialized = [] {
    libxsmm_init();
    if (std::getenv("LIBXSMM_TARGET") == nullptr && simd_level() != cpu_simd_level()) {
      const int cap = simd_level() == SimdLevel::sse2 ? LIBXSMM_X86_GENERIC : LIBXSMM_X86_AVX2;
      if (libxsmm_get_target_archid() > cap) libxsmm_set_target_archid(cap);
    }
    return true;
  }();
  (void)initialized;
}

template <class T>
struct XsmmTraits;
template <>
struct XsmmTraits<float> {
  using Kernel = libxsmm_smmfunction;
  /// Column-major C[m,n] = A[m,k] B[k,n] (leading dims lda, ldb; C tight), or A B^T with B
  /// stored as [n,k] (trans_b).
  static Kernel dispatch(int m, int n, int k, int lda, int ldb, bool trans_b, bool accumulate) {
    const float alpha = 1, beta = accumulate ? 1 : 0;
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    const int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
    return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &m, &alpha, &beta, &flags, &prefetch);
  }
};
template <>
struct XsmmTraits<double> {
  using Kernel = libxsmm_dmmfunction;
  static Kernel dispatch(int m, int n, int k, int lda, int ldb, bool trans_b, bool accumulate) {
    const double alpha = 1, beta = accumulate ? 1 : 0;
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    const int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
    return libxsmm_dmmdispatch(m, n, k, &lda, &ldb, &m, &alpha, &beta, &flags, &prefetch);
  }
};

/// Thread-safe cache of libxsmm kernels for row-major C[m,n] (+)= A[m,k] B[k,n], one per
/// GemmShape (leading dims, A transposed or not, accumulate or not). A null entry records that
/// libxsmm offers no kernel.
template <class T>
class XsmmKernelCache {
 public:
  using Kernel = typename XsmmTraits<T>::Kernel;

  static XsmmKernelCache& instance() {
    static XsmmKernelCache cache;
    return cache;
  }

  Kernel get(const GemmShape& key) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
    }
    ensure_xsmm_initialized();
    std::unique_lock lock(mutex_);
    if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
    // libxsmm is column-major: the row-major product is C^T[n,m] = B^T[n,k] A^T[k,m]; a
    // transposed A is libxsmm's transposed second operand.
    Kernel kernel =
        XsmmTraits<T>::dispatch(key.n, key.m, key.k, key.ldb, key.lda, key.trans_a, key.accumulate);
    kernels_.emplace(key, kernel);
    return kernel;
  }

 private:
  struct KeyHash {
    std::size_t operator()(const GemmShape& key) const {
      std::size_t h = static_cast<std::size_t>(static_cast<unsigned>(key.m));
      h = h * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(key.n);
      h = h * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(key.k);
      h = h * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(key.lda);
      h = h * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(key.ldb);
      h = h * 4 + (key.trans_a ? 1 : 0) + (key.accumulate ? 2 : 0);
      return h ^ (h >> 29);
    }
  };

  std::shared_mutex mutex_;
  std::unordered_map<GemmShape, Kernel, KeyHash> kernels_;
};

/// Row-major C = A B through OpenBLAS (both cores).
void blas_gemm(const float* a, const float* b, float* c, const GemmShape& g) {
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, g.m, g.n, g.k,
              1.0f, a, g.lda, b, g.ldb, g.accumulate ? 1.0f : 0.0f, c, g.n);
}
void blas_gemm(const double* a, const double* b, double* c, const GemmShape& g) {
  cblas_dgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, g.m, g.n, g.k,
              1.0, a, g.lda, b, g.ldb, g.accumulate ? 1.0 : 0.0, c, g.n);
}

}  // namespace

const char* matmul_jit_target() {
  ensure_xsmm_initialized();
  return libxsmm_get_target_arch();
}

void transpose_matrix(void* out, const void* in, std::size_t element_size, std::int64_t rows,
                      std::int64_t cols, std::int64_t in_stride) {
  ensure_xsmm_initialized();
  // libxsmm is column-major: `in` is a [rows x cols] column-major matrix with leading dim
  // in_stride, `out` its [cols x rows] transpose with leading dim cols.
  libxsmm_otrans(out, in, static_cast<unsigned int>(element_size),
                 static_cast<libxsmm_blasint>(rows), static_cast<libxsmm_blasint>(cols),
                 static_cast<libxsmm_blasint>(in_stride), static_cast<libxsmm_blasint>(cols));
}

bool matmul_reads_in_place(const ArrayRef& x, int which) {
  if (x.dtype != DType::f32 && x.dtype != DType::f64) return false;
  if (x.shape.size() != 2 || x.shape[0] <= 1 || x.shape[1] <= 1) return false;
  const bool rows_apart = x.strides[1] == 1 && x.strides[0] >= x.shape[1];
  const bool transposed = which == 0 && x.strides[0] == 1 && x.strides[1] >= x.shape[0];
  return rows_apart || transposed;
}

namespace {

/// m*n*k <= small_gemm_limit, without overflowing (every dim is at least 1).
bool is_small(std::int64_t m, std::int64_t n, std::int64_t k) {
  return n <= small_gemm_limit && k <= small_gemm_limit && m <= small_gemm_limit / (n * k);
}

/// One GEMM kernel for a fixed (m, n, k, A transposed or not): libxsmm when small and
/// available, else BLAS.
template <class T>
class FloatGemm {
 public:
  explicit FloatGemm(const GemmShape& shape) : shape_(shape) {
    if (is_small(shape.m, shape.n, shape.k)) xsmm_ = XsmmKernelCache<T>::instance().get(shape);
  }

  bool uses_blas() const { return xsmm_ == nullptr; }

  void operator()(const T* a, const T* b, T* c) const {
    if (xsmm_ != nullptr)
      xsmm_(b, a, c);
    else
      blas_gemm(a, b, c, shape_);
  }

 private:
  GemmShape shape_;
  typename XsmmTraits<T>::Kernel xsmm_ = nullptr;
};

/// The f32/f64 product for fixed operand layouts: the GEMM kernel (libxsmm or BLAS) and the walk
/// over batch matrices, chosen once. Eager calls build one per call; a compiled plan keeps one
/// per matmul step (see plan_matmul).
template <class T>
class FloatMatmul {
 public:
  FloatMatmul(const ArrayRef& a, const ArrayRef& b, const ArrayRef& out, bool accumulate = false)
      : walk_(a, b, out),
        m_(a.shape[a.shape.size() - 2]),
        n_(b.shape.back()),
        k_(a.shape.back()),
        gemm_(choose(a, b, accumulate)) {}

  /// For type deduction only (std::visit over the dtypes).
  static T* element() { return nullptr; }

  void operator()(const T* a_data, const T* b_data, T* out_data) const {
    if (merged_ && block_rows_ > 0) {
      const std::int64_t rows = walk_.count * m_;
      const std::int64_t blocks = (rows + block_rows_ - 1) / block_rows_;
      // On one thread up to spread_work: the per-step products it replaces ran on one, and
      // waiting for a pool thread that another process keeps off its core cost more than the
      // second core gave (an RNN's [1600,64] x [64,64] on the busy 2-core VM: 2.4x the median
      // call time of the forward and backward pass).
      const std::int64_t grain =
          rows * n_ * k_ < spread_work ? blocks : grain_for(block_rows_ * n_ * k_);
      parallel_for(blocks, grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const std::int64_t first = i * block_rows_;
          const FloatGemm<T>& gemm = first + block_rows_ <= rows ? gemm_ : *tail_;
          gemm(a_data + first * k_, b_data, out_data + first * n_);
        }
      });
      return;
    }
    if (merged_) {
      gemm_(a_data, b_data, out_data);
      return;
    }
    auto multiply = [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const auto [a_off, b_off] = walk_.offsets(i);
        gemm_(a_data + a_off, b_data + b_off, out_data + i * m_ * n_);
      }
    };
    // OpenBLAS spreads each GEMM over the cores itself; libxsmm kernels are single-threaded.
    if (gemm_.uses_blas() || walk_.count == 1)
      multiply(0, walk_.count);
    else
      parallel_for(walk_.count, grain_for(m_ * n_ * k_), multiply);
  }

 private:
  FloatGemm<T> choose(const ArrayRef& a, const ArrayRef& b, bool accumulate) {
    constexpr std::int64_t blas_max = INT_MAX;
    if (m_ > blas_max || n_ > blas_max || k_ > blas_max)
      fail("matmul", "[{},{}] x [{},{}] exceeds the BLAS dimension limit {}", m_, k_, k_, n_,
           blas_max);
    // 2-d operands may be strided (see matmul_reads_in_place): rows apart by a leading dim, or
    // for a, a transposed matrix (a backward pass's x^T), read by the kernel without a copy.
    const int lda = static_cast<int>(leading_dim(a, k_));
    const int ldb = static_cast<int>(leading_dim(b, n_));
    const bool trans_a = a.shape.size() == 2 && !is_row_major(a);
    const auto n = static_cast<int>(n_), k = static_cast<int>(k_);
    // Matrices sharing one b with a's matrices back to back are one [count*m, k] x [k, n].
    merged_ = !trans_a && walk_.count > 1 && walk_.b_shared() && walk_.a_dense(m_ * k_) &&
              walk_.count * m_ <= blas_max;
    const std::int64_t rows = merged_ ? walk_.count * m_ : m_;
    // Too many rows for libxsmm while each matrix alone is small and b stays in cache (a scan's
    // input projection computed for all steps at once, lib/jit/loop_hoisting.cpp): libxsmm
    // kernels over blocks of at least 64 rows instead of one BLAS call, which was slower on such
    // tall, narrow products ([1600,64] x [64,64]: 114 us against 137 us on one core).
    if (merged_ && !is_small(rows, n_, k_) && is_small(m_, n_, k_) &&
        n_ * k_ <= small_gemm_limit / 64) {
      block_rows_ = std::max(m_, std::min(max_block_rows, small_gemm_limit / (n_ * k_)));
      if (const std::int64_t tail = rows % block_rows_; tail > 0)
        tail_.emplace(GemmShape{static_cast<int>(tail), n, k, false, lda, ldb, accumulate});
      return FloatGemm<T>(
          GemmShape{static_cast<int>(block_rows_), n, k, false, lda, ldb, accumulate});
    }
    return FloatGemm<T>(GemmShape{static_cast<int>(rows), n, k, trans_a, lda, ldb, accumulate});
  }

  BatchWalk walk_;
  std::int64_t m_, n_, k_;
  bool merged_ = false;
  std::int64_t block_rows_ = 0;       // merged products run in blocks of rows (0: whole)
  std::optional<FloatGemm<T>> tail_;  // the last, shorter block
  FloatGemm<T> gemm_;
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
    case DType::boolean:
      fail("matmul", "bool operands are not supported");
      break;
  }
}

struct MatmulPlan {
  std::variant<FloatMatmul<float>, FloatMatmul<double>> product;
};

std::shared_ptr<const MatmulPlan> plan_matmul(const ArrayRef& a, const ArrayRef& b,
                                              const ArrayRef& out, bool accumulate) {
  if (out.numel() == 0 || a.shape.back() == 0) return nullptr;
  if (out.dtype == DType::f32)
    return std::make_shared<const MatmulPlan>(
        MatmulPlan{FloatMatmul<float>(a, b, out, accumulate)});
  if (out.dtype == DType::f64)
    return std::make_shared<const MatmulPlan>(
        MatmulPlan{FloatMatmul<double>(a, b, out, accumulate)});
  return nullptr;
}

void run_planned_matmul(const MatmulPlan& plan, const void* a, const void* b, void* out) {
  std::visit(
      [&](const auto& product) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(product.element())>>;
        product(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
      },
      plan.product);
}

}  // namespace kiln::detail

#pragma once
// Dense GEMM on three libraries, one chosen per problem shape (lib/kernels/gemm.cpp):
// libxsmm's JIT kernels, alone for small problems and over tiles of C for mid-sized ones;
// oneDNN's sgemm (AVX-512 where the CPU has it, chosen by oneDNN at run time) for large f32
// problems; OpenBLAS otherwise. Every backend runs single-threaded calls on tiles of C that
// kiln's thread pool shares out, so KILN_NUM_THREADS governs all of them. The choice table and the
// calibration that set it are in docs/performance.md ("GEMM backends").

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::detail {

/// One GEMM problem: row-major C[m,n] (+)= op(A) op(B). A's rows are lda elements apart (or,
/// with trans_a, A is stored as [k,m] with rows lda apart), B's rows ldb apart (or, with
/// trans_b, B is stored as [n,k] with rows ldb apart), C's rows ldc apart.
struct GemmShape {
  int m, n, k;
  bool trans_a;
  int lda, ldb;
  bool accumulate = false;  // C += A B instead of C = A B
  int ldc = 0;              // 0: n (C tight)
  bool trans_b = false;     // only oneDNN and OpenBLAS read a transposed B (libxsmm cannot)
  /// C (+)= alpha op(A) op(B) with alpha given per call (an SGD update folded into its weight
  /// gradient's product): only oneDNN and OpenBLAS take an alpha, so never libxsmm.
  bool scaled = false;
  bool operator==(const GemmShape&) const = default;
  int c_stride() const { return ldc > 0 ? ldc : n; }
};

enum class GemmBackend : std::uint8_t {
  automatic,  // chosen per shape (the table in gemm.cpp)
  xsmm,       // libxsmm kernels, over tiles of C on kiln's pool when the problem is large
  dnnl,       // oneDNN dnnl_sgemm (f32 only; OpenMP threads)
  openblas,   // OpenBLAS cblas_?gemm (its own threads)
};

/// "auto", "xsmm", "dnnl", "openblas".
const char* gemm_backend_name(GemmBackend b);

/// The backend forced for every product (automatic unless set): the environment variable
/// KILN_GEMM=auto|xsmm|dnnl|openblas read on first use, or set_gemm_backend. A forced backend
/// that cannot run a product (dnnl for f64, xsmm at KILN_SIMD=sse2, a library not built in)
/// gives way to the automatic choice for it.
GemmBackend forced_gemm_backend();
/// Forces a backend for products planned from now on (tests and calibration benchmarks).
void set_gemm_backend(GemmBackend b);
/// Where libxsmm generates code, whether small f32 products run with C transposed
/// (xsmm_transposed_wins in gemm.cpp): by the CPU's rule (-1, the default), never (0), or
/// wherever the path can run (1: not for an accumulating product or a transposed B). For
/// calibration (kiln_bench_gemm_calibrate --transposed) and tests; products planned from then
/// on follow it.
void set_c_transposed(int mode);
int c_transposed_mode();
/// The backends this build and CPU can run for the dtype's products (f32: sizeof 4).
std::vector<GemmBackend> available_gemm_backends(std::size_t element_size);

/// A GEMM kernel for one fixed GemmShape and element type (float or double), chosen once.
template <class T>
class Gemm {
 public:
  explicit Gemm(const GemmShape& shape);

  /// Gemm(shape), from a per-thread cache of the last 8 shapes planned (with the backend and the
  /// C-transposed mode set then): eager products of one shape in a loop choose the backend, cut the
  /// tiles and look up libxsmm's kernels once, not on every call.
  static Gemm planned(const GemmShape& shape);

  GemmBackend backend() const { return backend_; }
  /// Whether the product runs on one libxsmm kernel with C transposed (xsmm_transposed_wins).
  bool c_transposed() const { return c_transposed_; }
  /// Whether the product spreads itself over the pool (callers then do not run several at once
  /// on it).
  bool spreads_itself() const { return grain_ < tiles_; }

  /// C (+)= alpha A B; alpha other than 1 only for a product planned `scaled`.
  void operator()(const T* a, const T* b, T* c, T alpha = 1) const;

  /// "xsmm: 4 tiles of 64x256 on 2 threads": the backend and how C is cut.
  std::string describe() const;

 private:
  using Kernel = void (*)();  // a libxsmm smm/dmm function, cast back to its type to be called
  GemmShape shape_;
  GemmBackend backend_ = GemmBackend::openblas;
  // C in tiles of tile_m x tile_n (edge tiles smaller), row tiles in column panels, shared out
  // over kiln's pool; each tile is one single-threaded call of the backend.
  int tile_m_ = 0, tile_n_ = 0;
  std::int64_t tiles_ = 0, row_tiles_ = 0;
  std::int64_t grain_ = 1;  // tiles per pool chunk at least (all of them: run inline)
  Kernel full_ = nullptr, right_ = nullptr, bottom_ = nullptr, corner_ = nullptr;
  // A small product run as C^T on one libxsmm kernel (full_), between two transposes (gemm.cpp,
  // xsmm_transposed_wins), each a libxsmm transpose kernel looked up with the plan (null: none
  // generated, or none needed for an A stored transposed; libxsmm_otrans then runs it).
  bool c_transposed_ = false;
  Kernel transpose_a_ = nullptr, transpose_c_ = nullptr;

  int threads_for() const;
  void set_tiles(int tile_m, int tile_n, int threads);
  bool plan_xsmm();
  void plan_library_tiles();
  void run_tiles(const T* a, const T* b, T* c, std::int64_t begin, std::int64_t end, T alpha) const;
  void run_transposed(const T* a, const T* b, T* c) const;
};

}  // namespace kiln::detail

// GEMM backends and the choice between them (see gemm.hpp and docs/performance.md, "GEMM
// backends").
#include "kernels/gemm.hpp"

#include <fmt/format.h>

#include <cblas.h>
#include <libxsmm.h>
#include <libxsmm_generator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#if KILN_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include "core/fail.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/parallel.hpp"

namespace kiln::detail {

namespace {

/// Problems with m*n*k up to this many multiply-adds run as one libxsmm kernel, on one thread.
/// libxsmm beat OpenBLAS on every shape up to 128^3 (also skewed ones such as 8x512x512) on
/// both machines measured.
constexpr std::int64_t small_gemm_limit = 128 * 128 * 128;

/// Multiply-adds below which a tiled product stays on the calling thread: waiting for a pool
/// thread that another process keeps off its core cost more than the second core gave on the
/// busy 2-core VM (an RNN's [1600,64] x [64,64]: 2.4x the median call time).
constexpr std::int64_t spread_work = std::int64_t{1} << 23;

/// Tile limits for the xsmm backend: a B panel of k x tile_n floats should stay in a core's L2
/// while the row tiles stream past it, and a row tile is short enough that its C block stays
/// in L1/L2 between the kernel's passes.
constexpr std::int64_t panel_bytes = 384 << 10;
constexpr int max_tile_m = 128;
constexpr int min_tile_n = 64;

bool is_small(std::int64_t m, std::int64_t n, std::int64_t k) {
  return n <= small_gemm_limit && k <= small_gemm_limit && m <= small_gemm_limit / (n * k);
}

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

bool xsmm_runs() { return simd_level() != SimdLevel::sse2; }

/// Whether libxsmm generates AVX-512 code (else AVX2: xsmm_runs()).
bool xsmm_avx512() {
  ensure_xsmm_initialized();
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512;
}

/// The CPU models the GEMM rules tell apart, read once from GCC's CPU detection (the CPUID
/// vendor, family and model): Intel CPUs, whose oneDNN products beat libxsmm's tiles where the
/// AMD calibration gave them to the tiles (choose); AMD Zen 2 (family 17h, models from 30h),
/// where oneDNN's AVX2 kernels lead OpenBLAS's on the largest products (choose_avx2_f32).
struct CpuModel {
  bool intel = false;
  bool zen2 = false;
};

const CpuModel& cpu_model() {
  static const CpuModel model = [] {
    CpuModel m;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    m.intel = __builtin_cpu_is("intel") != 0;
    m.zen2 = __builtin_cpu_is("znver2") != 0;
#endif
    return m;
  }();
  return model;
}

/// A small f32 product that OpenBLAS runs faster than libxsmm with AVX-512 code (work enough
/// for OpenBLAS's call to pay; the smallest stay on libxsmm, 32x20x20: 49 against 38 GFLOP/s):
/// a C whose rows (libxsmm's columns: it computes C^T = B^T A^T) fill their last vector by three
/// quarters or less: libxsmm's masked last vector wastes a quarter or more of every multiply-add
/// (32x20x80: OpenBLAS 82 against 58, 32x36x80: 91 against 78, 128x20x128: 103 against 68),
/// while a C of one vector or less stays (32x12x80: 57 against 73). On Intel CPUs the work from
/// which OpenBLAS pays is larger: on the Xeon, once libxsmm's kernels were followed by a
/// vzeroupper (Gemm::run_tiles), 32x20x80 ran at 95 against 88 and 64x20x64 at 96 against 95,
/// while 128x20x128 stayed OpenBLAS's (111 against 103). The tables are in
/// docs/performance.md, "GEMM backends".
bool openblas_beats_xsmm_avx512(const GemmShape& s) {
  const int from = cpu_model().intel ? 17 : 15;  // log2 of the multiply-adds
  if (std::int64_t{s.m} * s.n * s.k < (std::int64_t{1} << from)) return false;
  constexpr int w = 16;  // f32 lanes of a 64-byte vector
  if (s.n <= w) return false;
  const int padded = (s.n + w - 1) / w * w;
  return 4 * s.n <= 3 * padded;
}

std::atomic<int> transposed_mode{-1};  // set_c_transposed

/// A small f32 product that libxsmm runs faster with C transposed. libxsmm is column-major and
/// computes C^T = B^T A^T: C's rows are its vectors, so a C whose rows end in a part-filled 8-float
/// vector wastes multiply-adds on every one, while its columns may fill whole vectors. The kernel
/// then computes C^T column-major (C's columns as vectors) from A^T, and C^T is transposed back;
/// both transposes are libxsmm's. Calibrated on a Zen 3 (docs/performance.md, "GEMM backends"; us
/// per product, transposes included, against the kernel on C's rows and oneDNN): 32x20x80 1.6
/// against 2.1 and 2.0; 64x20x64 2.5 against 3.3 and 2.9; 32x12x80 1.2 against 1.9 and 1.3. It lost
/// with more columns (32x50x80: 4.3 against oneDNN's 3.4), longer contractions (32x20x256: 5.6
/// against 4.0; libxsmm's transposes of longer rows ran far slower) and more rows (128x20x64: a
/// tie).
///
/// On a Zen 2, with the transposes' kernels looked up once per plan (plan_xsmm), three sweeps
/// (eager products of 192 and 150 shapes, m 16-128, n 4-60, k 16-256, then the first 192
/// through functions by kiln_bench_gemm_calibrate --transposed; docs/performance.md, "GEMM
/// backends") drew another rule: A of at most 8192 floats (32 KB) and K <= 128, with C's rows
/// not already whole vectors beyond the first. Over the sweeps the chosen path's time was
/// 1.025, 1.010 and 1.030 of the faster one's (geometric means), against 1.088, 1.101 and 1.104
/// for the Zen 3 rule, whose worst misses were 2.1x and 4.0x (128x4x32, 24x6x100).
///
/// With AVX-512 code (a Zen 4, two sweeps of kiln_bench_gemm_calibrate --transposed against the
/// rule's other choices, OpenBLAS or libxsmm on C's rows) only C of at most 8 columns gains, a
/// 16-float vector being twice as wide as those rows while C^T's columns fill it: 16x4x80
/// 0.27-0.29 against 0.48 us, 48x4x128 1.03-1.07 against 1.82-1.83, 32x8x80 0.62-0.70 against
/// 0.83-0.86. Wider C gained nothing steady (32x20x80 1.22-1.25 against 1.27-1.35 us, and its
/// neighbours lost as often as they won).
///
/// On the Intel Xeon (AVX-512, two sweeps of the same calibration, then the shapes between its
/// grid points through a cached function) C rows of one vector and at most 4 floats more (17
/// to 20 columns: the second vector three quarters empty) gain too, where C^T's columns are
/// whole vectors (m a multiple of 16) and A is small: 32x20x80 1.07 against 1.16 us, 16x20x128
/// 0.88 against 1.00, 48x20x80 1.61 against 1.75, 32x17x80 0.99 against 1.22, 16x18x64 0.48
/// against 0.62. They lost with a larger A (48x20x128 2.84 against 2.44, 64x20x128 3.70 against
/// 3.31; 64x20x80 a tie), with m not a multiple of 16 (24x20x80 1.04 against 0.94, 40x20x64 1.28
/// against 1.17), and with more columns (32x28x80 1.38 against 1.15, 32x36x80 1.75 against
/// 1.69).
bool xsmm_transposed_wins(const GemmShape& s) {
  if (s.accumulate || s.trans_b) return false;
  if (const int mode = transposed_mode.load(std::memory_order_relaxed); mode >= 0) return mode == 1;
  if (s.m < 16 || s.m % 8 != 0 || s.k > 128) return false;
  if (xsmm_avx512()) {
    if (s.n <= 8) return true;
    return cpu_model().intel && s.n > 16 && s.n <= 20 && s.m % 16 == 0 && s.k >= 64 &&
           std::int64_t{s.m} * s.k <= 4096;
  }
  if (cpu_model().zen2) return std::int64_t{s.m} * s.k <= 8192 && (s.n % 8 != 0 || s.n <= 8);
  const std::int64_t work = std::int64_t{s.m} * s.n * s.k;
  return s.m <= 64 && s.n % 8 != 0 && s.n < 48 && work >= (std::int64_t{1} << 14);
}

/// The choice for an f32 product where libxsmm generates AVX2 code: a CPU without AVX-512, or
/// KILN_SIMD=avx2. From the calibration on an AMD Zen 3 (docs/performance.md, "GEMM backends",
/// the AVX2 table; three runs), where libxsmm's AVX2 kernels are fast only on small products
/// with whole vectors and on short contractions, and OpenBLAS leads the mid sizes that
/// libxsmm's tiles take on AVX-512:
/// - small: libxsmm when C's rows are whole 8-float vectors (64^3: 86 against oneDNN's 81 and
///   OpenBLAS's 47; 32x80x20: 63 against 54 and 32), when the product is tiny (32x20x20: 33
///   against 23) or when it runs faster transposed (xsmm_transposed_wins); else the library
///   (128x20x128: oneDNN 6.8 us against libxsmm's 14.8);
/// - a contraction four times longer than C's sides: the library (64x256x1024: oneDNN 117-139,
///   OpenBLAS 101-124, libxsmm 107-110);
/// - K <= 64: libxsmm tiles (a weight gradient over 64 rows, 1024x256x64: 130-155 against
///   125-130);
/// - K <= 128: the library (a projection over all steps, 3200x1024x128: oneDNN 148-158,
///   OpenBLAS 111-118, libxsmm 66-93);
/// - the rest: OpenBLAS (an LSTM step's half at hidden 512, 64x1024x512: 120 against 72-77;
///   Dense 1024 at batch 256: 130-163 against 52-78; 512^3: 138-162 against 112-123; the large
///   squares are ties with oneDNN on the Zen 3);
/// - except on a Zen 2, where every side of 1024 or more goes to oneDNN (1024^3: 157-163
///   against OpenBLAS's 139-152; 4096x4096x1024: 160-169 against 146-160; 2048^3 147-171
///   against 143-165), while 512^3 (OpenBLAS 162-166 against 144-151) and a Dense 1024 at batch
///   256 (130-146 against oneDNN's 61-62) stay OpenBLAS's; and on a Zen 2 a product that reads
///   A transposed (a weight gradient x^T dy) from sides of 512 goes to oneDNN, which runs it
///   steadily where OpenBLAS swings between two speeds (Dense 1024's, 1024x1024x256: oneDNN
///   135-149 in five calibration runs, OpenBLAS 94-139; Dense 512's, 512x512x256: 131-142
///   against 100-150 in three).
GemmBackend choose_avx2_f32(const GemmShape& s, GemmBackend library) {
  const std::int64_t work = std::int64_t{s.m} * s.n * s.k;
  if (is_small(s.m, s.n, s.k))
    return s.n % 8 == 0 || work < (std::int64_t{1} << 14) || xsmm_transposed_wins(s)
               ? GemmBackend::xsmm
               : library;
  if (s.k >= 4 * std::max(s.m, s.n)) return library;
  if (cpu_model().zen2 &&
      ((s.m >= 1024 && s.n >= 1024 && s.k >= 1024) || (s.trans_a && s.m >= 512 && s.n >= 512)))
    return library;
  if (s.k <= 64) return GemmBackend::xsmm;
  if (s.k <= 128) return library;
  return GemmBackend::openblas;
}

/// The choice for an f32 product with a transposed B (an input gradient dy W^T, read in place;
/// libxsmm cannot) where libxsmm generates AVX2 code: OpenBLAS for long contractions over many
/// rows (the MLP's 256x1024x1024: 135-154 GFLOP/s against oneDNN's 117-141 in four runs on the
/// Zen 3; 256x512x1024 and 512x1024x1024 alike), else oneDNN, which led the LSTM-step shapes
/// (64x1024x256: 137-143 against 119-121; 64x2048x512, 128x512x512). On a Zen 2 the MLP's
/// shape is a tie (oneDNN 134-153, OpenBLAS 129-155 in five calibration runs).
GemmBackend choose_avx2_f32_bt(const GemmShape& s, GemmBackend library) {
  return s.m >= 256 && s.k >= 1024 ? GemmBackend::openblas : library;
}

/// kiln's pool is the only one that runs GEMM work: the libraries run single-threaded kernels
/// on tiles of C that the pool shares out (Gemm::plan_tiles). A library's own team waits at
/// barriers for a thread that another process may keep off its core (oneDNN's OpenMP team ran
/// a [64,256] x [256,1024] product at 4 GFLOP/s instead of 113 while a compile ran), where the
/// pool's caller runs a chunk itself instead of waiting; and two pools on two cores would
/// oversubscribe them.
void ensure_library_threads() {
  static const bool set = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)set;
}

/// libxsmm's generated kernels return with the upper halves of the vector registers in use (no
/// vzeroupper). On Intel CPUs every SSE instruction after that (kiln's baseline code, glibc's)
/// then waits on those halves: a planned 32x20x80 product took 1.30 us with its kernel's
/// 1.0, and 1.06-1.11 with this after each kernel. Only called where libxsmm runs (AVX2 or
/// AVX-512 code), so the instruction exists; this file is compiled for the baseline (SSE2), so
/// none of its own values lives in the upper halves it clears.
inline void clear_upper_state() {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("vzeroupper" ::: "memory");
#endif
}

template <class T>
struct XsmmTraits;
template <>
struct XsmmTraits<float> {
  using Kernel = libxsmm_smmfunction;
  static Kernel dispatch(int m, int n, int k, int lda, int ldb, int ldc, bool trans_b,
                         bool accumulate) {
    const float alpha = 1, beta = accumulate ? 1 : 0;
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    const int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
    return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  }
};
template <>
struct XsmmTraits<double> {
  using Kernel = libxsmm_dmmfunction;
  static Kernel dispatch(int m, int n, int k, int lda, int ldb, int ldc, bool trans_b,
                         bool accumulate) {
    const double alpha = 1, beta = accumulate ? 1 : 0;
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    const int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
    return libxsmm_dmmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  }
};

/// A libxsmm kernel's problem: the product, and whether the kernel computes it with C transposed.
struct XsmmKey {
  GemmShape shape;
  bool c_transposed = false;
  bool operator==(const XsmmKey&) const = default;
};

struct KeyHash {
  std::size_t operator()(const XsmmKey& key) const {
    const GemmShape& s = key.shape;
    std::size_t h = 0;
    for (int v : {s.m, s.n, s.k, s.lda, s.ldb, s.c_stride()})
      h = h * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(v);
    h = h * 16 + (s.trans_a ? 1 : 0) + (s.accumulate ? 2 : 0) + (s.trans_b ? 4 : 0) +
        (key.c_transposed ? 8 : 0);
    return h ^ (h >> 29);
  }
};

/// Thread-safe cache of libxsmm kernels for row-major C[m,n] (+)= op(A) B, one per GemmShape.
/// A null entry records that libxsmm offers no kernel.
template <class T>
class XsmmKernelCache {
 public:
  using Kernel = typename XsmmTraits<T>::Kernel;

  static XsmmKernelCache& instance() {
    static XsmmKernelCache cache;
    return cache;
  }

  /// The kernel for `shape`; with c_transposed, one that writes C^T column-major ([m,n], m
  /// apart) from A^T column-major (A itself when trans_a, else a copy m apart) and B read
  /// through libxsmm's transposed-B flag.
  Kernel get(GemmShape shape, bool c_transposed = false) {
    shape.ldc = shape.c_stride();
    const XsmmKey key{shape, c_transposed};
    {
      std::shared_lock lock(mutex_);
      if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
    }
    ensure_xsmm_initialized();
    std::unique_lock lock(mutex_);
    if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
    // libxsmm is column-major: the row-major product is C^T[n,m] = B^T[n,k] A^T[k,m]; a
    // transposed A is libxsmm's transposed second operand. Transposed, the column-major
    // product is C^T itself: [m,n] = A[m,k] op(B), B's rows being op(B)'s columns.
    Kernel kernel = c_transposed
                        ? XsmmTraits<T>::dispatch(shape.m, shape.n, shape.k,
                                                  shape.trans_a ? shape.lda : shape.m, shape.ldb,
                                                  shape.m, true, false)
                        : XsmmTraits<T>::dispatch(shape.n, shape.m, shape.k, shape.ldb, shape.lda,
                                                  shape.ldc, shape.trans_a, shape.accumulate);
    kernels_.emplace(key, kernel);
    return kernel;
  }

 private:
  std::shared_mutex mutex_;
  std::unordered_map<XsmmKey, Kernel, KeyHash> kernels_;
};

std::atomic<int> forced{-1};  // -1: not read yet

GemmBackend backend_from_environment() {
  const char* env = std::getenv("KILN_GEMM");
  if (env == nullptr) return GemmBackend::automatic;
  const std::string_view v(env);
  for (GemmBackend b :
       {GemmBackend::automatic, GemmBackend::xsmm, GemmBackend::dnnl, GemmBackend::openblas})
    if (v == gemm_backend_name(b)) return b;
  return GemmBackend::automatic;  // unknown values are ignored, like KILN_SIMD's
}

bool can_run(GemmBackend b, std::size_t element_size) {
  switch (b) {
    case GemmBackend::xsmm:
      return xsmm_runs();
    case GemmBackend::dnnl:
      return KILN_HAVE_DNNL && element_size == sizeof(float);
    case GemmBackend::openblas:
      return true;
    case GemmBackend::automatic:
      return false;
  }
  return false;
}

/// The automatic choice, from the calibration in docs/performance.md ("GEMM backends"). Where
/// libxsmm generates AVX-512 code (and for f64): libxsmm up to mid sizes (alone when small,
/// tiled on the pool above), where it ran at the core's peak while the libraries' blocking and
/// threading cost more than they gave; for large problems oneDNN for f32, OpenBLAS for f64; on
/// Intel CPUs f32 contractions of 256 and more go to the library too; small f32 products that
/// run faster with C transposed (xsmm_transposed_wins) on libxsmm that way. f32 where it
/// generates AVX2 code: choose_avx2_f32.
GemmBackend choose(const GemmShape& s, std::size_t element_size) {
  const bool dnnl = can_run(GemmBackend::dnnl, element_size);
  const GemmBackend library = dnnl ? GemmBackend::dnnl : GemmBackend::openblas;
  if (!xsmm_runs()) return library;
  if (s.trans_b)
    return element_size == sizeof(float) && !xsmm_avx512() ? choose_avx2_f32_bt(s, library)
                                                           : library;
  // A C narrower than a vector's worth of columns, unless tiny (a Dense(10) over 1024 features,
  // batch 256, which the batch split runs as two 128-row halves: libxsmm 31 GFLOP/s, oneDNN 88,
  // OpenBLAS 67).
  const std::int64_t work = std::int64_t{s.m} * s.n * s.k;
  if (s.n < 16 && work >= (std::int64_t{1} << 16)) return library;
  const bool f32 = element_size == sizeof(float);
  if (f32 && !xsmm_avx512()) return choose_avx2_f32(s, library);
  if (is_small(s.m, s.n, s.k)) {
    if (f32 && xsmm_transposed_wins(s)) return GemmBackend::xsmm;
    return f32 && openblas_beats_xsmm_avx512(s) ? GemmBackend::openblas : GemmBackend::xsmm;
  }
  // Long contractions (64x256x1024: oneDNN 193 against libxsmm's 113; 256x1024x1024: 184
  // against 148), where the libraries' blocking of K pays.
  if (s.k >= 1024) return library;
  // On Intel CPUs oneDNN's blocking pays from K = 256 already: on a Xeon with AVX-512 (three
  // runs of kiln_bench_gemm_calibrate) an LSTM step at hidden 512, 64x2048x512, ran at 281-314
  // GFLOP/s against libxsmm's tiles' 126-144, its half 64x1024x512 at 280-310 against 183-191,
  // and a Dense 1024's weight gradient, 1024x1024x256 with A^T, at 305-321 against 219-268.
  // Shorter contractions stay with the tiles (12800x1024x128: 305-331 against oneDNN's
  // 249-264; 1024x256x64 a tie).
  if (f32 && s.k >= 256 && cpu_model().intel) return library;
  // Tiled libxsmm wins while one dim is short (on the Zen 4): a batch's rows against a weight
  // (an LSTM step's [64, 512] x [512, 2048]: 175 against 121), a short contraction (a weight
  // gradient over 64 rows: 161 against 155; a projection over all steps, K = 128: a tie).
  if (std::min({s.m, s.n, s.k}) <= 256) return GemmBackend::xsmm;
  return library;
}

void blas_gemm(const float* a, const float* b, float* c, const GemmShape& g, float alpha) {
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, alpha, a, g.lda, b, g.ldb,
              g.accumulate ? 1.0f : 0.0f, c, g.c_stride());
}
void blas_gemm(const double* a, const double* b, double* c, const GemmShape& g, double alpha) {
  cblas_dgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, alpha, a, g.lda, b, g.ldb,
              g.accumulate ? 1.0 : 0.0, c, g.c_stride());
}

void dnnl_gemm(const float* a, const float* b, float* c, const GemmShape& g, float alpha) {
#if KILN_HAVE_DNNL
  // One thread: nthreads-var is per thread in OpenMP, so set it on each thread that calls.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  const dnnl_status_t status =
      dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.m, g.n, g.k, alpha, a, g.lda, b,
                 g.ldb, g.accumulate ? 1.0f : 0.0f, c, g.c_stride());
  if (status != dnnl_success)
    fail("matmul", "oneDNN's sgemm failed on [{},{}] x [{},{}] (status {})", g.m, g.k, g.k, g.n,
         static_cast<int>(status));
#else
  (void)a, (void)b, (void)c, (void)g, (void)alpha;
  fail("matmul", "internal: oneDNN is not built in");
#endif
}
void dnnl_gemm(const double*, const double*, double*, const GemmShape&, double) {
  fail("matmul", "internal: oneDNN has no f64 GEMM");
}

}  // namespace

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::automatic:
      return "auto";
    case GemmBackend::xsmm:
      return "xsmm";
    case GemmBackend::dnnl:
      return "dnnl";
    case GemmBackend::openblas:
      return "openblas";
  }
  return "?";
}

GemmBackend forced_gemm_backend() {
  int v = forced.load(std::memory_order_acquire);
  if (v < 0) {
    int expected = -1;
    forced.compare_exchange_strong(expected, static_cast<int>(backend_from_environment()));
    v = forced.load(std::memory_order_acquire);
  }
  return static_cast<GemmBackend>(v);
}

void set_gemm_backend(GemmBackend b) { forced.store(static_cast<int>(b)); }

void set_c_transposed(int mode) { transposed_mode.store(mode < 0 ? -1 : mode > 0 ? 1 : 0); }
int c_transposed_mode() { return transposed_mode.load(std::memory_order_relaxed); }

std::vector<GemmBackend> available_gemm_backends(std::size_t element_size) {
  std::vector<GemmBackend> out;
  for (GemmBackend b : {GemmBackend::xsmm, GemmBackend::dnnl, GemmBackend::openblas})
    if (can_run(b, element_size)) out.push_back(b);
  return out;
}

template <class T>
Gemm<T>::Gemm(const GemmShape& shape) : shape_(shape) {
  ensure_library_threads();
  const GemmBackend wanted = forced_gemm_backend();
  const bool xsmm_cannot = shape.trans_b || shape.scaled;
  backend_ = can_run(wanted, sizeof(T)) && !(wanted == GemmBackend::xsmm && xsmm_cannot)
                 ? wanted
                 : choose(shape, sizeof(T));
  if (backend_ == GemmBackend::xsmm && (shape.scaled || !plan_xsmm()))
    backend_ = can_run(GemmBackend::dnnl, sizeof(T)) ? GemmBackend::dnnl : GemmBackend::openblas;
  if (backend_ != GemmBackend::xsmm) plan_library_tiles();
}

template <class T>
Gemm<T> Gemm<T>::planned(const GemmShape& shape) {
  // The plan depends on the shape, the forced backend and the C-transposed mode only: the
  // thread count and the instruction set are read once per process.
  struct Entry {
    GemmShape shape;
    GemmBackend forced;
    int transposed;
    Gemm<T> gemm;
  };
  constexpr std::size_t capacity = 8;
  thread_local std::vector<Entry> recent;
  thread_local std::size_t oldest = 0;
  const GemmBackend forced = forced_gemm_backend();
  const int transposed = c_transposed_mode();
  for (const Entry& e : recent)
    if (e.shape == shape && e.forced == forced && e.transposed == transposed) return e.gemm;
  Entry entry{shape, forced, transposed, Gemm<T>(shape)};
  if (recent.size() < capacity) {
    recent.push_back(entry);
  } else {
    recent[oldest] = entry;
    oldest = (oldest + 1) % capacity;
  }
  return entry.gemm;
}

template <class T>
int Gemm<T>::threads_for() const {
  const std::int64_t work = std::int64_t{shape_.m} * shape_.n * shape_.k;
  return work >= spread_work ? num_threads() : 1;
}

template <class T>
void Gemm<T>::set_tiles(int tile_m, int tile_n, int threads) {
  tile_m_ = tile_m;
  tile_n_ = tile_n;
  row_tiles_ = (shape_.m + tile_m - 1) / tile_m;
  tiles_ = row_tiles_ * ((shape_.n + tile_n - 1) / tile_n);
  grain_ = threads > 1 ? 1 : tiles_;
}

/// Tiles of C for the xsmm backend: column panels of tile_n (a B panel within panel_bytes),
/// each cut into row tiles of up to max_tile_m; at least as many tiles as threads when the
/// work is worth spreading. One libxsmm kernel per tile shape (full, right edge, bottom edge,
/// corner). False when libxsmm offers no kernel for one of them.
template <class T>
bool Gemm<T>::plan_xsmm() {
  const GemmShape& s = shape_;
  int tile_m = s.m, tile_n = s.n;
  const int threads = threads_for();
  if (!is_small(s.m, s.n, s.k)) {
    // Column panels within panel_bytes, row tiles of up to max_tile_m; then as many panels
    // (and, if the columns run out, row tiles) as make the tile count a multiple of the
    // threads, so that every thread's share is the same (the pool hands each thread one
    // contiguous range of tiles).
    const std::int64_t panel_cols = std::max<std::int64_t>(
        min_tile_n, panel_bytes / (static_cast<std::int64_t>(sizeof(T)) * s.k));
    const auto width = [&](std::int64_t panels) {  // columns per panel: a multiple of 16
      const std::int64_t cols = ((s.n + panels - 1) / panels + 15) / 16 * 16;
      return static_cast<int>(std::min<std::int64_t>(s.n, cols));
    };
    std::int64_t panels = (s.n + panel_cols - 1) / panel_cols;
    tile_m = std::min(s.m, max_tile_m);
    const std::int64_t row_tiles = (s.m + tile_m - 1) / tile_m;
    while ((row_tiles * panels) % threads != 0 && width(panels + 1) >= min_tile_n) ++panels;
    tile_n = width(panels);
    const auto count = [&] {
      return std::int64_t{(s.m + tile_m - 1) / tile_m} * ((s.n + tile_n - 1) / tile_n);
    };
    while (count() % threads != 0 && count() < 8 * threads && tile_m >= 16) tile_m /= 2;
  }
  set_tiles(tile_m, tile_n, is_small(s.m, s.n, s.k) ? 1 : threads);
  auto& cache = XsmmKernelCache<T>::instance();
  c_transposed_ = std::is_same_v<T, float> && is_small(s.m, s.n, s.k) && xsmm_transposed_wins(s);
  if (c_transposed_) {
    full_ = reinterpret_cast<Kernel>(cache.get(s, true));  // operator() runs it, not the tiles
    // libxsmm_otrans looks its kernel up on every call (about 150 ns of a 2 us product on the
    // Zen 2); these are the same kernels, for the whole matrix, looked up once.
    const auto transpose = [](int rows, int cols, int ldo) {
      libxsmm_descriptor_blob blob;
      return reinterpret_cast<Kernel>(libxsmm_dispatch_trans(
          libxsmm_trans_descriptor_init(&blob, sizeof(T), static_cast<unsigned>(rows),
                                        static_cast<unsigned>(cols), static_cast<unsigned>(ldo))));
    };
    if (!s.trans_a) transpose_a_ = transpose(s.k, s.m, s.m);
    transpose_c_ = transpose(s.m, s.n, s.c_stride());
    return full_ != nullptr;
  }
  const int edge_m = s.m % tile_m, edge_n = s.n % tile_n;
  const auto kernel = [&](int m, int n) {
    GemmShape t = s;
    t.m = m;
    t.n = n;
    t.ldc = s.c_stride();
    return reinterpret_cast<Kernel>(cache.get(t));
  };
  full_ = kernel(tile_m, tile_n);
  right_ = edge_n > 0 ? kernel(tile_m, edge_n) : full_;
  bottom_ = edge_m > 0 ? kernel(edge_m, tile_n) : full_;
  corner_ = edge_m > 0 && edge_n > 0 ? kernel(edge_m, edge_n) : edge_m > 0 ? bottom_ : right_;
  return full_ != nullptr && right_ != nullptr && bottom_ != nullptr && corner_ != nullptr;
}

/// oneDNN and OpenBLAS run one single-threaded call per thread: C cut into as many panels as
/// threads along its longer side (columns in multiples of 16, rows of 8), or whole when the
/// work is not worth spreading.
template <class T>
void Gemm<T>::plan_library_tiles() {
  const GemmShape& s = shape_;
  const int threads = threads_for();
  const auto part = [&](int extent, int unit) {
    return std::max(unit, (extent + threads * unit - 1) / (threads * unit) * unit);
  };
  if (threads <= 1)
    set_tiles(s.m, s.n, 1);
  else if (s.n >= s.m)
    set_tiles(s.m, std::min(s.n, part(s.n, 16)), threads);
  else
    set_tiles(std::min(s.m, part(s.m, 8)), s.n, threads);
}

template <class T>
void Gemm<T>::run_tiles(const T* a, const T* b, T* c, std::int64_t begin, std::int64_t end,
                        T alpha) const {
  using Xsmm = typename XsmmTraits<T>::Kernel;
  const GemmShape& s = shape_;
  const std::int64_t ldc = s.c_stride();
  for (std::int64_t t = begin; t < end; ++t) {
    // Row tiles of one column panel are consecutive, so a thread's chunk keeps its panels.
    const std::int64_t panel = t / row_tiles_, row_tile = t % row_tiles_;
    const std::int64_t i = row_tile * tile_m_, j = panel * tile_n_;
    const T* a_tile = s.trans_a ? a + i : a + i * s.lda;
    T* c_tile = c + i * ldc + j;
    if (backend_ == GemmBackend::xsmm) {
      const bool last_row = i + tile_m_ > s.m, last_col = j + tile_n_ > s.n;
      const Kernel k = last_row ? (last_col ? corner_ : bottom_) : (last_col ? right_ : full_);
      reinterpret_cast<Xsmm>(k)(b + j, a_tile, c_tile);
      clear_upper_state();
      continue;
    }
    GemmShape tile = s;
    tile.m = static_cast<int>(std::min<std::int64_t>(tile_m_, s.m - i));
    tile.n = static_cast<int>(std::min<std::int64_t>(tile_n_, s.n - j));
    tile.ldc = static_cast<int>(ldc);
    const T* b_panel = s.trans_b ? b + j * s.ldb : b + j;
    if (backend_ == GemmBackend::dnnl)
      dnnl_gemm(a_tile, b_panel, c_tile, tile, alpha);
    else
      blas_gemm(a_tile, b_panel, c_tile, tile, alpha);
  }
}

/// The whole product on the C-transposed kernel (one tile): A^T into per-thread scratch unless
/// A is stored transposed already, C^T into scratch, then C^T transposed into C's rows.
template <class T>
void Gemm<T>::run_transposed(const T* a, const T* b, T* c) const {
  using Xsmm = typename XsmmTraits<T>::Kernel;
  const GemmShape& s = shape_;
  const auto a_elems = static_cast<std::size_t>(s.trans_a ? 0 : s.m * s.k);
  thread_local std::vector<T> scratch;
  scratch.resize(a_elems + static_cast<std::size_t>(s.m * s.n));
  T* c_t = scratch.data() + a_elems;
  // in, column-major [rows, cols] ldi apart, transposed into out [cols, rows] ldo apart.
  const auto transpose = [](Kernel kernel, T* out, const T* in, int rows, int cols, int ldi,
                            int ldo) {
    if (kernel != nullptr) {
      const auto in_ld = static_cast<unsigned>(ldi), out_ld = static_cast<unsigned>(ldo);
      reinterpret_cast<libxsmm_xtransfunction>(kernel)(in, &in_ld, out, &out_ld);
      clear_upper_state();
    } else {
      libxsmm_otrans(out, in, sizeof(T), rows, cols, ldi, ldo);
    }
  };
  const T* a_t = a;
  if (!s.trans_a) {
    // A row-major [m,k], lda apart, is column-major [k,m]: its transpose is A^T column-major.
    transpose(transpose_a_, scratch.data(), a, s.k, s.m, s.lda, s.m);
    a_t = scratch.data();
  }
  reinterpret_cast<Xsmm>(full_)(a_t, b, c_t);
  clear_upper_state();
  // C^T column-major [m,n] transposed is C column-major [n,m] with ldc: C's rows.
  transpose(transpose_c_, c, c_t, s.m, s.n, s.m, s.c_stride());
}

template <class T>
void Gemm<T>::operator()(const T* a, const T* b, T* c, T alpha) const {
  if (c_transposed_) {
    run_transposed(a, b, c);
    return;
  }
  if (tiles_ == 1) {
    run_tiles(a, b, c, 0, 1, alpha);
    return;
  }
  parallel_for(tiles_, grain_, [&](std::int64_t begin, std::int64_t end) {
    run_tiles(a, b, c, begin, end, alpha);
  });
}

template <class T>
std::string Gemm<T>::describe() const {
  const std::int64_t threads = grain_ < tiles_ ? std::min<std::int64_t>(num_threads(), tiles_) : 1;
  return fmt::format("{}{}: {} tile{} of {}x{} on {} thread{}", gemm_backend_name(backend_),
                     c_transposed_ ? " (C transposed)" : "", tiles_, tiles_ == 1 ? "" : "s",
                     tile_m_, tile_n_, threads, threads == 1 ? "" : "s");
}

template class Gemm<float>;
template class Gemm<double>;

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

}  // namespace kiln::detail

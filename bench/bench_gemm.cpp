// Workload 8 of bench/compare (issue 18): f32 GEMM, row-major C[M,N] = A[M,K] B[K,N], at
// M x N x K = 32x20x80, 64x256x1024, 1024^3 and 4096x4096x1024. kiln's kiln::matmul on concrete
// tensors (eager, output allocated per call; and a cached kiln::function of it) against the
// libraries called directly in this program on the same data, each into a buffer allocated
// once: OpenBLAS cblas_sgemm, libxsmm (the two small shapes; a JIT kernel, one thread),
// oneDNN dnnl_sgemm (when meson found it) and BLIS bli_sgemm (when meson found the OpenMP build;
// loaded with dlopen(RTLD_LOCAL), since libblis also exports cblas_sgemm and sgemm_, which
// would otherwise clash with OpenBLAS's). Every result is checked against a double-precision
// reference before it is timed. The rows of a shape are timed in interleaved rounds (one sample
// of each per round), so the machine's speed phases fall on all of them alike. GFLOP/s count
// 2 M N K per call, from the median.
// Threads: KILN_NUM_THREADS (default 2) for every library; the program sets OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS and BLIS_NUM_THREADS to it and starts itself again when they differ
// (the OpenMP runtime reads them when it loads).
// Usage: kiln_bench_gemm [--quick] [--json]
#include <fmt/format.h>
#include <unistd.h>

#include <cblas.h>
#include <libxsmm.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

#ifdef KILN_BENCH_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef KILN_BENCH_BLIS
#include <dlfcn.h>
#endif

namespace {

using kiln::Tensor;
using kiln::bench::Timing;

struct GemmShape {
  std::int64_t m, n, k;
  double flops() const { return 2.0 * static_cast<double>(m * n * k); }
  std::string name() const { return fmt::format("{}x{}x{}", m, n, k); }
};

/// Shapes up to this many multiply-adds get a libxsmm kernel (kiln's own threshold is 128^3).
constexpr std::int64_t libxsmm_max_mnk = 64 * 256 * 1024;

/// Row-major f32 GEMM into c: one library, called directly.
using Gemm = std::function<void(const float* a, const float* b, float* c)>;

/// One library at one shape: the call, or why it is not measured.
struct Library {
  std::string key, label;
  Gemm gemm;
  std::string skipped;
};

#ifdef KILN_BENCH_BLIS
/// bli_sgemm and bli_thread_set_num_threads as blis.h declares them (dim_t and inc_t are the
/// 64-bit gint_t on x86_64; trans_t BLIS_NO_TRANSPOSE is 0). blis.h is not included: it also
/// declares the CBLAS interface, which OpenBLAS's cblas.h declares differently.
using BliSgemm = void (*)(int transa, int transb, std::int64_t m, std::int64_t n, std::int64_t k,
                          float* alpha, float* a, std::int64_t rsa, std::int64_t csa, float* b,
                          std::int64_t rsb, std::int64_t csb, float* beta, float* c,
                          std::int64_t rsc, std::int64_t csc);
using BliSetThreads = void (*)(std::int64_t);

/// libblis, loaded once without exporting its symbols to the program; nullptr if it fails.
BliSgemm load_blis(int threads, std::string& why) {
#ifdef __SANITIZE_ADDRESS__
  // LeakSanitizer's exit check walks every thread's dynamic TLS, and crashed (signal 11) on a
  // range left by the dlopen'd library's OpenMP threads: the sanitizer builds' smoke runs skip
  // BLIS.
  (void)threads;
  why =
      "not in the address-sanitizer build (LeakSanitizer cannot walk the dlopen'd library's "
      "thread storage)";
  return nullptr;
#endif
  static void* handle = dlopen(KILN_BENCH_BLIS, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    why = fmt::format("dlopen failed: {}", dlerror());
    return nullptr;
  }
  auto sgemm = reinterpret_cast<BliSgemm>(dlsym(handle, "bli_sgemm"));
  auto set_threads = reinterpret_cast<BliSetThreads>(dlsym(handle, "bli_thread_set_num_threads"));
  if (sgemm == nullptr || set_threads == nullptr) {
    why = "bli_sgemm not found in " KILN_BENCH_BLIS;
    return nullptr;
  }
  set_threads(threads);
  return sgemm;
}
#endif

/// The libraries compared at shape s (kiln's rows are added by the caller).
std::vector<Library> libraries(const GemmShape& s, int threads) {
  const auto m = s.m, n = s.n, k = s.k;
  std::vector<Library> out;
  out.push_back({"openblas", "OpenBLAS cblas_sgemm",
                 [=](const float* a, const float* b, float* c) {
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                               static_cast<int>(n), static_cast<int>(k), 1.0f, a,
                               static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
                               static_cast<int>(n));
                 },
                 ""});
  Library xsmm{"libxsmm", "libxsmm (1 thread)", {}, ""};
  if (m * n * k > libxsmm_max_mnk) {
    xsmm.skipped = "small shapes only";
  } else {
    const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
    const float alpha = 1, beta = 0;
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    // libxsmm is column-major: row-major C = A B is C^T = B^T A^T.
    const libxsmm_smmfunction kernel =
        libxsmm_smmdispatch(ni, mi, ki, &ni, &ki, &ni, &alpha, &beta, nullptr, &prefetch);
    if (kernel == nullptr)
      xsmm.skipped = "libxsmm has no kernel for this shape";
    else
      xsmm.gemm = [kernel](const float* a, const float* b, float* c) { kernel(b, a, c); };
  }
  out.push_back(xsmm);
#ifdef KILN_BENCH_DNNL
  out.push_back({"onednn", "oneDNN dnnl_sgemm",
                 [=](const float* a, const float* b, float* c) {
                   // kiln leaves this thread's OpenMP team at one thread (its tiles).
                   if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
                   if (dnnl_sgemm('N', 'N', m, n, k, 1.0f, a, k, b, n, 0.0f, c, n) != dnnl_success)
                     throw kiln::Error("dnnl_sgemm failed");
                 },
                 ""});
#endif
#ifdef KILN_BENCH_BLIS
  Library blis{"blis", "BLIS bli_sgemm", {}, ""};
  if (const BliSgemm sgemm = load_blis(threads, blis.skipped); sgemm != nullptr)
    blis.gemm = [=](const float* a, const float* b, float* c) {
      float alpha = 1, beta = 0;
      sgemm(0, 0, m, n, k, &alpha, const_cast<float*>(a), k, 1, const_cast<float*>(b), n, 1, &beta,
            c, n, 1);
    };
  out.push_back(blis);
#else
  (void)threads;
#endif
  return out;
}

/// The entries of C checked: all of a small C, else 4096 spread pseudo-randomly.
std::vector<std::int64_t> checked_entries(const GemmShape& s) {
  const std::int64_t count = s.m * s.n;
  std::vector<std::int64_t> out;
  if (count <= 65536) {
    for (std::int64_t i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::uint64_t state = 12345;
  for (int i = 0; i < 4096; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(static_cast<std::int64_t>((state >> 17) % static_cast<std::uint64_t>(count)));
  }
  return out;
}

/// Worst |c - exact| / bound over the checked entries, where exact is the double dot product and
/// bound 1e-5 sum |a b| + 1e-6 (a few f32 roundings per term); the result must be <= 1.
struct Reference {
  std::vector<std::int64_t> entries;
  std::vector<double> exact, bound;
  Reference(const GemmShape& s, const float* a, const float* b) : entries(checked_entries(s)) {
    for (const std::int64_t e : entries) {
      const std::int64_t i = e / s.n, j = e % s.n;
      double dot = 0, abs_sum = 0;
      for (std::int64_t p = 0; p < s.k; ++p) {
        const double term = static_cast<double>(a[i * s.k + p]) * b[p * s.n + j];
        dot += term;
        abs_sum += std::abs(term);
      }
      exact.push_back(dot);
      bound.push_back(1e-5 * abs_sum + 1e-6);
    }
  }
  double error(const float* c) const {
    double worst = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const double e = std::abs(static_cast<double>(c[entries[i]]) - exact[i]) / bound[i];
      worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    }
    return worst;
  }
};

/// One library's figures at one shape.
struct Result {
  std::string key, label, skipped;
  Timing timing;
  double gflops = 0, error = 0;
};

struct Failure {
  std::string what;
};

/// One row to time: where its figures go, the call, and OpenBLAS's thread count while it runs
/// (kiln sets OpenBLAS to one thread and runs it on tiles of its own pool; the libraries called
/// directly get the program's thread count).
struct Row {
  Result* result;
  std::function<void()> call;
  int openblas_threads;
};

/// Times every row of one shape in interleaved rounds, one sample of each row per round, so
/// that the machine's slow and fast phases (this VM's speed alternates every few seconds) fall
/// on every row alike and the ratios between rows compare like with like. Each row first warms
/// up for 0.1 s, which also sets its calls per sample (30 ms of them), and each timed sample
/// follows an untimed one after the pause between rows; the slowest row sets the
/// number of rounds (about 1 s of its samples, 5 to 21). --quick: one call per sample, one
/// round.
void time_interleaved(const GemmShape& s, std::vector<Row>& rows, bool quick) {
  using Clock = std::chrono::steady_clock;
  // The previous row's idle library workers spin before they sleep (OpenBLAS's for about
  // 0.1 s); a pause before each sample keeps them off the cores the next row needs.
  const auto pause = [quick] {
    if (!quick) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  };
  std::vector<std::int64_t> calls(rows.size(), 1);
  double slowest = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    pause();
    openblas_set_num_threads(rows[i].openblas_threads);
    const auto start = Clock::now();
    std::int64_t n = 0;
    do {
      rows[i].call();
      ++n;
    } while (!quick && std::chrono::duration<double>(Clock::now() - start).count() < 0.1);
    const double per_call =
        std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(n);
    calls[i] = quick ? 1 : std::max<std::int64_t>(1, static_cast<std::int64_t>(0.03 / per_call));
    slowest = std::max(slowest, per_call * static_cast<double>(calls[i]));
  }
  const int rounds = quick ? 1 : std::clamp(static_cast<int>(1.0 / slowest), 5, 21);
  std::vector<std::vector<double>> per_call(rows.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      pause();
      openblas_set_num_threads(rows[i].openblas_threads);
      // An untimed sample first: after the pause the core and the caches are cold again.
      if (!quick)
        for (std::int64_t c = 0; c < calls[i]; ++c) rows[i].call();
      const auto start = Clock::now();
      for (std::int64_t c = 0; c < calls[i]; ++c) rows[i].call();
      per_call[i].push_back(std::chrono::duration<double>(Clock::now() - start).count() /
                            static_cast<double>(calls[i]));
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Timing& t = rows[i].result->timing;
    t.calls_per_sample = calls[i];
    t.samples = rounds;
    kiln::bench::summarize(per_call[i], t);
    rows[i].result->gflops = s.flops() / t.median * 1e-9;
  }
}

/// Checks one call of `call` (which leaves its result at c()) against the reference.
void check_one(const GemmShape& s, const Reference& ref, Result& r,
               const std::function<void()>& call, const std::function<const float*()>& c) {
  call();
  r.error = ref.error(c());
  if (!(r.error <= 1))
    throw Failure{fmt::format("{} at {}: result off the reference by {:.3g} of the bound", r.label,
                              s.name(), r.error)};
}

std::vector<Result> run_shape(const GemmShape& s, int threads, bool quick) {
  const Tensor a = kiln::random::uniform({s.m, s.k}, -1, 1, 11).contiguous();
  const Tensor b = kiln::random::uniform({s.k, s.n}, -1, 1, 12).contiguous();
  const auto* a_data = static_cast<const float*>(a.data());
  const auto* b_data = static_cast<const float*>(b.data());
  const Reference ref(s, a_data, b_data);
  std::vector<Library> libs = libraries(s, threads);
  std::vector<Result> out;
  out.reserve(2 + libs.size());  // rows point into it
  std::vector<Row> rows;

  openblas_set_num_threads(1);
  Tensor c_eager;
  out.push_back({"kiln_eager", "kiln eager", "", {}, 0, 0});
  const std::function<void()> eager = [&] { c_eager = kiln::matmul(a, b); };
  check_one(s, ref, out.back(), eager,
            [&] { return static_cast<const float*>(c_eager.contiguous().data()); });
  rows.push_back({&out.back(), eager, 1});
  auto traced = kiln::function([](const Tensor& x, const Tensor& y) { return kiln::matmul(x, y); },
                               {.name = "gemm"});
  Tensor c_traced;
  out.push_back({"kiln_function", "kiln function", "", {}, 0, 0});
  const std::function<void()> function = [&] { c_traced = traced(a, b); };
  check_one(s, ref, out.back(), function,  // the first call traces, outside the timing
            [&] { return static_cast<const float*>(c_traced.contiguous().data()); });
  rows.push_back({&out.back(), function, 1});

  std::vector<std::vector<float>> c(libs.size());
  openblas_set_num_threads(threads);
  for (std::size_t i = 0; i < libs.size(); ++i) {
    Library& lib = libs[i];
    out.push_back({lib.key, lib.label, lib.skipped, {}, 0, 0});
    if (!lib.skipped.empty()) continue;
    // Each library its own C, filled with NaN: a library that writes nothing fails the check.
    c[i].assign(static_cast<std::size_t>(s.m * s.n), NAN);
    float* c_data = c[i].data();
    const std::function<void()> call = [&lib, a_data, b_data, c_data] {
      lib.gemm(a_data, b_data, c_data);
    };
    check_one(s, ref, out.back(), call, [c_data] { return c_data; });
    rows.push_back({&out.back(), call, threads});
  }
  time_interleaved(s, rows, quick);
  openblas_set_num_threads(threads);
  return out;
}

/// Makes every library use `threads` threads: sets the variables their runtimes read at load
/// and, when one had to change, starts the program again with them (returns only if they were
/// already right, or the restart failed).
void set_thread_environment(int threads, char** argv) {
  const std::string want = std::to_string(threads);
  bool changed = false;
  for (const char* name :
       {"KILN_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"}) {
    const char* have = std::getenv(name);
    if (have == nullptr || want != have) {
      setenv(name, want.c_str(), 1);
      changed = true;
    }
  }
  if (changed) {
    execv("/proc/self/exe", argv);
    fmt::print(stderr, "kiln_bench_gemm: could not restart with the thread settings\n");
  }
}

void print_table(const std::vector<GemmShape>& shapes,
                 const std::vector<std::vector<Result>>& all) {
  fmt::print("{:<16} {:<22} {:>10} {:>12} {:>8} {:>10}\n", "M x N x K", "library", "GFLOP/s",
             "median", "spread", "err/bound");
  fmt::print("{}\n", std::string(82, '-'));
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (const Result& r : all[i]) {
      if (!r.skipped.empty()) {
        fmt::print("{:<16} {:<22} skipped: {}\n", shapes[i].name(), r.label, r.skipped);
        continue;
      }
      fmt::print("{:<16} {:<22} {:>10.1f} {:>9.1f} us {:>7.1f}% {:>10.3f}\n", shapes[i].name(),
                 r.label, r.gflops, r.timing.median * 1e6, r.timing.spread() * 100, r.error);
    }
}

void print_json(const std::vector<GemmShape>& shapes, const std::vector<std::vector<Result>>& all,
                int threads, bool quick) {
  using kiln::bench::json_string;
  fmt::print("{{\"program\": \"kiln_bench_gemm\", \"quick\": {}, \"threads\": {}, \"shapes\": [\n",
             quick, threads);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const GemmShape& s = shapes[i];
    fmt::print(" {{\"m\": {}, \"n\": {}, \"k\": {}, \"flops\": {}, \"libraries\": [\n", s.m, s.n,
               s.k, s.flops());
    for (std::size_t j = 0; j < all[i].size(); ++j) {
      const Result& r = all[i][j];
      const char* sep = j + 1 < all[i].size() ? "," : "";
      if (!r.skipped.empty()) {
        fmt::print("  {{\"key\": {}, \"label\": {}, \"skipped\": {}}}{}\n", json_string(r.key),
                   json_string(r.label), json_string(r.skipped), sep);
        continue;
      }
      fmt::print(
          "  {{\"key\": {}, \"label\": {}, \"gflops\": {}, \"median_s\": {}, \"p10_s\": {}, "
          "\"p90_s\": {}, \"samples\": {}, \"calls_per_sample\": {}, \"error_over_bound\": "
          "{}}}{}\n",
          json_string(r.key), json_string(r.label), r.gflops, r.timing.median, r.timing.p10,
          r.timing.p90, r.timing.samples, r.timing.calls_per_sample, r.error, sep);
    }
    fmt::print(" ]}}{}\n", i + 1 < shapes.size() ? "," : "");
  }
  fmt::print("]}}\n");
}

int usage(std::string_view arg) {
  fmt::print(stderr,
             "usage: kiln_bench_gemm [--quick] [--json]\n"
             "  --quick  smaller large shapes, one call per measurement (a smoke test)\n"
             "  --json   print the results as JSON\n");
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv);
  if (args.bad()) return usage(args.unknown);
  const char* env_threads = std::getenv("KILN_NUM_THREADS");
  const int threads = env_threads != nullptr ? std::max(1, std::atoi(env_threads)) : 2;
  set_thread_environment(threads, argv);
  const std::vector<GemmShape> shapes =
      args.quick ? std::vector<GemmShape>{{32, 20, 80}, {64, 256, 1024}, {256, 192, 128}}
                 : std::vector<GemmShape>{
                       {32, 20, 80}, {64, 256, 1024}, {1024, 1024, 1024}, {4096, 4096, 1024}};
  std::vector<std::vector<Result>> all;
  try {
    for (const GemmShape& s : shapes) all.push_back(run_shape(s, threads, args.quick));
  } catch (const Failure& f) {
    fmt::print(stderr, "kiln_bench_gemm: {}\n", f.what);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln_bench_gemm: {}\n", e.what());
    return 1;
  }
  if (args.json)
    print_json(shapes, all, threads, args.quick);
  else
    print_table(shapes, all);
  return 0;
}

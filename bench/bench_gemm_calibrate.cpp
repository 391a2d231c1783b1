// GEMM backend calibration (issue 18): every backend kiln can run (lib/kernels/gemm.hpp),
// forced in turn, on a grid of f32 shapes, through a cached kiln::function (the plan's matmul
// step, as models run it), with the automatic choice as the last column. The table it prints
// is the one in docs/performance.md, "GEMM backends"; gemm.cpp's choose() follows it.
// --transposed: instead, where libxsmm generates code (AVX2 or AVX-512), each small shape of a
// sweep with C transposed and without (kiln::detail::set_c_transposed), what the CPU's rule
// chooses, and how the rule's choices compare with the faster path (xsmm_transposed_wins in
// gemm.cpp).
//
// Usage: kiln_bench_gemm_calibrate [--quick] [--markdown] [--transposed]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/gemm.hpp"
#include "kernels/parallel.hpp"

namespace {

using kiln::Tensor;
using kiln::detail::GemmBackend;

struct Shape3 {
  int m, n, k;
  const char* what;
  bool trans_a = false;  // A stored as [k, m], read through a transpose (a weight gradient x^T dy)
  bool trans_b = false;  // B stored as [n, k] (an input gradient dy W^T)
};

/// Shape classes: a batch of rows against a wide weight (RNN steps, Dense layers), tall
/// products (hoisted projections over all steps), a short contraction, square ones.
const std::vector<Shape3> grid = {
    {32, 20, 20, "tiny, C rows of 20 floats"},
    {32, 80, 20, "tiny (the 5-step RNN)"},
    {32, 10, 80, "tiny, narrow C"},
    {32, 12, 80, "tiny, C rows of 12 floats"},
    {32, 20, 80, "workload 8's smallest"},
    {32, 40, 80, "C rows of 40 floats"},
    {64, 20, 64, "C rows of 20 floats, 64^2"},
    {128, 20, 128, "C rows of 20 floats"},
    {16, 64, 64, "tiny, 16 rows"},
    {64, 64, 64, "64^3"},
    {128, 128, 128, "128^3"},
    {64, 256, 64, "RNN step, hidden 64"},
    {64, 1024, 256, "LSTM step, hidden 256"},
    {64, 512, 256, "LSTM step's half, hidden 256"},
    {64, 2048, 512, "LSTM step, hidden 512"},
    {64, 1024, 512, "LSTM step's half, hidden 512"},
    {64, 256, 1024, "64x256x1024"},
    {256, 1024, 1024, "Dense 1024, batch 256"},
    {256, 10, 1024, "Dense 10, batch 256"},
    {1024, 256, 64, "weight gradient, K=64"},
    {1024, 1024, 256, "weight gradient, Dense 1024 (A^T)", true},
    {256, 1024, 1024, "input gradient, Dense 1024 (B^T)", false, true},
    {512, 512, 256, "weight gradient, Dense 512 (A^T)", true},
    {256, 512, 512, "input gradient, Dense 512 (B^T)", false, true},
    {64, 1024, 256, "input gradient, LSTM step (B^T)", false, true},
    {3200, 1024, 128, "projection over 50 steps"},
    {12800, 1024, 128, "projection over 200 steps"},
    {512, 512, 512, "512^3"},
    {1024, 1024, 1024, "1024^3"},
    {2048, 2048, 2048, "2048^3"},
    {4096, 4096, 1024, "4096x4096x1024"},
};

double gflops(const Shape3& s, double seconds) { return 2.0 * s.m * s.n * s.k / seconds * 1e-9; }

/// The sweep of --transposed: small products around the C-transposed rules' bounds.
std::vector<Shape3> transposed_sweep() {
  std::vector<Shape3> out;
  for (int m : {16, 32, 48, 64, 96, 128})
    for (int n : {4, 8, 12, 20, 28, 36, 50, 60})
      for (int k : {32, 80, 128, 256}) out.push_back({m, n, k, ""});
  return out;
}

/// --transposed: us per product through a cached function with the path forced on and off,
/// the rule's choice, and the geometric mean over the sweep of (chosen time / faster time) for
/// the rule, for always and for never. Where the path cannot run, says so: nothing to calibrate.
int calibrate_transposed(const kiln::bench::TimingPlan& plan, bool quick) {
  namespace detail = kiln::detail;
  const auto& backends = detail::available_gemm_backends(sizeof(float));
  if (detail::simd_level() == detail::SimdLevel::sse2 ||
      std::find(backends.begin(), backends.end(), GemmBackend::xsmm) == backends.end()) {
    fmt::print(
        "kiln_bench_gemm_calibrate --transposed: the C-transposed path runs only where "
        "libxsmm generates code (SIMD level {})\n",
        detail::simd_level_name(detail::simd_level()));
    return 0;
  }
  fmt::print("C transposed or not, us per product (median of {} samples), {} threads\n",
             plan.samples, detail::num_threads());
  fmt::print("| shape (MxNxK) | transposed | not | the rule's choice |\n|---|---:|---:|---|\n");
  double log_rule = 0, log_always = 0, log_never = 0;
  int count = 0;
  for (const Shape3& s : transposed_sweep()) {
    if (quick && count == 4) break;
    const Tensor a = kiln::random::uniform({s.m, s.k}, -1, 1, 1);
    const Tensor b = kiln::random::uniform({s.k, s.n}, -1, 1, 2);
    double seconds[2] = {0, 0};  // not, transposed
    Tensor reference;
    for (int mode : {0, 1}) {
      detail::set_c_transposed(mode);
      // A new function per mode: the path is chosen when the plan is built.
      auto f = kiln::function([](const Tensor& x, const Tensor& y) { return kiln::matmul(x, y); });
      const Tensor c = f(a, b);
      if (!reference.defined()) reference = c;
      if (kiln::max(kiln::abs(c - reference)).item<float>() > 1e-3f * static_cast<float>(s.k)) {
        fmt::print(stderr, "{}x{}x{}: C transposed differs from the plain product\n", s.m, s.n,
                   s.k);
        detail::set_c_transposed(-1);
        return 1;
      }
      seconds[mode] = kiln::bench::measure(plan, [&] { f(a, b); }).median;
    }
    detail::set_c_transposed(-1);
    const detail::GemmShape shape{s.m, s.n, s.k, false, s.k, s.n};
    const bool rule = detail::Gemm<float>(shape).c_transposed();
    const double fastest = std::min(seconds[0], seconds[1]);
    log_rule += std::log(seconds[rule ? 1 : 0] / fastest);
    log_always += std::log(seconds[1] / fastest);
    log_never += std::log(seconds[0] / fastest);
    ++count;
    fmt::print("| {}x{}x{} | {:.2f} | {:.2f} | {}{} |\n", s.m, s.n, s.k, seconds[1] * 1e6,
               seconds[0] * 1e6, rule ? "transposed" : "not",
               seconds[rule ? 1 : 0] > 1.03 * fastest ? " (slower)" : "");
  }
  fmt::print(
      "\nchosen time / faster time, geometric mean over {} shapes: the rule {:.3f}, always "
      "transposed {:.3f}, never {:.3f}\n",
      count, std::exp(log_rule / count), std::exp(log_always / count), std::exp(log_never / count));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, markdown = false, transposed = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick")
      quick = true;
    else if (arg == "--markdown")
      markdown = true;
    else if (arg == "--transposed")
      transposed = true;
    else {
      fmt::print(stderr,
                 "usage: kiln_bench_gemm_calibrate [--quick] [--markdown] [--transposed]\n");
      return arg == "--help" ? 0 : 2;
    }
  }
  const kiln::bench::TimingPlan plan =
      quick ? kiln::bench::TimingPlan::quick() : kiln::bench::TimingPlan{0.1, 0.03, 11};
  if (transposed) return calibrate_transposed(plan, quick);
  std::vector<GemmBackend> backends = kiln::detail::available_gemm_backends(sizeof(float));
  backends.push_back(GemmBackend::automatic);
  fmt::print("GEMM f32 GFLOP/s (median of {} samples), {} threads, SIMD level {}\n", plan.samples,
             kiln::detail::num_threads(),
             kiln::detail::simd_level_name(kiln::detail::simd_level()));
  std::string header = "| shape (MxNxK) | class |", rule = "|---|---|";
  for (GemmBackend b : backends) {
    header += fmt::format(" {} |", kiln::detail::gemm_backend_name(b));
    rule += "---:|";
  }
  fmt::print("{} auto's choice |\n{}---|\n", header, rule);
  for (const Shape3& s : grid) {
    if (quick && std::int64_t{s.m} * s.n * s.k > (1 << 24)) continue;
    // Operands as stored: a transposed one is the transpose of a contiguous matrix.
    const Tensor a = s.trans_a ? kiln::random::uniform({s.k, s.m}, -1, 1, 1)
                               : kiln::random::uniform({s.m, s.k}, -1, 1, 1);
    const Tensor b = s.trans_b ? kiln::random::uniform({s.n, s.k}, -1, 1, 2)
                               : kiln::random::uniform({s.k, s.n}, -1, 1, 2);
    const bool ta = s.trans_a, tb = s.trans_b;
    std::string row = fmt::format("| {}x{}x{} | {} |", s.m, s.n, s.k, s.what);
    Tensor reference;
    double best = 0;
    std::vector<double> figures;
    for (GemmBackend backend : backends) {
      kiln::detail::set_gemm_backend(backend);
      // A new function per backend: the backend is chosen when the plan is built.
      auto f = kiln::function([ta, tb](const Tensor& x, const Tensor& y) {
        return kiln::matmul(ta ? kiln::transpose(x) : x, tb ? kiln::transpose(y) : y);
      });
      const Tensor c = f(a, b);
      if (!reference.defined()) reference = c;
      const float error = kiln::max(kiln::abs(c - reference)).item<float>();
      if (error > 1e-3f * static_cast<float>(s.k)) {
        fmt::print(stderr, "{}x{}x{}: {} differs from the first backend by {}\n", s.m, s.n, s.k,
                   kiln::detail::gemm_backend_name(backend), error);
        return 1;
      }
      const double g = gflops(s, kiln::bench::measure(plan, [&] { f(a, b); }).median);
      figures.push_back(g);
      if (backend != GemmBackend::automatic) best = std::max(best, g);
    }
    for (std::size_t i = 0; i < figures.size(); ++i) {
      const bool winner = backends[i] != GemmBackend::automatic && figures[i] == best;
      row += markdown && winner ? fmt::format(" **{:.0f}** |", figures[i])
                                : fmt::format(" {:.0f} |", figures[i]);
    }
    kiln::detail::GemmShape shape{
        s.m, s.n, s.k, s.trans_a, s.trans_a ? s.m : s.k, s.trans_b ? s.k : s.n};
    shape.trans_b = s.trans_b;
    fmt::print("{} {} |\n", row, kiln::detail::Gemm<float>(shape).describe());
  }
  kiln::detail::set_gemm_backend(GemmBackend::automatic);
  return 0;
}

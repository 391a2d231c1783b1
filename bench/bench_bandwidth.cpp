// kiln_bench_bandwidth: memory-bound kernels against copies measured in the same run (issue 18).
// Usage: kiln_bench_bandwidth [--quick] [--json]. See docs/performance.md, "Memory bandwidth".
//
// Measured, interleaved sample by sample so that a slow phase of a shared machine hits every
// row alike:
//   copy 1->1   16 MiB -> 16 MiB (the reference of softmax, which moves one byte out per byte
//               in)
//   copy 3->1   three 16 MiB inputs -> one 16 MiB output (out = a + b + c, two adds per vector:
//               nothing next to the traffic; the reference of the chain)
//   copy 3->1 with the other store strategy, for comparison only
//   read        64 MiB read and summed in four accumulators of the CPU's widest vectors,
//               nothing written (the reference of the sum: a reduction moves no bytes out)
//   memcpy      16 MiB -> 16 MiB with std::memcpy, for comparison only
//   copy 3->1 asking ahead: the copy 3->1 asking for its lines 4 KiB ahead, as kiln's generated
//               loops do over data beyond L2 (kiln::detail::loop_prefetch_bytes), for comparison
//   chain       tanh(a*b+c)*0.5 over three f32[4M], a cached kiln::function (workload 2)
//   chain, one loop  the same chain written as one AVX2 loop by hand (kiln's f32 tanh formula,
//               the values in registers), on CPUs with AVX2 and FMA: what one generated loop per
//               fused program would reach, against kiln's block interpreter; for comparison only
//   sum         kiln::sum over f32[16M] (eager; one reduction kernel)
//   softmax     kiln::softmax over the rows of f32[4096, 1024], a cached kiln::function
//   log_softmax kiln::log_softmax over the same rows (the reference: copy 1->1)
//   logsumexp   kiln::logsumexp over the same rows, one value out per row (the reference: read)
//   layer_norm  kiln::nn::layer_norm over rows of normal samples, f32[4096, 1024], gamma and beta
//               f32[1024] (the reference: copy 1->1)
//   rms_norm    kiln::nn::rms_norm over those rows, gamma f32[1024] (copy 1->1)
//   argmax      kiln::argmax along those rows, one i64 out per row (the reference: read)
// Bytes are the compulsory traffic: every input byte read once and every output byte written
// once (chain 4 x 16 MiB, sum 64 MiB, softmax, log_softmax, layer_norm and rms_norm 2 x 16 MiB
// (gamma and beta stay in cache), logsumexp and argmax 16 MiB, copy
// 1->1 2 x 16 MiB, copy 3->1 4 x 16 MiB, read 64 MiB); GB/s = bytes / median time. Every reference
// is split over as many persistent threads as kiln's kernels use (KILN_NUM_THREADS), the caller
// included, two barrier waits per call. The copies store as kiln's kernels do: non-temporal stores
// (movntps) when the 16 MiB output is larger than the last-level cache
// (kiln::detail::stream_output_bytes(), from sysfs), plain stores otherwise; the header line says
// which.
#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.hpp>

#include "copy_reference.hpp"
#include "harness.hpp"
#include "kernels/parallel.hpp"
#include "kernels/streaming.hpp"
#include "thread_team.hpp"

namespace {

using kiln::bench::share;
using kiln::bench::ThreadTeam;

using kiln::Shape;
using kiln::Tensor;
using kiln::bench::BenchArgs;
using kiln::bench::json_string;
using kiln::bench::parse_bench_args;

constexpr std::size_t mib16 = std::size_t{16} << 20;
constexpr std::size_t floats16 = mib16 / sizeof(float);  // 4M floats

/// A 64-byte aligned float buffer, filled with `value` (which also maps its pages).
struct Buffer {
  explicit Buffer(std::size_t n, float value)
      : data(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)))), size(n) {
    std::fill(data, data + n, value);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data;
  std::size_t size;
};

/// The sum of x[begin, end) in four accumulators of the widest vectors the CPU has (a read-only
/// pass at full speed): 4-lane SSE2 ones read a cache-resident 64 MiB at two thirds of the
/// speed of 16-lane ones on a Xeon with AVX-512, so a narrower reference would flatter kiln.
float read_part_sse2(const float* x, std::size_t begin, std::size_t end) {
  std::size_t i = begin;
  float total = 0;
#if defined(__SSE2__)
  __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (; i + 16 <= end; i += 16)
    for (int j = 0; j < 4; ++j) acc[j] = _mm_add_ps(acc[j], _mm_load_ps(x + i + 4 * j));
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(acc[0], acc[1]), _mm_add_ps(acc[2], acc[3])));
  total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
  for (; i < end; ++i) total += x[i];
  return total;
}

#if defined(__x86_64__)
[[gnu::target("avx2")]] float read_part_avx2(const float* x, std::size_t begin, std::size_t end) {
  std::size_t i = begin;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (; i + 32 <= end; i += 32)
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(x + i + 8 * j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes,
                  _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  float total = 0;
  for (float lane : lanes) total += lane;
  for (; i < end; ++i) total += x[i];
  return total;
}

[[gnu::target("avx512f")]] float read_part_avx512(const float* x, std::size_t begin,
                                                  std::size_t end) {
  std::size_t i = begin;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  for (; i + 64 <= end; i += 64)
    for (int j = 0; j < 4; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_loadu_ps(x + i + 16 * j));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes,
                  _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  float total = 0;
  for (float lane : lanes) total += lane;
  for (; i < end; ++i) total += x[i];
  return total;
}
#endif

float read_part(const float* x, std::size_t begin, std::size_t end) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return read_part_avx512(x, begin, end);
  if (__builtin_cpu_supports("avx2")) return read_part_avx2(x, begin, end);
#endif
  return read_part_sse2(x, begin, end);
}

#if defined(__x86_64__)
/// tanh as kiln's f32 TanhOp computes it: clamp to +-9, the rational fit with fused
/// multiply-adds, clamp to +-1.
[[gnu::target("avx2,fma")]] inline __m256 tanh_f32_avx2(__m256 x) {
  const __m256 v = _mm256_min_ps(_mm256_set1_ps(9.f), _mm256_max_ps(_mm256_set1_ps(-9.f), x));
  const __m256 s = _mm256_mul_ps(v, v);
  __m256 p = _mm256_set1_ps(1.33551774e-08f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(2.06094537e-05f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(0.00349561055f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(0.133810446f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.f));
  __m256 q = _mm256_set1_ps(7.77676917e-07f);
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(0.00032856717f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(0.0258770678f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(0.467143595f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(1.f));
  const __m256 r = _mm256_div_ps(_mm256_mul_ps(v, p), q);
  return _mm256_min_ps(_mm256_set1_ps(1.f), _mm256_max_ps(_mm256_set1_ps(-1.f), r));
}

/// out[begin, end) = tanh(a * b + c) * 0.5 in one AVX2 loop, the values in registers: the
/// product and the sum rounded apart (as kiln's two instructions), then tanh_f32_avx2 and the
/// product by 0.5. Stores as the copies store.
[[gnu::target("avx2,fma")]] void chain_one_loop_part(const float* a, const float* b, const float* c,
                                                     float* out, std::size_t begin, std::size_t end,
                                                     bool stream) {
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 ab = _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 y = _mm256_mul_ps(tanh_f32_avx2(_mm256_add_ps(ab, _mm256_loadu_ps(c + i))),
                                   _mm256_set1_ps(0.5f));
    if (stream)
      _mm256_stream_ps(out + i, y);
    else
      _mm256_storeu_ps(out + i, y);
  }
  for (; i < end; ++i) out[i] = 0.5f * std::tanh(a[i] * b[i] + c[i]);
  if (stream) _mm_sfence();
}
#endif

/// One row of the table.
struct Row {
  std::string name;
  double bytes = 0;
  std::function<void()> call;
  int reference = -1;  // index of the row it is compared with (-1: none)
  std::string note;
  std::vector<double> seconds;  // per call, one entry per sample
  double median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
  }
  double gbps() const { return median() > 0 ? bytes / median() * 1e-9 : 0; }
};

void check(bool ok, const std::string& what) {
  if (!ok) throw kiln::Error("kiln_bench_bandwidth: " + what);
}

}  // namespace

int main(int argc, char** argv) try {
  const BenchArgs args = parse_bench_args(argc, argv);
  if (args.bad()) {
    fmt::print(stderr,
               "usage: kiln_bench_bandwidth [--quick] [--json]\n  --quick  one call per row (a "
               "smoke test, not a measurement)\n  --json   print the results as JSON\n");
    return args.unknown == "--help" || args.unknown == "-h" ? 0 : 2;
  }
  const bool quick = args.quick;
  const int samples = quick ? 1 : 31;
  const double sample_seconds = quick ? 0 : 0.03;
  const int threads = kiln::detail::num_threads();

  // The references' buffers (plain memory, not kiln tensors).
  Buffer ra(floats16, 1.0f), rb(floats16, 2.0f), rc(floats16, 3.0f), rout(floats16, 0.0f);
  const std::vector<const float*> one{ra.data}, three{ra.data, rb.data, rc.data};
  // kiln streams outputs larger than the last-level cache; so do the references.
  const bool stream = static_cast<std::int64_t>(mib16) > kiln::detail::stream_output_bytes();
  const auto copy_team = [&](const std::vector<const float*>& in, bool nt) {
    return kiln::bench::sum_copy_team(in, rout.data, floats16, threads, nt);
  };
  const auto copy1 = copy_team(one, stream), copy3 = copy_team(three, stream);
  const auto copy3_other = copy_team(three, !stream);
  const auto copy3_ahead =
      kiln::bench::sum_copy_team(three, rout.data, floats16, threads, stream,
                                 static_cast<std::size_t>(kiln::detail::loop_prefetch_bytes));
  Buffer big(4 * floats16, 0.5f);
  std::vector<float> read_results(static_cast<std::size_t>(threads));
  ThreadTeam read64(threads, [&](int id, int t) {
    const auto [begin, end] = share(big.size, id, t);
    read_results[static_cast<std::size_t>(id)] = read_part(big.data, begin, end);
  });
  ThreadTeam plain_copy(threads, [&](int id, int t) {
    const auto [begin, end] = share(floats16, id, t);
    std::memcpy(rout.data + begin, ra.data + begin, (end - begin) * sizeof(float));
  });

  // kiln's inputs.
  constexpr auto n = static_cast<std::int64_t>(floats16);
  const Tensor a = kiln::linspace(-2.0, 2.0, n, kiln::f32);
  const Tensor b = kiln::full(Shape{n}, 0.75);
  const Tensor c = kiln::linspace(-1.0, 1.0, n, kiln::f32);
  auto chain = kiln::function([](const Tensor& x, const Tensor& y, const Tensor& z) {
    return kiln::tanh(x * y + z) * 0.5;
  });
  const float last = kiln::slice(chain(a, b, c), 0, n - 1, n).item<float>();
  check(std::abs(last - 0.5f * std::tanh(2.0f * 0.75f + 1.0f)) < 1e-5f, "chain: wrong result");

  constexpr std::int64_t sum_n = std::int64_t{16} << 20;
  const Tensor s = kiln::full(Shape{sum_n}, 0.25);
  check(kiln::sum(s).item<float>() == 0.25f * static_cast<float>(sum_n), "sum: wrong result");

  const Tensor logits =
      kiln::reshape(kiln::linspace(-4.0, 4.0, 4096 * 1024, kiln::f32), Shape{4096, 1024});
  auto softmax = kiln::function([](const Tensor& x) { return kiln::softmax(x, -1); });
  {
    const Tensor p = softmax(logits);
    const float row_sum = kiln::sum(kiln::slice(p, 0, 7, 8)).item<float>();
    check(std::abs(row_sum - 1.0f) < 1e-4f, "softmax: a row does not sum to 1");
  }
  auto log_softmax = kiln::function([](const Tensor& x) { return kiln::log_softmax(x, -1); });
  {
    const Tensor p = kiln::exp(log_softmax(logits));
    const float row_sum = kiln::sum(kiln::slice(p, 0, 7, 8)).item<float>();
    check(std::abs(row_sum - 1.0f) < 1e-4f, "log_softmax: a row's exps do not sum to 1");
  }
  auto logsumexp = kiln::function([](const Tensor& x) { return kiln::logsumexp(x, {-1}); });
  {
    const float lse = kiln::slice(logsumexp(logits), 0, 7, 8).item<float>();
    const float direct =
        kiln::log(kiln::sum(kiln::exp(kiln::slice(logits, 0, 7, 8)))).item<float>();
    check(std::abs(lse - direct) < 1e-4f, "logsumexp: wrong result");
  }
  // Rows of normal samples for the norms (a row of the linspace above has a variance far below
  // epsilon).
  const Tensor activations = kiln::random::normal({4096, 1024}, 0, 1, 5);
  const Tensor gamma = kiln::full(Shape{1024}, 1.5), beta = kiln::full(Shape{1024}, 0.25);
  auto layer_norm =
      kiln::function([&](const Tensor& x) { return kiln::nn::layer_norm(x, gamma, beta); });
  {
    const Tensor row = kiln::slice(layer_norm(activations), 0, 7, 8);
    check(std::abs(kiln::mean(row).item<float>() - 0.25f) < 1e-4f &&
              std::abs(kiln::mean(kiln::square(row - 0.25f)).item<float>() - 2.25f) < 1e-3f,
          "layer_norm: a row's mean or variance is wrong");
  }
  auto argmax = kiln::function([](const Tensor& x) { return kiln::argmax(x, -1); });
  {
    const std::vector<float> row = kiln::slice(activations, 0, 7, 8).to_vector<float>();
    const auto want = std::max_element(row.begin(), row.end()) - row.begin();
    check(kiln::slice(argmax(activations), 0, 7, 8).item<std::int64_t>() == want,
          "argmax: wrong index");
  }
  auto rms_norm = kiln::function([&](const Tensor& x) { return kiln::nn::rms_norm(x, gamma); });
  {
    const Tensor row = kiln::slice(rms_norm(activations), 0, 7, 8);
    check(std::abs(kiln::mean(kiln::square(row)).item<float>() - 2.25f) < 1e-3f,
          "rms_norm: a row's mean square is wrong");
  }

  constexpr double m16 = static_cast<double>(mib16);
  std::vector<Row> rows;
  const std::string stores = stream ? "non-temporal stores" : "plain stores";
  rows.push_back({"copy 1->1",
                  2 * m16,
                  [&] { copy1->run(); },
                  -1,
                  "reference: 16 MiB -> 16 MiB, " + stores,
                  {}});
  rows.push_back({"copy 3->1",
                  4 * m16,
                  [&] { copy3->run(); },
                  -1,
                  "reference: a+b+c, 3 x 16 MiB -> 16 MiB, " + stores,
                  {}});
  rows.push_back({stream ? "copy 3->1, plain" : "copy 3->1, NT",
                  4 * m16,
                  [&] { copy3_other->run(); },
                  1,
                  stream ? "plain stores, for comparison" : "non-temporal stores, for comparison",
                  {}});
  rows.push_back({"read 64 MiB",
                  4 * m16,
                  [&] { read64.run(); },
                  -1,
                  "reference: 4 x 16 MiB summed, nothing written",
                  {}});
  rows.push_back(
      {"memcpy 1->1", 2 * m16, [&] { plain_copy.run(); }, 0, "std::memcpy per thread", {}});
  rows.push_back({"copy 3->1, ahead",
                  4 * m16,
                  [&] { copy3_ahead->run(); },
                  1,
                  fmt::format("asks {} KiB ahead, as kiln's loops do; for comparison",
                              kiln::detail::loop_prefetch_bytes / 1024),
                  {}});
  rows.push_back({"chain traced",
                  4 * m16,
                  [&] { chain(a, b, c); },
                  1,
                  "tanh(a*b+c)*0.5, 3 x f32[4M] -> f32[4M]",
                  {}});
#if defined(__x86_64__)
  // The one-loop chain over kiln's own input tensors, into the references' output buffer.
  const Tensor a_flat = a.contiguous(), b_flat = b.contiguous(), c_flat = c.contiguous();
  const auto* a_in = static_cast<const float*>(a_flat.data());
  const auto* b_in = static_cast<const float*>(b_flat.data());
  const auto* c_in = static_cast<const float*>(c_flat.data());
  const std::unique_ptr<ThreadTeam> one_loop =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
          ? std::make_unique<ThreadTeam>(threads,
                                         [&](int id, int t) {
                                           const auto [begin, end] = share(floats16, id, t);
                                           chain_one_loop_part(a_in, b_in, c_in, rout.data, begin,
                                                               end, stream);
                                         })
          : nullptr;
  if (one_loop) {
    one_loop->run();
    const Tensor want_all = chain(a, b, c).contiguous();
    const float want = static_cast<const float*>(want_all.data())[n - 1];
    check(std::abs(rout.data[n - 1] - want) <= 1e-6f, "chain, one loop: wrong result");
    rows.push_back({"chain, one loop",
                    4 * m16,
                    [&] { one_loop->run(); },
                    1,
                    "the chain as one hand-written AVX2 loop, for comparison",
                    {}});
  }
#endif
  rows.push_back({"sum f32[16M]", 4 * m16, [&] { kiln::sum(s); }, 3, "eager; reads 64 MiB", {}});
  rows.push_back({"softmax traced",
                  2 * m16,
                  [&] { softmax(logits); },
                  0,
                  "rows of f32[4096, 1024], last axis",
                  {}});
  rows.push_back(
      {"log_softmax traced", 2 * m16, [&] { log_softmax(logits); }, 0, "the same rows", {}});
  rows.push_back({"logsumexp traced",
                  m16,
                  [&] { logsumexp(logits); },
                  3,
                  "the same rows, one value out per row",
                  {}});
  rows.push_back({"layer_norm traced",
                  2 * m16,
                  [&] { layer_norm(activations); },
                  0,
                  "normal f32[4096, 1024], gamma, beta",
                  {}});
  rows.push_back({"rms_norm traced",
                  2 * m16,
                  [&] { rms_norm(activations); },
                  0,
                  "f32[4096, 1024], gamma",
                  {}});
  rows.push_back({"argmax traced",
                  m16,
                  [&] { argmax(activations); },
                  3,
                  "the same rows, one index out per row",
                  {}});

  // Calibrate each row's calls per sample, then sample the rows in turn.
  std::vector<std::int64_t> calls(rows.size(), 1);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    rows[r].call();
    if (quick) continue;
    const auto start = std::chrono::steady_clock::now();
    std::int64_t done = 0;
    do {
      rows[r].call();
      ++done;
    } while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(100));
    const double per_call =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        static_cast<double>(done);
    calls[r] = std::max<std::int64_t>(1, static_cast<std::int64_t>(sample_seconds / per_call));
  }
  for (int sample = 0; sample < samples; ++sample)
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < calls[r]; ++i) rows[r].call();
      rows[r].seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
          static_cast<double>(calls[r]));
    }

  if (args.json) {
    fmt::print(
        "{{\"program\": \"kiln_bench_bandwidth\", \"quick\": {}, \"threads\": {}, "
        "\"non_temporal_stores\": {}, \"rows\": [",
        quick, threads, stream);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Row& row = rows[r];
      const double ratio = row.reference >= 0
                               ? row.gbps() / rows[static_cast<std::size_t>(row.reference)].gbps()
                               : 1;
      fmt::print(
          "{}\n  {{\"name\": {}, \"bytes\": {}, \"median_s\": {}, \"gb_per_s\": {}, "
          "\"reference\": {}, \"of_reference\": {}, \"samples\": {}}}",
          r == 0 ? "" : ",", json_string(row.name), row.bytes, row.median(), row.gbps(),
          json_string(row.reference >= 0 ? rows[static_cast<std::size_t>(row.reference)].name : ""),
          ratio, row.seconds.size());
    }
    fmt::print("\n]}}\n");
    return 0;
  }
  fmt::print(
      "kiln_bench_bandwidth{}: kiln uses {} threads, simd {}; last-level cache {} MiB: 16 MiB "
      "outputs get {}; median of {} samples\n\n",
      quick ? " --quick" : "", threads,
      std::getenv("KILN_SIMD") ? std::getenv("KILN_SIMD") : "auto",
      kiln::detail::last_level_cache_bytes() >> 20, stores, samples);
  fmt::print("{:<20} {:>9} {:>10} {:>9}   {:<20} {}\n", "row", "ms", "GB/s", "of ref", "reference",
             "what");
  fmt::print("{}\n", std::string(110, '-'));
  for (const Row& row : rows) {
    const std::string ref =
        row.reference >= 0 ? rows[static_cast<std::size_t>(row.reference)].name : "-";
    const std::string ratio =
        row.reference >= 0
            ? fmt::format("{:.2f}",
                          row.gbps() / rows[static_cast<std::size_t>(row.reference)].gbps())
            : "-";
    fmt::print("{:<20} {:>9.3f} {:>10.2f} {:>9}   {:<20} {}\n", row.name, row.median() * 1e3,
               row.gbps(), ratio, ref, row.note);
  }
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "kiln_bench_bandwidth: {}\n", e.what());
  return 1;
}

// kiln_bench: eager dispatch cost, an elementwise chain (eager and traced) against a copy 3->1,
// and kiln::matmul against the libraries it calls, each reference measured in the same
// run. Usage: kiln_bench [--quick] [--json]. See docs/performance.md.
#include <cblas.h>
#include <fmt/format.h>
#include <libxsmm.h>

#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <kiln/kiln.hpp>

#include "copy_reference.hpp"
#include "harness.hpp"
#include "kernels/parallel.hpp"
#include "kernels/streaming.hpp"

namespace {

using kiln::Shape;
using kiln::Tensor;
using kiln::bench::BenchArgs;
using kiln::bench::json_string;
using kiln::bench::measure;
using kiln::bench::parse_bench_args;
using kiln::bench::Timing;
using kiln::bench::TimingPlan;

/// One line of the result table.
struct Row {
  std::string name;
  std::string unit;
  std::optional<Timing> kiln;  // empty when the benchmark failed
  double kiln_value = 0;       // in `unit`
  std::string reference_name;
  double reference_value = 0;  // 0: no reference
  std::string note;
};

/// (a) A 4-element f32 add through the eager front end: nanoseconds per call.
Row bench_dispatch(const TimingPlan& plan) {
  Row row{"eager add, 4 f32", "ns/call", {}, 0, "", 0, "target < 200 ns"};
  const Tensor a = kiln::full(Shape{4}, 1.5);
  const Tensor b = kiln::full(Shape{4}, 2.0);
  if (kiln::add(a, b).to_vector<float>() != std::vector<float>(4, 3.5f))
    throw kiln::Error("add returned wrong values");
  row.kiln = measure(plan, [&] { kiln::add(a, b); });
  row.kiln_value = row.kiln->median * 1e9;
  row.note += row.kiln_value < 200 ? ": met" : ": missed";
  return row;
}

/// (b) tanh(a*b+c)*0.5 over 4M floats, eager or as a traced kiln::function: GB/s of useful
/// traffic (3 reads + 1 write) against a copy 3->1 moving the same bytes, over as many threads
/// as kiln's kernels use.
Row bench_chain(const TimingPlan& plan, bool traced) {
  constexpr std::int64_t n = 4 << 20;
  constexpr double bytes = 4.0 * n * sizeof(float);
  Row row{
      traced ? "tanh(a*b+c)*0.5, 4M, traced" : "tanh(a*b+c)*0.5, 4M f32", "GB/s", {}, 0, "", 0, ""};
  const Tensor a = kiln::linspace(-2.0, 2.0, n, kiln::f32);
  const Tensor b = kiln::full(Shape{n}, 0.75);
  const Tensor c = kiln::linspace(-1.0, 1.0, n, kiln::f32);
  auto chain = kiln::function([](const Tensor& x, const Tensor& y, const Tensor& z) {
    return kiln::tanh(x * y + z) * 0.5;
  });
  const Tensor result = traced ? chain(a, b, c) : kiln::tanh(a * b + c) * 0.5;
  const float check = kiln::slice(result, 0, n - 1, n).item<float>();
  if (std::abs(check - 0.5f * std::tanh(2.0f * 0.75f + 1.0f)) > 1e-5f)
    throw kiln::Error(fmt::format("chain returned {} for the last element", check));
  if (traced)
    row.kiln = measure(plan, [&] { chain(a, b, c); });
  else
    row.kiln = measure(plan, [&] { kiln::tanh(a * b + c) * 0.5; });
  row.kiln_value = bytes / row.kiln->median * 1e-9;

  // The reference moves the same bytes: out = a + b + c over three 16 MiB inputs (a copy 3->1),
  // on as many threads as kiln's kernels use, storing as kiln stores a 16 MiB output
  // (non-temporal stores only above the last-level cache). A copy 1->1 of 16 MiB would keep
  // half the chain's 64 MiB footprint, and most of it in a 32 MiB L3.
  const int threads = kiln::detail::num_threads();
  const bool stream = static_cast<std::int64_t>(bytes / 4) > kiln::detail::stream_output_bytes();
  const auto un = static_cast<std::size_t>(n);
  std::vector<float> ra(un, 1.0f), rb(un, 2.0f), rc(un, 3.0f), rout(un, 0.0f);
  const auto copy = kiln::bench::sum_copy_team({ra.data(), rb.data(), rc.data()}, rout.data(), un,
                                               threads, stream);
  const Timing copy_timing = measure(plan, [&] { copy->run(); });
  row.reference_name =
      fmt::format("copy 3->1 x{}, {} stores", threads, stream ? "non-temporal" : "plain");
  row.reference_value = bytes / copy_timing.median * 1e-9;
  row.note = traced ? "cached kiln::function call" : "4 eager passes, each through memory";
  return row;
}

/// (c) Row-major f32 matmul [m,k] x [k,n] through kiln against the library kiln uses for
/// that size, called directly: a libxsmm kernel (small) or cblas_sgemm (large).
Row bench_matmul(const TimingPlan& plan, int m, int k, int n, bool small) {
  Row row{fmt::format("matmul {}x{}x{} f32", m, k, n), "GFLOP/s", {}, 0, "", 0, ""};
  const double flops = 2.0 * m * n * k;
  const Tensor a = kiln::linspace(-1.0, 1.0, std::int64_t{m} * k, kiln::f32).contiguous();
  const Tensor b = kiln::linspace(1.0, -1.0, std::int64_t{k} * n, kiln::f32).contiguous();
  const Tensor a2 = kiln::reshape(a, Shape{m, k});
  const Tensor b2 = kiln::reshape(b, Shape{k, n});
  const auto* a_data = static_cast<const float*>(a.data());
  const auto* b_data = static_cast<const float*>(b.data());
  std::vector<float> c(static_cast<std::size_t>(m) * static_cast<std::size_t>(n));

  std::function<void()> direct;
  if (small) {
    const float alpha = 1, beta = 0;
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    // libxsmm is column-major: row-major C = A B is C^T = B^T A^T.
    const libxsmm_smmfunction kernel =
        libxsmm_smmdispatch(n, m, k, &n, &k, &n, &alpha, &beta, nullptr, &prefetch);
    if (kernel == nullptr) throw kiln::Error("libxsmm has no kernel for this shape");
    direct = [=, &c] { kernel(b_data, a_data, c.data()); };
    row.reference_name = "libxsmm";
  } else {
    direct = [=, &c] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a_data, k, b_data, n,
                  0.0f, c.data(), n);
    };
    row.reference_name = "cblas_sgemm";
  }

  direct();
  const std::vector<float> kiln_result = kiln::matmul(a2, b2).to_vector<float>();
  for (std::size_t i = 0; i < c.size(); ++i)
    // Libraries add in different orders (kiln may run oneDNN where the reference is OpenBLAS):
    // a bound that grows with the contraction length.
    if (std::abs(kiln_result[i] - c[i]) > 2e-6f * static_cast<float>(k) * (1.0f + std::abs(c[i])))
      throw kiln::Error(fmt::format("kiln and {} disagree at {}: {} vs {}", row.reference_name, i,
                                    kiln_result[i], c[i]));

  row.kiln = measure(plan, [&] { kiln::matmul(a2, b2); });
  row.kiln_value = flops / row.kiln->median * 1e-9;
  // kiln keeps OpenBLAS at one thread (its pool shares tiles out, lib/kernels/gemm.hpp); the
  // reference call gets the program's thread count, then kiln its setting back.
  openblas_set_num_threads(kiln::detail::num_threads());
  row.reference_value = flops / measure(plan, direct).median * 1e-9;
  openblas_set_num_threads(1);
  return row;
}

void print_table(const std::vector<Row>& rows) {
  fmt::print("{:<28} {:>10} {:<8} {:>7}   {:<14} {:>10} {:>7}   {}\n", "benchmark", "kiln", "unit",
             "spread", "reference", "ref value", "ratio", "note");
  fmt::print("{}\n", std::string(112, '-'));
  for (const Row& r : rows) {
    if (!r.kiln) {
      fmt::print("{:<28} {}\n", r.name, r.note);
      continue;
    }
    const std::string spread = fmt::format("{:.1f}%", r.kiln->spread() * 100);
    if (r.reference_value > 0)
      fmt::print("{:<28} {:>10.2f} {:<8} {:>7}   {:<14} {:>10.2f} {:>7.2f}   {}\n", r.name,
                 r.kiln_value, r.unit, spread, r.reference_name, r.reference_value,
                 r.kiln_value / r.reference_value, r.note);
    else
      fmt::print("{:<28} {:>10.2f} {:<8} {:>7}   {:<14} {:>10} {:>7}   {}\n", r.name, r.kiln_value,
                 r.unit, spread, "-", "-", "-", r.note);
  }
}

/// The rows as one JSON object (for bench/compare): the same figures as the table, plus the
/// median and percentiles in seconds per call.
void print_json(const std::vector<Row>& rows, bool quick) {
  fmt::print("{{\"program\": \"kiln_bench\", \"quick\": {}, \"threads\": {}, \"rows\": [", quick,
             kiln::detail::num_threads());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    fmt::print("{}\n  {{\"name\": {}, \"unit\": {}, ", i == 0 ? "" : ",", json_string(r.name),
               json_string(r.unit));
    if (r.kiln)
      fmt::print(
          "\"value\": {}, \"median_s\": {}, \"p10_s\": {}, \"p90_s\": {}, \"calls_per_sample\": "
          "{}, \"samples\": {}, ",
          r.kiln_value, r.kiln->median, r.kiln->p10, r.kiln->p90, r.kiln->calls_per_sample,
          r.kiln->samples);
    else
      fmt::print("\"error\": {}, ", json_string(r.note));
    fmt::print("\"reference\": {}, \"reference_value\": {}, \"note\": {}}}",
               json_string(r.reference_name), r.reference_value, json_string(r.note));
  }
  fmt::print("\n]}}\n");
}

}  // namespace

int main(int argc, char** argv) {
  const BenchArgs args = parse_bench_args(argc, argv);
  if (args.bad()) {
    fmt::print(stderr,
               "usage: kiln_bench [--quick] [--json]\n  --quick  one short iteration of each "
               "benchmark (a smoke test, not a measurement)\n  --json   print the results as "
               "JSON instead of a table\n");
    return args.unknown == "--help" || args.unknown == "-h" ? 0 : 2;
  }
  const bool quick = args.quick, json = args.json;
  const TimingPlan plan = quick ? TimingPlan::quick() : TimingPlan{};
  if (!json)
    fmt::print(
        "kiln_bench{}: {} hardware threads, kiln uses {}; median of {} samples, spread = "
        "(p90 - p10) / median\n\n",
        quick ? " --quick" : "", std::thread::hardware_concurrency(), kiln::detail::num_threads(),
        plan.samples);

  const std::vector<std::pair<std::string, std::function<Row()>>> benchmarks = {
      {"eager add, 4 f32", [&] { return bench_dispatch(plan); }},
      {"tanh(a*b+c)*0.5, 4M f32", [&] { return bench_chain(plan, false); }},
      {"tanh(a*b+c)*0.5, 4M, traced", [&] { return bench_chain(plan, true); }},
      {"matmul 32x10x80 f32", [&] { return bench_matmul(plan, 32, 10, 80, true); }},
      {"matmul 128x128x128 f32", [&] { return bench_matmul(plan, 128, 128, 128, true); }},
      {"matmul 1024x1024x1024 f32", [&] { return bench_matmul(plan, 1024, 1024, 1024, false); }},
  };
  std::vector<Row> rows;
  int failures = 0;
  for (const auto& [name, run] : benchmarks) {
    try {
      rows.push_back(run());
    } catch (const std::exception& e) {
      ++failures;
      rows.push_back(Row{name, "", {}, 0, "", 0, fmt::format("error: {}", e.what())});
    }
  }
  if (json)
    print_json(rows, quick);
  else
    print_table(rows);
  return failures == 0 ? 0 : 1;
}

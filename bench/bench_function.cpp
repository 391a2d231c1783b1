// kiln::function benchmarks: per-call overhead of a cached function, the unrolled 5-step RNN and
// LSTM (batch 32, input 10, hidden 20) eager against traced, the LSTM's GEMMs alone (its floor,
// in the same run), and the first-call cost (trace + optimize + plan). Usage: kiln_bench_function
// [--quick] [--json]
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;
using kiln::bench::measure;
using kiln::bench::TimingPlan;

constexpr std::int64_t batch = 32, input = 10, hidden = 20, steps = 5;

struct Weights {
  kiln::Variable w, u, b;
};

Weights make_weights(std::int64_t gates, std::uint64_t seed) {
  return {kiln::Variable(kiln::random::normal({input, gates * hidden}, 0, 0.3, seed), "w"),
          kiln::Variable(kiln::random::normal({hidden, gates * hidden}, 0, 0.3, seed + 1), "u"),
          kiln::Variable(kiln::zeros({gates * hidden}), "b")};
}

Tensor rnn(const Weights& p, const Tensor& xs) {
  Tensor h = kiln::zeros({batch, hidden});
  for (const Tensor& x : kiln::unstack(xs, 1))
    h = kiln::tanh(kiln::matmul(x, p.w.value()) + kiln::matmul(h, p.u.value()) + p.b.value());
  return h;
}

Tensor lstm(const Weights& p, const Tensor& xs) {
  Tensor h = kiln::zeros({batch, hidden}), c = kiln::zeros({batch, hidden});
  for (const Tensor& x : kiln::unstack(xs, 1)) {
    auto z = kiln::split(kiln::matmul(x, p.w.value()) + kiln::matmul(h, p.u.value()) + p.b.value(),
                         4, 1);
    Tensor i = kiln::sigmoid(z[0]), f = kiln::sigmoid(z[1]), g = kiln::tanh(z[2]),
           o = kiln::sigmoid(z[3]);
    c = f * c + i * g;
    h = o * kiln::tanh(c);
  }
  return h;
}

/// The LSTM's ten GEMMs and nothing else, as one cached function: each sum of five products
/// becomes five GEMMs accumulating into one buffer (matmul epilogues). Its time is the floor the
/// LSTM's time is compared with, measured in the same run (the VM's speed varies).
std::vector<Tensor> lstm_gemms(const Weights& p, const Tensor& xs, const Tensor& h) {
  Tensor xw, hu;
  for (const Tensor& x : kiln::unstack(xs, 1)) {
    const Tensor a = kiln::matmul(x, p.w.value()), b = kiln::matmul(h, p.u.value());
    xw = xw.defined() ? xw + a : a;
    hu = hu.defined() ? hu + b : b;
  }
  return {xw, hu};
}

/// One benchmark's figures: seconds per call eager and traced (0: not measured).
struct Result {
  std::string key;    // stable name for --json
  std::string label;  // table row
  double eager = 0, traced = 0;
};

void print_table(const std::vector<Result>& results, std::size_t lstm_nodes) {
  fmt::print("{:<48} {:>12} {:>12} {:>8}\n", "benchmark", "eager", "traced", "ratio");
  fmt::print("{}\n", std::string(84, '-'));
  for (const Result& r : results) {
    const bool nano = r.traced < 1e-6, micro = !nano && r.traced < 1e-4;
    const double scale = nano ? 1e9 : micro ? 1e6 : 1e3;
    const char* unit = nano ? "ns" : micro ? "us" : "ms";
    const std::string eager = r.eager == 0 ? "-" : fmt::format("{:.1f} {}", r.eager * scale, unit);
    const std::string ratio = r.eager == 0 ? "" : fmt::format("{:.2f}", r.traced / r.eager);
    fmt::print("{:<48} {:>12} {:>9.{}f} {} {:>8}\n", r.label, eager, r.traced * scale,
               r.eager == 0 ? 2 : 1, unit, ratio);
  }
  fmt::print("\nLSTM graph: {} nodes after optimization\n", lstm_nodes);
  for (const Result& r : results)
    if (r.key == "lstm_gemms")
      fmt::print("LSTM / its GEMMs alone: {:.2f}\n", results[2].traced / r.traced);
}

void print_json(const std::vector<Result>& results, std::size_t lstm_nodes, bool quick) {
  using kiln::bench::json_string;
  fmt::print(
      "{{\"program\": \"kiln_bench_function\", \"quick\": {}, \"lstm_nodes\": {}, \"rows\": [",
      quick, lstm_nodes);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    fmt::print("{}\n  {{\"name\": {}, \"label\": {}, \"eager_s\": {}, \"traced_s\": {}}}",
               i == 0 ? "" : ",", json_string(r.key), json_string(r.label), r.eager, r.traced);
  }
  fmt::print("\n]}}\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json") {
      json = true;
    } else {
      fmt::print(stderr,
                 "usage: kiln_bench_function [--quick] [--json]\n  --quick  one short iteration "
                 "of each benchmark (a smoke test)\n  --json   print the results as JSON\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  const TimingPlan plan = quick ? TimingPlan::quick() : TimingPlan{};
  if (!json)
    fmt::print("kiln_bench_function{}: median of {} samples\n\n", quick ? " --quick" : "",
               plan.samples);
  std::vector<Result> results;

  const Tensor a = kiln::tensor({1.f, 2.f, 3.f, 4.f}), b = kiln::tensor({0.5f, 0.5f, 0.5f, 0.5f});
  auto add = kiln::function([](const Tensor& x, const Tensor& y) { return x + y; });
  add(a, b);
  results.push_back({"add4", "1-op call, 4 f32 (target traced < 300 ns)",
                     measure(plan, [&] { kiln::add(a, b); }).median,
                     measure(plan, [&] { add(a, b); }).median});

  const Tensor xs = kiln::random::normal({batch, steps, input}, 0, 1, 7);
  const Weights rw = make_weights(1, 11), lw = make_weights(4, 21);
  auto rnn_fn = kiln::function([&](const Tensor& x) { return rnn(rw, x); });
  rnn_fn(xs);
  results.push_back({"rnn", "5-step RNN, batch 32, 10 -> 20",
                     measure(plan, [&] { rnn(rw, xs); }).median,
                     measure(plan, [&] { rnn_fn(xs); }).median});

  auto lstm_fn = kiln::function([&](const Tensor& x) { return lstm(lw, x); });
  const auto t0 = std::chrono::steady_clock::now();
  lstm_fn(xs);
  const double first_call =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  results.push_back({"lstm", "5-step LSTM, batch 32, 10 -> 20 (target < 25 us)",
                     measure(plan, [&] { lstm(lw, xs); }).median,
                     measure(plan, [&] { lstm_fn(xs); }).median});
  const Tensor h = kiln::random::normal({batch, hidden}, 0, 1, 8);
  auto gemms_fn =
      kiln::function([&](const Tensor& x, const Tensor& hh) { return lstm_gemms(lw, x, hh); });
  gemms_fn(xs, h);
  results.push_back({"lstm_gemms", "  its 10 GEMMs alone (the floor)", 0,
                     measure(plan, [&] { gemms_fn(xs, h); }).median});
  results.push_back(
      {"lstm_first_call", "LSTM first call: trace + optimize + plan + run", 0, first_call});

  const std::size_t nodes = lstm_fn.get_concrete_function(xs).graph().num_nodes();
  if (json)
    print_json(results, nodes, quick);
  else
    print_table(results, nodes);
  return 0;
}

// kiln::function benchmarks: per-call overhead of a cached function, the unrolled 5-step RNN and
// LSTM (batch 32, input 10, hidden 20) eager against traced, the LSTM's GEMMs alone (its floor,
// in the same run), the first-call cost (trace + optimize + plan), and the LSTM's batch split
// against the whole call with the other core idle and busy. Usage: kiln_bench_function [--quick]
// [--json]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"
#include "kernels/parallel.hpp"
#if defined(__linux__)
#include "load.hpp"
#endif

namespace {

using kiln::Tensor;
using kiln::bench::BenchArgs;
using kiln::bench::measure;
using kiln::bench::parse_bench_args;
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

/// The cached LSTM split (the default with two CPUs) against whole (KILN_NUM_THREADS=1), with the
/// other core idle and with a busy loop pinned to it, medians of alternating rounds.
struct SplitUnderLoad {
  std::string note;  // empty when measured, else why not
  bool failed = false;
  int cpu = -1, other_cpu = -1;
  int rounds = 0;
  double load_average = -1;  // of the machine, at the start
  /// Medians of seconds per call, and how the split function's calls ran (shares of calls).
  struct Figures {
    double split = 0, whole = 0;
    double on_helper = 0;   // second half on the helper
    double taken_back = 0;  // both halves on the caller (the helper was late, or busy)
    double ran_whole = 0;   // the helper was not ready: the whole plan
  } idle, loaded;
};

/// This row's timing: shorter samples than the others (four measurements per round).
TimingPlan split_row_plan(bool quick) {
  return quick ? TimingPlan::quick() : TimingPlan{0.1, 0.02, 11};
}

/// The whole LSTM, measured in a child process (kiln reads KILN_NUM_THREADS once per process):
/// this program with --whole-lstm-server. It greets with its thread count, then answers each
/// line "measure" with the median seconds per call.
int whole_lstm_server(bool quick) {
  const Tensor xs = kiln::random::normal({batch, steps, input}, 0, 1, 7);
  const Weights lw = make_weights(4, 21);
  auto lstm_fn = kiln::function([&](const Tensor& x) { return lstm(lw, x); });
  lstm_fn(xs);
  fmt::print("threads {}\n", kiln::detail::num_threads());
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::string_view(line) != "measure\n") return 2;
    fmt::print("{}\n", measure(split_row_plan(quick), [&] { lstm_fn(xs); }).median);
    std::fflush(stdout);
  }
  return 0;
}

double load_average() {
  std::ifstream file("/proc/loadavg");
  double one_minute = -1;
  file >> one_minute;
  return file ? one_minute : -1;
}

template <class Fn>
SplitUnderLoad split_under_load(bool quick, Fn&& call_split) {
  SplitUnderLoad out;
#if !defined(__linux__)
  (void)quick;
  (void)call_split;
  out.note = "not measured: needs Linux (CPU affinity)";
#else
  using kiln::bench::BusyLoop;
  using kiln::bench::ChildProcess;
  using kiln::bench::PinThread;
  const std::vector<int> cpus = kiln::bench::allowed_cpus();
  if (cpus.size() < 2 || kiln::detail::num_threads() < 2) {
    out.note = "not measured: needs two CPUs and KILN_NUM_THREADS unset or above 1";
    return out;
  }
  out.cpu = cpus[0];
  out.other_cpu = cpus[1];
  out.load_average = load_average();
  // Pinned after the helper thread exists (earlier rows made it), which stays free: the
  // scheduler places it, as for any call.
  call_split();
  PinThread pin(out.cpu);
  std::signal(SIGPIPE, SIG_IGN);  // a child that dies shows as an error, not as our death
  ChildProcess child({"--whole-lstm-server", quick ? "--quick" : "--full"}, {"KILN_NUM_THREADS=1"});
  const auto greeting = child.read_line();
  if (!pin.pinned() || !greeting || *greeting != "threads 1") {
    out.failed = true;
    out.note = !pin.pinned() ? "could not pin the benchmark to a CPU"
               : greeting    ? "the whole-call child runs " + *greeting
                             : "the whole-call child: " + child.error();
    return out;
  }
  const TimingPlan plan = split_row_plan(quick);
  // Times the split function; adds how its calls ran to `f`.
  auto split = [&](SplitUnderLoad::Figures& f) {
    const auto before = kiln::detail::pair_counts();
    const double median = measure(plan, call_split).median;
    const auto after = kiln::detail::pair_counts();
    const auto on_helper = static_cast<double>(after.on_helper - before.on_helper);
    const auto back = static_cast<double>(after.taken_back - before.taken_back + after.inline_both -
                                          before.inline_both);
    const auto whole_calls = static_cast<double>(after.not_ready - before.not_ready);
    const double calls = std::max(1.0, on_helper + back + whole_calls);
    f.on_helper += on_helper / calls;
    f.taken_back += back / calls;
    f.ran_whole += whole_calls / calls;
    return median;
  };
  auto whole = [&]() -> std::optional<double> {
    const auto answer = child.request("measure");
    if (!answer) return std::nullopt;
    return std::strtod(answer->c_str(), nullptr);
  };
  out.rounds = quick ? 1 : 3;
  std::vector<double> split_idle, whole_idle, split_loaded, whole_loaded;
  // One round: idle, then loaded; split first in even rounds, whole first in odd ones.
  auto measure_pair = [&](std::vector<double>& splits, std::vector<double>& wholes,
                          SplitUnderLoad::Figures& f, bool whole_first) {
    std::optional<double> w;
    if (whole_first) w = whole();
    splits.push_back(split(f));
    if (!whole_first) w = whole();
    if (!w) return false;
    wholes.push_back(*w);
    return true;
  };
  for (int r = 0; r < out.rounds; ++r) {
    const bool whole_first = r % 2 == 1;
    bool ok = measure_pair(split_idle, whole_idle, out.idle, whole_first);
    if (ok) {
      const BusyLoop busy(out.other_cpu);
      if (!busy.pinned()) {
        out.failed = true;
        out.note = "could not pin the busy loop to a CPU";
        return out;
      }
      if (!quick) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ok = measure_pair(split_loaded, whole_loaded, out.loaded, whole_first);
    }
    if (!ok) {
      out.failed = true;
      out.note = "the whole-call child: " + child.error();
      return out;
    }
    // The busy loop has stopped; the helper's back-off from it (1 s at most, see
    // lib/kernels/parallel_pair.cpp) ends before the next idle measurement.
    if (!quick && r + 1 < out.rounds) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (auto [f, splits, wholes] : {std::tuple{&out.idle, &split_idle, &whole_idle},
                                   std::tuple{&out.loaded, &split_loaded, &whole_loaded}}) {
    f->split = median(*splits);
    f->whole = median(*wholes);
    for (double* share : {&f->on_helper, &f->taken_back, &f->ran_whole})
      *share /= static_cast<double>(out.rounds);
  }
#endif
  return out;
}

void print_split_table(const SplitUnderLoad& s) {
  fmt::print("\nLSTM batch split against whole (KILN_NUM_THREADS=1, in a child process)");
  if (!s.note.empty()) {
    fmt::print(": {}\n", s.note);
    return;
  }
  fmt::print(", on CPU {}, the other core CPU {}:\n", s.cpu, s.other_cpu);
  fmt::print("{:<40} {:>10} {:>10} {:>12}   {}\n", "other core", "split", "whole", "split/whole",
             "split calls: helper / taken back / whole");
  for (const auto& [label, f] : {std::pair{"idle", s.idle},
                                 std::pair{"busy loop pinned to it (target <= 1.05)", s.loaded}}) {
    fmt::print("{:<40} {:>7.2f} us {:>7.2f} us {:>12.2f}   {:.0f}% / {:.0f}% / {:.0f}%\n", label,
               f.split * 1e6, f.whole * 1e6, f.split / f.whole, f.on_helper * 100,
               f.taken_back * 100, f.ran_whole * 100);
  }
  fmt::print("(medians of {} alternating rounds; load average {:.2f} at the start)\n", s.rounds,
             s.load_average);
}

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

void print_json(const std::vector<Result>& results, std::size_t lstm_nodes, bool quick,
                const SplitUnderLoad& split) {
  using kiln::bench::json_string;
  fmt::print(
      "{{\"program\": \"kiln_bench_function\", \"quick\": {}, \"lstm_nodes\": {}, \"rows\": [",
      quick, lstm_nodes);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    fmt::print("{}\n  {{\"name\": {}, \"label\": {}, \"eager_s\": {}, \"traced_s\": {}}}",
               i == 0 ? "" : ",", json_string(r.key), json_string(r.label), r.eager, r.traced);
  }
  fmt::print("\n], \"split_under_load\": ");
  if (!split.note.empty()) {
    fmt::print("{{\"note\": {}, \"failed\": {}}}}}\n", json_string(split.note), split.failed);
    return;
  }
  auto figures = [](const SplitUnderLoad::Figures& f) {
    return fmt::format(
        "{{\"split_s\": {}, \"whole_s\": {}, \"split_over_whole\": {}, \"on_helper\": {}, "
        "\"taken_back\": {}, \"ran_whole\": {}}}",
        f.split, f.whole, f.split / f.whole, f.on_helper, f.taken_back, f.ran_whole);
  };
  fmt::print(
      "{{\"cpu\": {}, \"other_cpu\": {}, \"rounds\": {}, \"load_average\": {}, \"idle\": {}, "
      "\"loaded\": {}}}}}\n",
      split.cpu, split.other_cpu, split.rounds, split.load_average, figures(split.idle),
      figures(split.loaded));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--whole-lstm-server")
    return whole_lstm_server(std::string_view(argv[2]) == "--quick");
  const BenchArgs args = parse_bench_args(argc, argv);
  if (args.bad()) {
    fmt::print(stderr,
               "usage: kiln_bench_function [--quick] [--json]\n  --quick  one short iteration "
               "of each benchmark (a smoke test)\n  --json   print the results as JSON\n");
    return args.unknown == "--help" || args.unknown == "-h" ? 0 : 2;
  }
  const bool quick = args.quick, json = args.json;
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

  const SplitUnderLoad split = split_under_load(quick, [&] { lstm_fn(xs); });

  const std::size_t nodes = lstm_fn.get_concrete_function(xs).graph().num_nodes();
  if (json) {
    print_json(results, nodes, quick, split);
  } else {
    print_table(results, nodes);
    print_split_table(split);
  }
  return split.failed ? 1 : 0;
}

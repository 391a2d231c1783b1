// Sequence-length scaling (issue 17): one LSTM(256) layer, batch 64, 128 features, over
// T = 5, 50, 200, 1000; its forward pass and a train step (MSE of the last output against a
// target, plain SGD), each a kiln::function, in each form of the variant table below. Per T: the
// cached call's median, the first call at that T (T's first: trace + optimize + plan + run; a
// later T of a dynamic-time form: a new plan for the new dim binding, no retrace), the
// tracing_count() and the graph's node count after it, and the train step's peak memory.
// Usage: kiln_bench_scaling [--quick] [--json] [--save-init PATH]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"
#include "lstm_model.hpp"

namespace {

using kiln::Tensor;
using kiln::bench::measure;
using kiln::bench::Timing;
using kiln::bench::TimingPlan;

constexpr std::int64_t batch = 64, features = 128, units = 256;
constexpr double learning_rate = 0.1;
constexpr std::uint64_t weight_seed = 5;

using Apply = kiln::bench::LstmApply;

/// One kiln form of the layer: a row of the variant table.
struct Variant {
  std::string key;    // stable name for --json (bench/compare and bench/plot_scaling.py)
  std::string label;  // table row
  kiln::nn::LSTMOptions options;
  /// The time dim is -1 in the input_signature (one trace serves every T); else static (one
  /// trace per T).
  bool dynamic_time;
  /// Lengths above this are skipped (0: none), with `skip_reason` in the table and the JSON.
  std::int64_t max_length = 0;
  std::string skip_reason = {};
  Apply apply = [](kiln::nn::LSTM& layer, const Tensor& x) { return layer(x); };
};

/// The kiln forms measured. A checkpointed form is one more row here, e.g. with an LSTMOptions
/// field passing ScanOptions::checkpoint_every through (static time: that option applies to a
/// static trip count), or an `apply` that wraps the layer's call in kiln::checkpoint;
/// bench/compare and bench/plot_scaling.py show every row they find. A form too slow to trace
/// at the longest lengths sets max_length and says why in skip_reason. (The unrolled form at
/// T = 1000, a 10,002-node forward and 31,019-node train graph, traces and runs its first call
/// in about 3 s: measured.)
std::vector<Variant> variants() {
  return {
      {.key = "scan", .label = "kiln scan", .options = {}, .dynamic_time = true},
      {.key = "unroll",
       .label = "kiln unrolled",
       .options = {.unroll = true},
       .dynamic_time = false},
      // Keeps the carries of every 32nd step only; the split into segments needs a static T.
      {.key = "scan_checkpoint",
       .label = "kiln scan, remat 32",
       .options = {.checkpoint_every = 32},
       .dynamic_time = false},
  };
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The cached calls' timing: 21 samples of >= 30 ms for short calls, fewer (at least 5) for
/// long ones, so the whole run stays short (a T = 1000 train step takes seconds).
TimingPlan plan_for(double seconds_per_call, bool quick) {
  if (quick) return TimingPlan::quick();
  constexpr double budget = 2.0;  // seconds of samples per measurement, about
  const int samples = std::clamp(static_cast<int>(budget / seconds_per_call), 5, 21);
  return {0.1, 0.03, samples};
}

/// Bytes one call of fn allocates at its peak above what was live before it.
template <class Fn>
std::int64_t step_peak_bytes(Fn&& fn) {
  const std::int64_t live_before = kiln::memory_stats().live_bytes;
  kiln::reset_peak_bytes();
  fn();
  return kiln::memory_stats().peak_bytes - live_before;
}

/// The layer of one form with the train step's optimizer; weights from weight_seed, so every
/// form starts from the same ones.
struct Model : kiln::bench::LstmModel {
  explicit Model(const Variant& v)
      : kiln::bench::LstmModel(units, v.options, learning_rate, v.apply) {}
  void create_weights(const Tensor& x) { kiln::bench::LstmModel::create_weights(x, weight_seed); }
};

/// One (form, workload, T) measurement.
struct Row {
  std::string workload;  // "forward" or "train"
  std::int64_t length = 0;
  Timing cached = {};
  double first_call_s = 0;
  int tracing_count = 0;  // after this T's first call
  std::size_t cache_size = 0;
  std::size_t nodes = 0;
  std::int64_t plan_bytes_added = 0;  // graph and plan bytes the first call at this T added
  std::int64_t peak_bytes = 0;        // train: peak above live of one cached step
  std::vector<float> losses = {};     // train: the first two steps' losses from the initial weights
  std::string skipped = {};           // why it was not measured (then nothing else is set)
};

struct Inputs {
  std::map<std::int64_t, Tensor> x;  // per T: [batch, T, features] ~ N(0, 1)
  Tensor y;                          // [batch, units] ~ U(-0.5, 0.5)
};

float max_diff(const Tensor& a, const Tensor& b) {
  return kiln::max(kiln::abs(a - b)).item<float>();
}

struct Failure {
  std::string what;
};

/// Runs the first call of `fn` at T (timed, with what it added to the caches), then the cached
/// calls; fills the row's shared columns.
template <class Fn, class First>
void measure_row(Row& row, const Fn& fn, First&& first) {
  const std::int64_t graph_bytes_before = kiln::memory_stats().graph_bytes;
  const auto t0 = std::chrono::steady_clock::now();
  first();
  row.first_call_s = seconds_since(t0);
  row.plan_bytes_added = kiln::memory_stats().graph_bytes - graph_bytes_before;
  row.tracing_count = fn.tracing_count();
  row.cache_size = fn.cache_size();
}

/// Measures one form over every length: forward rows then train rows. ref_out and ref_losses
/// hold the forward outputs and first two train losses per T of the first form measured (the
/// scan); every other form must match them.
std::vector<Row> run_variant(const Variant& v, const Inputs& in, bool quick,
                             std::map<std::int64_t, Tensor>& ref_out,
                             std::map<std::int64_t, std::vector<float>>& ref_losses) {
  std::vector<Row> rows;
  const Tensor& x_first = in.x.begin()->second;
  kiln::FunctionOptions fo{.name = v.key + "_forward"}, to{.name = v.key + "_train"};
  if (v.dynamic_time) {
    fo.input_signature = {kiln::TensorSpec({batch, -1, features})};
    to.input_signature = {kiln::TensorSpec({batch, -1, features}),
                          kiln::TensorSpec({batch, units})};
  }
  Model fwd_model(v), train_model(v);
  fwd_model.create_weights(x_first);
  train_model.create_weights(x_first);
  auto forward = kiln::function([&](const Tensor& x) { return fwd_model.forward(x); }, fo);
  auto train =
      kiln::function([&](const Tensor& x, const Tensor& y) { return train_model.step(x, y); }, to);

  for (const auto& [length, x] : in.x) {
    Row row{.workload = "forward", .length = length};
    if (v.max_length > 0 && length > v.max_length) {
      row.skipped = v.skip_reason;
      rows.push_back(row);
      continue;
    }
    Tensor out;
    measure_row(row, forward, [&] { out = forward(x); });
    if (auto it = ref_out.find(length); it == ref_out.end()) {
      ref_out[length] = out;
    } else if (const float d = max_diff(out, it->second); !(d <= 1e-4f)) {
      throw Failure{
          fmt::format("{} forward at T={} differs from the scan form's by {}", v.label, length, d)};
    }
    row.nodes = forward.get_concrete_function(x).graph().num_nodes();
    row.cached = measure(plan_for(row.first_call_s, quick), [&] { forward(x); });
    rows.push_back(row);
  }
  for (const auto& [length, x] : in.x) {
    Row row{.workload = "train", .length = length};
    if (v.max_length > 0 && length > v.max_length) {
      row.skipped = v.skip_reason;
      rows.push_back(row);
      continue;
    }
    // Each T starts from the initial weights: its first two losses are comparable across
    // forms and with the peers (the second checks the gradient and the update).
    train_model.restore();
    measure_row(row, train, [&] { row.losses.push_back(train(x, in.y).item<float>()); });
    row.losses.push_back(train(x, in.y).item<float>());
    for (float l : row.losses)
      if (!std::isfinite(l))
        throw Failure{fmt::format("{} train at T={}: loss {}", v.label, length, l)};
    if (auto it = ref_losses.find(length); it == ref_losses.end()) {
      ref_losses[length] = row.losses;
    } else {
      for (std::size_t i = 0; i < row.losses.size(); ++i)
        if (!(std::abs(row.losses[i] - it->second[i]) <= 1e-5f * std::max(1.f, it->second[i])))
          throw Failure{fmt::format("{} train at T={}: losses {} differ from the scan form's {}",
                                    v.label, length, fmt::join(row.losses, ", "),
                                    fmt::join(it->second, ", "))};
    }
    row.nodes = train.get_concrete_function(x, in.y).graph().num_nodes();
    row.cached = measure(plan_for(row.first_call_s, quick), [&] { train(x, in.y); });
    row.peak_bytes = step_peak_bytes([&] { train(x, in.y); });
    rows.push_back(row);
  }
  return rows;
}

std::string fmt_time(double s) {
  return s < 1e-3 ? fmt::format("{:.1f} us", s * 1e6)
         : s < 1  ? fmt::format("{:.2f} ms", s * 1e3)
                  : fmt::format("{:.2f} s", s);
}

void print_table(const std::vector<Variant>& vs, const std::vector<std::vector<Row>>& all) {
  fmt::print("{:<14} {:<8} {:>5} {:>10} {:>10} {:>11} {:>7} {:>6} {:>11}\n", "form", "workload",
             "T", "cached", "per step", "first call", "traces", "nodes", "peak MiB");
  fmt::print("{}\n", std::string(90, '-'));
  for (std::size_t i = 0; i < vs.size(); ++i)
    for (const Row& r : all[i]) {
      if (!r.skipped.empty()) {
        fmt::print("{:<14} {:<8} {:>5}  skipped: {}\n", vs[i].label, r.workload, r.length,
                   r.skipped);
        continue;
      }
      fmt::print("{:<14} {:<8} {:>5} {:>10} {:>10} {:>11} {:>7} {:>6} {:>11}\n", vs[i].label,
                 r.workload, r.length, fmt_time(r.cached.median),
                 fmt_time(r.cached.median / static_cast<double>(r.length)),
                 fmt_time(r.first_call_s), r.tracing_count, r.nodes,
                 r.workload == "train"
                     ? fmt::format("{:.1f}", static_cast<double>(r.peak_bytes) / (1 << 20))
                     : "-");
    }
}

void print_json(const std::vector<Variant>& vs, const std::vector<std::vector<Row>>& all,
                const std::vector<std::int64_t>& lengths, bool quick) {
  using kiln::bench::json_string;
  fmt::print(
      "{{\"program\": \"kiln_bench_scaling\", \"quick\": {}, \"batch\": {}, \"features\": {}, "
      "\"units\": {}, \"learning_rate\": {}, \"lengths\": [{}], \"variants\": [\n",
      quick, batch, features, units, learning_rate, fmt::join(lengths, ", "));
  for (std::size_t i = 0; i < vs.size(); ++i) {
    fmt::print(" {{\"key\": {}, \"label\": {}, \"dynamic_time\": {}, \"rows\": [\n",
               json_string(vs[i].key), json_string(vs[i].label), vs[i].dynamic_time);
    for (std::size_t j = 0; j < all[i].size(); ++j) {
      const Row& r = all[i][j];
      const char* sep = j + 1 < all[i].size() ? "," : "";
      if (!r.skipped.empty()) {
        fmt::print("  {{\"workload\": \"{}\", \"T\": {}, \"skipped\": {}}}{}\n", r.workload,
                   r.length, json_string(r.skipped), sep);
        continue;
      }
      fmt::print(
          "  {{\"workload\": \"{}\", \"T\": {}, \"median_s\": {}, \"p10_s\": {}, \"p90_s\": {}, "
          "\"samples\": {}, \"calls_per_sample\": {}, \"first_call_s\": {}, \"tracing_count\": "
          "{}, \"cache_size\": {}, \"nodes\": {}, \"plan_bytes_added\": {}, \"peak_bytes\": {}, "
          "\"losses\": [{}]}}{}\n",
          r.workload, r.length, r.cached.median, r.cached.p10, r.cached.p90, r.cached.samples,
          r.cached.calls_per_sample, r.first_call_s, r.tracing_count, r.cache_size, r.nodes,
          r.plan_bytes_added, r.peak_bytes, fmt::join(r.losses, ", "), sep);
    }
    fmt::print(" ]}}{}\n", i + 1 < vs.size() ? "," : "");
  }
  fmt::print("]}}\n");
}

int usage(std::string_view arg) {
  fmt::print(
      stderr,
      "usage: kiln_bench_scaling [--quick] [--json] [--save-init PATH]\n"
      "  --quick           T = 3 and 8, one call per measurement (a smoke test)\n"
      "  --json            print the results as JSON\n"
      "  --save-init PATH  write the initial weights, x per T, y, and the scan form's\n"
      "                    forward outputs and train losses per T as .npz (for the peers)\n");
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv, true);
  if (args.bad()) return usage(args.unknown);
  const bool quick = args.quick, json = args.json;
  const std::string& init_path = args.init_path;
  const std::vector<std::int64_t> lengths =
      quick ? std::vector<std::int64_t>{3, 8} : std::vector<std::int64_t>{5, 50, 200, 1000};
  Inputs in;
  for (std::size_t i = 0; i < lengths.size(); ++i)
    in.x[lengths[i]] = kiln::random::normal({batch, lengths[i], features}, 0, 1, 100 + i);
  in.y = kiln::random::uniform({batch, units}, -0.5, 0.5, 99);

  const std::vector<Variant> vs = variants();
  std::vector<std::vector<Row>> all;
  std::map<std::int64_t, Tensor> ref_out;
  std::map<std::int64_t, std::vector<float>> ref_losses;
  try {
    for (const Variant& v : vs) all.push_back(run_variant(v, in, quick, ref_out, ref_losses));
  } catch (const Failure& f) {
    fmt::print(stderr, "kiln_bench_scaling: {}\n", f.what);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln_bench_scaling: {}\n", e.what());
    return 1;
  }
  if (!init_path.empty()) {
    Model m(vs.front());
    m.create_weights(in.x.begin()->second);
    std::map<std::string, Tensor> arrays{{"y", in.y}};
    for (const auto& [name, var] : m.layer.named_variables())  // ".../kernel" -> "kernel"
      arrays[name.substr(name.rfind('/') + 1)] = var.value();
    for (const auto& [length, x] : in.x) {
      arrays[fmt::format("x_{}", length)] = x;
      arrays[fmt::format("forward_{}", length)] = ref_out.at(length);
      arrays[fmt::format("losses_{}", length)] = kiln::tensor(ref_losses.at(length));
    }
    kiln::io::save_npz(init_path, arrays);
  }

  if (json)
    print_json(vs, all, lengths, quick);
  else
    print_table(vs, all);
  // The dynamic-time forms must have traced once for every length.
  for (std::size_t i = 0; i < vs.size(); ++i)
    for (const Row& r : all[i])
      if (vs[i].dynamic_time && r.skipped.empty() && r.tracing_count != 1) {
        fmt::print(stderr, "kiln_bench_scaling: {} {} traced {} times\n", vs[i].label, r.workload,
                   r.tracing_count);
        return 1;
      }
  return 0;
}

// Workload 7 of bench/compare (issue 18): one LSTM layer, batch 64, 128 features, hidden 256 and
// 512, T = 50 and 200; and one GRU layer (Keras's reset_after form, as PyTorch's) at the same
// hidden sizes, T = 50. Per (cell, hidden, T): the cached call of the forward pass (the last h)
// and of a train step (MSE of the last h against a fixed target, the gradient, SGD with learning
// rate 0.1), each a kiln::function around nn::LSTM(units) or nn::GRU(units) in its default form
// (the fused recurrence) with a static input_signature. --save-init writes the weights, inputs
// and kiln's results as .npz for the peers (bench/peers/peer_*_sizes.py), as kiln_bench_scaling
// does; the GRU's arrays carry a "gru_" prefix.
// Usage: kiln_bench_lstm_sizes [--quick] [--json] [--save-init PATH] [--lengths T,...]
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <exception>
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

constexpr std::int64_t batch = 64, features = 128;
constexpr double learning_rate = 0.1;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// 21 samples of >= 30 ms for short calls, fewer (at least 3) for long ones: about 1 s of
/// samples per figure, so the whole family stays within a few minutes.
TimingPlan plan_for(double seconds_per_call, bool quick) {
  if (quick) return TimingPlan::quick();
  constexpr double budget = 1.0;
  const int samples = std::clamp(static_cast<int>(budget / seconds_per_call), 3, 21);
  return {0.1, 0.03, samples};
}

/// The layer and the train step's optimizer; weights from a seed per hidden size, so the
/// forward and train models (and --save-init) hold the same ones. Base is
/// kiln::bench::LstmModel or GruModel.
template <class Base>
struct Model : Base {
  explicit Model(std::int64_t units) : Base(units, {}, learning_rate) {}
  void create_weights(const Tensor& x, std::int64_t units) {
    Base::create_weights(x, static_cast<std::uint64_t>(units));
  }
};

struct Row {
  std::string cell;      // "lstm" or "gru"
  std::string workload;  // "forward" or "train"
  std::int64_t units = 0, length = 0;
  Timing cached = {};
  double first_call_s = 0;  // trace + optimize + plan + run
  std::size_t nodes = 0;
  std::vector<float> losses = {};  // train: the first two losses from the initial weights
};

struct Failure {
  std::string what;
};

/// The forward and train rows of one cell ("lstm": LstmModel, "gru": GruModel) and hidden size
/// over the lengths of `xs`; adds the forward outputs (the last h per T) and the arrays the
/// peers need to `arrays` (the GRU's names prefixed "gru_").
template <class Base>
std::vector<Row> run_units(const std::string& cell, std::int64_t units,
                           const std::map<std::int64_t, Tensor>& xs, const Tensor& y, bool quick,
                           std::map<std::string, Tensor>& arrays) {
  const std::string prefix = cell == "lstm" ? "" : cell + "_";
  std::vector<Row> rows;
  Model<Base> fwd(units), train(units);
  fwd.create_weights(xs.begin()->second, units);
  train.create_weights(xs.begin()->second, units);
  for (const auto& [name, var] : fwd.layer.named_variables())  // ".../kernel" -> "kernel_256"
    arrays[fmt::format("{}{}_{}", prefix, name.substr(name.rfind('/') + 1), units)] = var.value();
  for (const auto& [length, x] : xs) {
    const kiln::TensorSpec x_spec({batch, length, features});
    auto forward = kiln::function(
        [&](const Tensor& in) { return fwd.layer(in); },
        {.name = fmt::format("{}{}_forward_{}", cell, units, length), .input_signature = {x_spec}});
    Row row{.cell = cell, .workload = "forward", .units = units, .length = length};
    auto t0 = std::chrono::steady_clock::now();
    const Tensor out = forward(x);
    row.first_call_s = seconds_since(t0);
    const Tensor eager = fwd.layer(x);
    if (const float d = kiln::max(kiln::abs(out - eager)).item<float>(); !(d <= 1e-4f))
      throw Failure{
          fmt::format("{} forward {}x{}: traced and eager differ by {}", cell, units, length, d)};
    arrays[fmt::format("{}forward_{}_{}", prefix, units, length)] = out;
    row.nodes = forward.get_concrete_function(x).graph().num_nodes();
    row.cached = measure(plan_for(row.first_call_s, quick), [&] { forward(x); });
    rows.push_back(row);
  }
  for (const auto& [length, x] : xs) {
    const kiln::TensorSpec x_spec({batch, length, features}), y_spec({batch, units});
    auto step = kiln::function(
        [&](const Tensor& in, const Tensor& target) { return train.step(in, target); },
        {.name = fmt::format("{}{}_train_{}", cell, units, length),
         .input_signature = {x_spec, y_spec}});
    Row row{.cell = cell, .workload = "train", .units = units, .length = length};
    train.restore();  // every T starts from the initial weights, as the peers do
    auto t0 = std::chrono::steady_clock::now();
    row.losses.push_back(step(x, y).template item<float>());
    row.first_call_s = seconds_since(t0);
    row.losses.push_back(step(x, y).template item<float>());
    for (const float l : row.losses)
      if (!std::isfinite(l))
        throw Failure{fmt::format("{} train {}x{}: loss {}", cell, units, length, l)};
    arrays[fmt::format("{}losses_{}_{}", prefix, units, length)] = kiln::tensor(row.losses);
    row.nodes = step.get_concrete_function(x, y).graph().num_nodes();
    row.cached = measure(plan_for(row.first_call_s, quick), [&] { step(x, y); });
    rows.push_back(row);
  }
  return rows;
}

std::string fmt_time(double s) {
  return s < 1e-3 ? fmt::format("{:.1f} us", s * 1e6)
         : s < 1  ? fmt::format("{:.2f} ms", s * 1e3)
                  : fmt::format("{:.2f} s", s);
}

void print_table(const std::vector<Row>& rows) {
  fmt::print("{:<5} {:<8} {:>6} {:>5} {:>11} {:>11} {:>8} {:>6}\n", "cell", "workload", "hidden",
             "T", "cached", "first call", "spread", "nodes");
  fmt::print("{}\n", std::string(67, '-'));
  for (const Row& r : rows)
    fmt::print("{:<5} {:<8} {:>6} {:>5} {:>11} {:>11} {:>7.1f}% {:>6}\n", r.cell, r.workload,
               r.units, r.length, fmt_time(r.cached.median), fmt_time(r.first_call_s),
               r.cached.spread() * 100, r.nodes);
}

void print_json(const std::vector<Row>& rows, const std::vector<std::int64_t>& hidden,
                const std::vector<std::int64_t>& lengths,
                const std::vector<std::int64_t>& gru_lengths, bool quick) {
  fmt::print(
      "{{\"program\": \"kiln_bench_lstm_sizes\", \"quick\": {}, \"batch\": {}, \"features\": {}, "
      "\"learning_rate\": {}, \"hidden\": [{}], \"lengths\": [{}], \"gru_lengths\": [{}], "
      "\"rows\": [\n",
      quick, batch, features, learning_rate, fmt::join(hidden, ", "), fmt::join(lengths, ", "),
      fmt::join(gru_lengths, ", "));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    fmt::print(
        "  {{\"cell\": \"{}\", \"workload\": \"{}\", \"hidden\": {}, \"T\": {}, \"median_s\": {}, "
        "\"p10_s\": {}, \"p90_s\": {}, \"samples\": {}, \"calls_per_sample\": {}, "
        "\"first_call_s\": {}, \"nodes\": {}, \"losses\": [{}]}}{}\n",
        r.cell, r.workload, r.units, r.length, r.cached.median, r.cached.p10, r.cached.p90,
        r.cached.samples, r.cached.calls_per_sample, r.first_call_s, r.nodes,
        fmt::join(r.losses, ", "), i + 1 < rows.size() ? "," : "");
  }
  fmt::print("]}}\n");
}

int usage(std::string_view arg) {
  fmt::print(
      stderr,
      "usage: kiln_bench_lstm_sizes [--quick] [--json] [--save-init PATH] [--lengths T,...]\n"
      "  --quick           hidden 16 and 32, T = 3 and 8 (the GRU 3), one call per\n"
      "                    measurement\n"
      "  --lengths T,...   these lengths in place of 50 and 200 (the GRU the first);\n"
      "                    the peers read them from --save-init's file\n"
      "  --json            print the results as JSON\n"
      "  --save-init PATH  write the weights per cell and hidden size, x per T, y per\n"
      "                    hidden size and kiln's forward outputs and train losses as .npz\n");
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

/// The lengths of "--lengths 1,5" (empty: absent), taken out of argv; a bad list is an error
/// naming it.
std::vector<std::int64_t> take_lengths(int& argc, char** argv, bool& bad) {
  std::vector<std::int64_t> lengths;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--lengths") {
      argv[kept++] = argv[i];
      continue;
    }
    if (i + 1 == argc) {
      bad = true;
      break;
    }
    std::string_view list = argv[++i];
    while (!list.empty()) {
      const std::size_t comma = std::min(list.find(','), list.size());
      std::int64_t t = 0;
      const auto [end, error] = std::from_chars(list.data(), list.data() + comma, t);
      if (error != std::errc() || end != list.data() + comma || t < 1) {
        bad = true;
        break;
      }
      lengths.push_back(t);
      list.remove_prefix(std::min(comma + 1, list.size()));
    }
    if (lengths.empty()) bad = true;
  }
  argc = kept;
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  return lengths;
}

int main(int argc, char** argv) {
  bool bad_lengths = false;
  const std::vector<std::int64_t> chosen = take_lengths(argc, argv, bad_lengths);
  if (bad_lengths) {
    fmt::print(stderr, "kiln_bench_lstm_sizes: --lengths takes positive lengths, as 1,5\n");
    return 2;
  }
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv, true);
  if (args.bad()) return usage(args.unknown);
  const bool quick = args.quick;
  const std::vector<std::int64_t> hidden =
      quick ? std::vector<std::int64_t>{16, 32} : std::vector<std::int64_t>{256, 512};
  const std::vector<std::int64_t> lengths = !chosen.empty() ? chosen
                                            : quick         ? std::vector<std::int64_t>{3, 8}
                                                            : std::vector<std::int64_t>{50, 200};
  // The GRU runs at the shortest length only: its rows show the same fused recurrence on a
  // second cell without doubling the family's run time.
  const std::vector<std::int64_t> gru_lengths{lengths.front()};
  std::map<std::string, Tensor> arrays{{"hidden", kiln::tensor(hidden)},
                                       {"lengths", kiln::tensor(lengths)},
                                       {"gru_lengths", kiln::tensor(gru_lengths)}};
  std::map<std::int64_t, Tensor> xs, gru_xs;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    xs[lengths[i]] = kiln::random::normal({batch, lengths[i], features}, 0, 1, 200 + i);
    arrays[fmt::format("x_{}", lengths[i])] = xs[lengths[i]];
  }
  for (const std::int64_t length : gru_lengths) gru_xs[length] = xs.at(length);
  std::vector<Row> rows;
  try {
    std::map<std::int64_t, Tensor> ys;
    for (const std::int64_t units : hidden) {
      ys[units] = kiln::random::uniform({batch, units}, -0.5, 0.5, 300 + units);
      arrays[fmt::format("y_{}", units)] = ys[units];
    }
    for (const std::int64_t units : hidden)
      for (Row& r : run_units<kiln::bench::LstmModel>("lstm", units, xs, ys[units], quick, arrays))
        rows.push_back(std::move(r));
    for (const std::int64_t units : hidden)
      for (Row& r :
           run_units<kiln::bench::GruModel>("gru", units, gru_xs, ys[units], quick, arrays))
        rows.push_back(std::move(r));
  } catch (const Failure& f) {
    fmt::print(stderr, "kiln_bench_lstm_sizes: {}\n", f.what);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln_bench_lstm_sizes: {}\n", e.what());
    return 1;
  }
  if (!args.init_path.empty()) kiln::io::save_npz(args.init_path, arrays);
  if (args.json)
    print_json(rows, hidden, lengths, gru_lengths, quick);
  else
    print_table(rows);
  return 0;
}

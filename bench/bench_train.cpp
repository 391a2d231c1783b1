// The train step of user scenario 2: LSTM(64, return_sequences) -> LSTM(32) -> Dense(1,
// sigmoid), binary cross-entropy, Adam; batch 16, sequence 5, features 10. Eager against traced
// (forward + backward + Adam update in one cached graph), in one run: time per step, the first
// traced call, and the memory one step allocates (peak bytes above the live bytes before it).
// Usage: kiln_bench_train [--quick] [--json] [--save-init PATH]
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;
using kiln::bench::BenchArgs;
using kiln::bench::measure;
using kiln::bench::parse_bench_args;
using kiln::bench::TimingPlan;

constexpr std::int64_t batch = 16, steps = 5, features = 10;
constexpr int checked_steps = 3;  // losses compared eager against traced (and by bench/compare)

struct Net : kiln::Module {
  // Five fixed steps: unrolled, the fast form for short fixed sequences (the default is a scan).
  kiln::nn::LSTM l1{64, {.return_sequences = true, .unroll = true}}, l2{32, {.unroll = true}};
  kiln::nn::Dense out{1, kiln::nn::Activation::sigmoid};
  Net() : Module("net") {
    add_module("l1", l1);
    add_module("l2", l2);
    add_module("out", out);
  }
  Tensor operator()(const Tensor& x) { return out(l2(l1(x))); }
};

/// One model, its optimizer and its train step (eager: a plain call; traced: kiln::function).
struct Trainer {
  Net net;
  kiln::optim::Adam opt{{.learning_rate = 1e-3}};
  Tensor step(const Tensor& x, const Tensor& y) {
    std::vector<kiln::Variable> vars;
    std::vector<Tensor> grads;
    Tensor loss;
    {
      kiln::GradientTape tape;
      loss = kiln::nn::losses::binary_crossentropy(y, net(x));
      vars = net.trainable_variables();
      grads = tape.gradient(loss, vars);
    }
    opt.apply(grads, vars);
    return loss;
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Bytes one call of fn allocates at its peak above what was live before it (its temporaries,
/// its result and any buffers it keeps), from kiln's memory counters.
template <class Fn>
std::int64_t step_peak_bytes(Fn&& fn) {
  const std::int64_t live_before = kiln::memory_stats().live_bytes;
  kiln::reset_peak_bytes();
  fn();
  return kiln::memory_stats().peak_bytes - live_before;
}

/// What a peer needs to start from kiln's state: the initial weights (Keras layout, named
/// "l1/kernel", ...), x and y. Tensors are immutable, so these stay the initial values.
std::map<std::string, Tensor> initial_state(const Net& net, const Tensor& x, const Tensor& y) {
  std::map<std::string, Tensor> arrays{{"x", x}, {"y", y}};
  const std::string prefix = net.path() + "/";
  for (const auto& [name, var] : net.named_variables())
    arrays[name.starts_with(prefix) ? name.substr(prefix.size()) : name] = var.value();
  return arrays;
}

struct Figures {
  double eager_s = 0, traced_s = 0, first_call_s = 0;
  std::int64_t eager_peak = 0, traced_peak = 0;
  std::size_t nodes = 0;
  std::vector<float> losses;  // the first checked_steps losses (eager; traced matched them)
  double eager_spread = 0, traced_spread = 0;
};

void print_table(const Figures& f) {
  auto ms = [](double s) { return s * 1e3; };
  auto kib = [](std::int64_t b) { return static_cast<double>(b) / 1024.0; };
  fmt::print("{:<52} {:>10} {:>10} {:>8}\n", "benchmark", "eager", "traced", "ratio");
  fmt::print("{}\n", std::string(84, '-'));
  fmt::print("{:<52} {:>7.3f} ms {:>7.3f} ms {:>8.2f}\n",
             "scenario 2 train step (target traced < 0.5 ms)", ms(f.eager_s), ms(f.traced_s),
             f.traced_s / f.eager_s);
  fmt::print("{:<52} {:>10} {:>7.2f} ms\n", "first traced call: trace + optimize + plan + run", "-",
             ms(f.first_call_s));
  fmt::print("{:<52} {:>6.0f} KiB {:>6.0f} KiB {:>8.2f}\n",
             "peak memory of a step above live (target <= 0.60)", kib(f.eager_peak),
             kib(f.traced_peak),
             static_cast<double>(f.traced_peak) / static_cast<double>(f.eager_peak));
  fmt::print("\nspread (p90-p10)/median: eager {:.2f}, traced {:.2f}\n", f.eager_spread,
             f.traced_spread);
  fmt::print("losses of the first {} steps: {}\n", f.losses.size(), fmt::join(f.losses, ", "));
  fmt::print("train-step graph: {} nodes after optimization\n", f.nodes);
}

void print_json(const Figures& f, bool quick) {
  fmt::print(
      "{{\"program\": \"kiln_bench_train\", \"quick\": {}, \"train_nodes\": {}, \"losses\": [{}], "
      "\"rows\": [\n"
      "  {{\"name\": \"train_step\", \"eager_s\": {}, \"traced_s\": {}}},\n"
      "  {{\"name\": \"train_first_call\", \"eager_s\": 0, \"traced_s\": {}}},\n"
      "  {{\"name\": \"train_peak_bytes\", \"eager_bytes\": {}, \"traced_bytes\": {}}}\n]}}\n",
      quick, f.nodes, fmt::join(f.losses, ", "), f.eager_s, f.traced_s, f.first_call_s,
      f.eager_peak, f.traced_peak);
}

int usage(std::string_view arg) {
  fmt::print(stderr,
             "usage: kiln_bench_train [--quick] [--json] [--save-init PATH]\n"
             "  --quick           one short iteration of each benchmark (a smoke test)\n"
             "  --json            print the results as JSON\n"
             "  --save-init PATH  write the initial weights, x, y and the first {} losses as .npz\n"
             "                    (bench/compare's peers start from them)\n",
             checked_steps);
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const BenchArgs args = parse_bench_args(argc, argv, true);
  if (args.bad()) return usage(args.unknown);
  const bool quick = args.quick, json = args.json;
  const std::string& init_path = args.init_path;
  const TimingPlan plan = quick ? TimingPlan::quick() : TimingPlan{};
  if (!json)
    fmt::print("kiln_bench_train{}: median of {} samples\n\n", quick ? " --quick" : "",
               plan.samples);

  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 1);
  const Tensor y = kiln::cast(kiln::random::uniform({batch, 1}, 0, 1, 2) > 0.5f, kiln::f32);

  Figures f;
  Trainer eager, traced;
  auto traced_step =
      kiln::function([&](const Tensor& xb, const Tensor& yb) { return traced.step(xb, yb); });
  // Layers create their variables on the first call: the same seed gives both the same weights.
  kiln::random::set_global_seed(5);
  const auto t0 = std::chrono::steady_clock::now();
  const float traced_first = traced_step(x, y).item<float>();
  f.first_call_s = seconds_since(t0);
  kiln::random::set_global_seed(5);
  eager.net(x);  // creates the weights, so they can be saved before the first update
  std::map<std::string, Tensor> init = initial_state(eager.net, x, y);
  for (int s = 0; s < checked_steps; ++s) {
    f.losses.push_back(eager.step(x, y).item<float>());
    const float traced_loss = s == 0 ? traced_first : traced_step(x, y).item<float>();
    if (!std::isfinite(traced_loss) || std::abs(traced_loss - f.losses.back()) > 1e-5f) {
      fmt::print(stderr, "eager and traced losses of step {} differ: {} vs {}\n", s + 1,
                 f.losses.back(), traced_loss);
      return 1;
    }
  }
  if (!init_path.empty()) {
    init["losses"] = kiln::tensor(f.losses);
    kiln::io::save_npz(init_path, init);
  }

  const auto eager_time = measure(plan, [&] { eager.step(x, y); });
  const auto traced_time = measure(plan, [&] { traced_step(x, y); });
  f.eager_s = eager_time.median;
  f.traced_s = traced_time.median;
  f.eager_spread = eager_time.spread();
  f.traced_spread = traced_time.spread();
  // After the warm-up above: one step each, measured on its own.
  f.eager_peak = step_peak_bytes([&] { eager.step(x, y); });
  f.traced_peak = step_peak_bytes([&] { traced_step(x, y); });
  f.nodes = traced_step.get_concrete_function(x, y).graph().num_nodes();

  if (json)
    print_json(f, quick);
  else
    print_table(f);
  return traced_step.tracing_count() == 1 ? 0 : 1;
}

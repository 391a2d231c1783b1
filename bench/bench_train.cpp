// The train step of user scenario 2: LSTM(64, return_sequences) -> LSTM(32) -> Dense(1,
// sigmoid), binary cross-entropy, Adam; batch 16, sequence 5, features 10. Eager against traced
// (forward + backward + Adam update in one cached graph), in one run.
// Usage: kiln_bench_train [--quick]
#include <fmt/format.h>

#include <chrono>
#include <string_view>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;
using kiln::bench::measure;
using kiln::bench::TimingPlan;

constexpr std::int64_t batch = 16, steps = 5, features = 10;

struct Net : kiln::Module {
  kiln::nn::LSTM l1{64, {.return_sequences = true}}, l2{32};
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

double ms(double seconds) { return seconds * 1e3; }

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string_view(argv[1]) == "--quick";
  const TimingPlan plan = quick ? TimingPlan::quick() : TimingPlan{};
  fmt::print("kiln_bench_train{}: median of {} samples\n\n", quick ? " --quick" : "", plan.samples);

  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 1);
  const Tensor y = kiln::cast(kiln::random::uniform({batch, 1}, 0, 1, 2) > 0.5f, kiln::f32);

  Trainer eager, traced;
  auto traced_step =
      kiln::function([&](const Tensor& xb, const Tensor& yb) { return traced.step(xb, yb); });
  // Layers create their variables on the first call: the same seed gives both the same weights.
  kiln::random::set_global_seed(5);
  const auto t0 = std::chrono::steady_clock::now();
  const float first = traced_step(x, y).item<float>();
  const double first_call =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kiln::random::set_global_seed(5);
  const float eager_first = eager.step(x, y).item<float>();
  if (std::abs(first - eager_first) > 1e-5f) {
    fmt::print("eager and traced losses differ: {} vs {}\n", eager_first, first);
    return 1;
  }

  const auto eager_time = measure(plan, [&] { eager.step(x, y); });
  const auto traced_time = measure(plan, [&] { traced_step(x, y); });
  fmt::print("{:<52} {:>10} {:>10} {:>8}\n", "benchmark", "eager", "traced", "ratio");
  fmt::print("{}\n", std::string(84, '-'));
  fmt::print("{:<52} {:>7.3f} ms {:>7.3f} ms {:>8.2f}\n",
             "scenario 2 train step (target traced < 0.5 ms)", ms(eager_time.median),
             ms(traced_time.median), traced_time.median / eager_time.median);
  fmt::print("{:<52} {:>10} {:>7.2f} ms\n", "first traced call: trace + optimize + plan + run", "-",
             ms(first_call));
  fmt::print("\nspread (p90-p10)/median: eager {:.2f}, traced {:.2f}\n", eager_time.spread(),
             traced_time.spread());
  fmt::print("train-step graph: {} nodes after optimization; tracing_count {}\n",
             traced_step.get_concrete_function(x, y).graph().num_nodes(),
             traced_step.tracing_count());
  fmt::print("PyTorch reference (issue 5, this machine): about 4 ms per step\n");
  return traced_step.tracing_count() == 1 ? 0 : 1;
}

// kiln::function benchmarks: per-call overhead of a cached function, the unrolled 5-step RNN and
// LSTM (batch 32, input 10, hidden 20) eager against traced, and the first-call cost (trace +
// optimize + plan). Usage: kiln_bench_function [--quick]
#include <fmt/format.h>

#include <chrono>
#include <string_view>

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

double us(double seconds) { return seconds * 1e6; }

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string_view(argv[1]) == "--quick";
  const TimingPlan plan = quick ? TimingPlan::quick() : TimingPlan{};
  fmt::print("kiln_bench_function{}: median of {} samples\n\n", quick ? " --quick" : "",
             plan.samples);
  fmt::print("{:<44} {:>12} {:>12} {:>8}\n", "benchmark", "eager", "traced", "ratio");
  fmt::print("{}\n", std::string(80, '-'));

  const Tensor a = kiln::tensor({1.f, 2.f, 3.f, 4.f}), b = kiln::tensor({0.5f, 0.5f, 0.5f, 0.5f});
  auto add = kiln::function([](const Tensor& x, const Tensor& y) { return x + y; });
  add(a, b);
  const double eager_add = measure(plan, [&] { kiln::add(a, b); }).median;
  const double traced_add = measure(plan, [&] { add(a, b); }).median;
  fmt::print("{:<44} {:>9.0f} ns {:>9.0f} ns {:>8.2f}\n",
             "1-op call, 4 f32 (target traced < 300 ns)", eager_add * 1e9, traced_add * 1e9,
             traced_add / eager_add);

  const Tensor xs = kiln::random::normal({batch, steps, input}, 0, 1, 7);
  const Weights rw = make_weights(1, 11), lw = make_weights(4, 21);
  auto rnn_fn = kiln::function([&](const Tensor& x) { return rnn(rw, x); });
  rnn_fn(xs);
  const double eager_rnn = measure(plan, [&] { rnn(rw, xs); }).median;
  const double traced_rnn = measure(plan, [&] { rnn_fn(xs); }).median;
  fmt::print("{:<44} {:>9.1f} us {:>9.1f} us {:>8.2f}\n", "5-step RNN, batch 32, 10 -> 20",
             us(eager_rnn), us(traced_rnn), traced_rnn / eager_rnn);

  auto lstm_fn = kiln::function([&](const Tensor& x) { return lstm(lw, x); });
  const auto t0 = std::chrono::steady_clock::now();
  lstm_fn(xs);
  const double first_call =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double eager_lstm = measure(plan, [&] { lstm(lw, xs); }).median;
  const double traced_lstm = measure(plan, [&] { lstm_fn(xs); }).median;
  fmt::print("{:<44} {:>9.1f} us {:>9.1f} us {:>8.2f}\n",
             "5-step LSTM, batch 32, 10 -> 20 (target < 25 us)", us(eager_lstm), us(traced_lstm),
             traced_lstm / eager_lstm);
  fmt::print("{:<44} {:>12} {:>9.2f} ms\n", "LSTM first call: trace + optimize + plan + run", "-",
             first_call * 1e3);
  fmt::print("\nLSTM graph: {} nodes after optimization\n",
             lstm_fn.get_concrete_function(xs).graph().num_nodes());
  return 0;
}

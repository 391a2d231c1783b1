// The README demo: a first look at eager tensors, then user scenario 2: an LSTM model trained,
// destroyed and rebuilt in a loop, printing the counters that prove nothing grows.
#include <unistd.h>

#include <chrono>
#include <fstream>

#include <kiln/kiln.hpp>

namespace {

using kiln::Tensor;

// LSTM(64, return_sequences) -> LSTM(32) -> Dense(1, sigmoid), variables under "net/...".
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

std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

struct Round {
  int traces = 0;
  std::size_t variables = 0;
  std::int64_t live_bytes = 0;  // while the model lives, after training
  std::int64_t cached_functions = 0;
  std::int64_t bytes_after = 0;  // once the model and optimizer are destroyed
  double first_loss = 0, last_loss = 0;
};

/// Builds the model and an Adam optimizer, trains them, measures, and lets them go.
Round train_round(const Tensor& x, const Tensor& y, int epochs) {
  Round r;
  {
    Net net;
    kiln::optim::Adam opt({.learning_rate = 1e-2});
    const auto history =
        kiln::train::fit(net, opt, kiln::nn::losses::binary_crossentropy, x, y,
                         {.epochs = epochs, .batch_size = 16, .seed = 1, .verbose = 0});
    const auto stats = kiln::memory_stats();
    r.traces = history.traces;
    r.variables = kiln::global_variables().size();
    r.live_bytes = stats.live_bytes;
    r.cached_functions = stats.cached_functions;
    r.first_loss = history.loss.front();
    r.last_loss = history.loss.back();
  }
  r.bytes_after = kiln::memory_stats().live_bytes;
  return r;
}

void print_round(int round, const Round& r) {
  fmt::print("{:>5} {:>7} {:>10} {:>12} {:>8} {:>14} {:>8.4f} -> {:.4f}\n", round, r.traces,
             r.variables, r.live_bytes, r.cached_functions, r.bytes_after, r.first_loss,
             r.last_loss);
}

}  // namespace

int main() {
  // Eager tensors: ops run at once, like NumPy.
  kiln::Tensor x = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  kiln::Tensor w = kiln::random::normal({3, 2}, 0.0, 1.0, /*seed*/ 42);
  fmt::print("x = {}\n\n", x);
  fmt::print("tanh(x @ w + 1), w = random::normal([3,2], seed 42) = {}\n\n",
             kiln::tanh(kiln::matmul(x, w) + 1.f));
  fmt::print("softmax(x) = {}\n\n", kiln::softmax(x));
  try {
    kiln::matmul(x, x);
  } catch (const kiln::Error& e) {
    fmt::print("bad input is a kiln::Error: {}\n\n", e.what());
  }

  // Scenario 2: synthetic binary sequences (batch 16, 5 steps, 10 features); the label says
  // whether feature 0 sums to more than 0 over time.
  const Tensor xs = kiln::random::normal({128, 5, 10}, 0.0, 1.0, 7);
  const Tensor ys = kiln::cast(kiln::sum(kiln::slice(xs, 2, 0, 1), {1}) > 0.f, kiln::f32);
  fmt::print(
      "Scenario 2: LSTM(64, return_sequences) -> LSTM(32) -> Dense(1, sigmoid), Adam, binary\n"
      "cross-entropy, 128 sequences [5 steps, 10 features] in batches of 16. Each round builds a\n"
      "new model and optimizer, trains them with train::fit and destroys them.\n\n");

  const int epochs = 4;
  const Round first = train_round(xs, ys, epochs);
  fmt::print("Round 1 loss per epoch fell from {:.4f} to {:.4f} ({} epochs, one trace).\n\n",
             first.first_loss, first.last_loss, epochs);
  fmt::print(
      "traces: times fit traced its train step; variables: live kiln::Variables (model and\n"
      "optimizer); live bytes and cached functions: while the trained model lives; bytes after:\n"
      "live bytes once model and optimizer are destroyed; loss: epoch 1 -> epoch {}.\n\n",
      epochs);
  fmt::print("round  traces  variables   live bytes  cached  bytes after   loss\n");
  print_round(1, first);
  bool steady = true;  // every round's counters equal round 1's
  const auto check = [&](const Round& r) {
    steady = steady && r.traces == 1 && r.variables == first.variables &&
             r.live_bytes == first.live_bytes && r.cached_functions == first.cached_functions &&
             r.bytes_after == first.bytes_after;
    return r;
  };
  for (int round = 2; round <= 5; ++round) print_round(round, check(train_round(xs, ys, epochs)));

  // Up to 50 rounds, within a time budget (a debug or sanitizer build is much slower).
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t rss_before = resident_bytes();
  constexpr double budget_seconds = 20.0;
  int round = 5;
  Round last;
  while (round < 50 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             budget_seconds) {
    last = check(train_round(xs, ys, epochs));
    ++round;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (round > 5) {
    fmt::print("...\n");
    print_round(round, last);
    fmt::print(
        "\nAfter {} rounds ({} more in {:.1f} s): variables {} (round 1: {}), live bytes {}\n"
        "(round 1: {}), cached functions {}, resident memory {:+.1f} MiB since round 5.\n",
        round, round - 5, seconds, last.variables, first.variables, last.live_bytes,
        first.live_bytes, last.cached_functions,
        static_cast<double>(resident_bytes() - rss_before) / (1 << 20));
  }
  fmt::print("{}\n", steady ? "Nothing grew." : "Something grew!");
  return steady ? 0 : 1;
}

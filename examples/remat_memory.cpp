// Peak memory and time of a traced train step (loss and gradients) of one LSTM layer over a long
// sequence, with and without gradient checkpointing: nn::LSTM with LSTMOptions::checkpoint_every,
// and a hand-written LSTM step in kiln::scan with ScanOptions::checkpoint_every.
//   remat_memory [T=1000] [k=32] [repeats=5] [units=256] [batch=64] [features=128]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

namespace {

using kiln::Tensor;
using Tensors = std::vector<Tensor>;

struct Figures {
  std::int64_t peak_bytes = 0;
  double median_ms = 0;
};

/// Peak bytes (past what was live before) and median time of each step; the two steps run
/// alternately so that a busy machine slows both alike.
template <class Step>
std::pair<Figures, Figures> measure(const Step& plain, const Step& remat, const Tensor& x,
                                    int repeats) {
  (void)plain(x);  // trace and plan
  (void)remat(x);
  std::vector<double> ms[2];
  std::int64_t peak[2] = {0, 0};
  for (int r = 0; r < repeats; ++r)
    for (int which = 0; which < 2; ++which) {
      kiln::reset_peak_bytes();
      const std::int64_t before = kiln::memory_stats().live_bytes;
      const auto start = std::chrono::steady_clock::now();
      const Tensors grads = (which == 0 ? plain : remat)(x);
      ms[which].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      peak[which] = std::max(peak[which], kiln::memory_stats().peak_bytes - before);
    }
  Figures f[2];
  for (int which = 0; which < 2; ++which) {
    std::sort(ms[which].begin(), ms[which].end());
    f[which] = {peak[which], ms[which][ms[which].size() / 2]};
  }
  return {f[0], f[1]};
}

void report(const std::string& what, const std::pair<Figures, Figures>& figures) {
  const auto& [plain, remat] = figures;
  fmt::print("{}\n  plain:         peak {:8.1f} MiB, median {:8.1f} ms\n", what,
             static_cast<double>(plain.peak_bytes) / (1 << 20), plain.median_ms);
  fmt::print(
      "  checkpointed:  peak {:8.1f} MiB, median {:8.1f} ms   ({:.2f}x lower peak, {:.2f}x "
      "the time)\n",
      static_cast<double>(remat.peak_bytes) / (1 << 20), remat.median_ms,
      static_cast<double>(plain.peak_bytes) / static_cast<double>(remat.peak_bytes),
      remat.median_ms / plain.median_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const auto arg = [&](int i, std::int64_t fallback) {
    return argc > i ? std::atoll(argv[i]) : fallback;
  };
  const std::int64_t steps = arg(1, 1000), k = arg(2, 32), units = arg(4, 256);
  const std::int64_t batch = arg(5, 64), features = arg(6, 128);
  const int repeats = static_cast<int>(arg(3, 5));
  fmt::print("T={} checkpoint_every={} units={} batch={} features={}, median of {}\n", steps, k,
             units, batch, features, repeats);
  const Tensor x = kiln::random::normal({batch, steps, features}, 0.0, 1.0, 1);

  const auto layer_step = [&](std::int64_t every) {
    auto lstm =
        std::make_shared<kiln::nn::LSTM>(units, kiln::nn::LSTMOptions{.checkpoint_every = every});
    return kiln::function([lstm](const Tensor& in) {
      kiln::GradientTape tape;
      const Tensor loss = kiln::mean(kiln::square((*lstm)(in)));
      Tensors grads = tape.gradient(loss, lstm->trainable_variables());
      grads.push_back(loss);
      return grads;
    });
  };
  report("nn::LSTM, train step (loss and gradients), traced",
         measure(layer_step(1), layer_step(k), x, repeats));

  // The same cell written as a scan body that projects its own step's input.
  kiln::Variable kernel(kiln::random::normal({features, 4 * units}, 0.0, 0.05, 2), "kernel");
  kiln::Variable recurrent(kiln::random::normal({units, 4 * units}, 0.0, 0.05, 3), "recurrent");
  const auto scan_step = [&](std::int64_t every) {
    return kiln::function([&, every](const Tensor& in) {
      kiln::GradientTape tape;
      const Tensor xs = kiln::transpose(in, {1, 0, 2});
      const Tensor zero = kiln::zeros({in.dim(0), units});
      auto [state, ys] = kiln::scan(
          [&](const Tensors& s, const Tensors& xt) {
            const Tensors g = kiln::split(
                kiln::matmul(xt[0], kernel.value()) + kiln::matmul(s[0], recurrent.value()), 4, -1);
            const Tensor c = kiln::sigmoid(g[1]) * s[1] + kiln::sigmoid(g[0]) * kiln::tanh(g[2]);
            return std::pair<Tensors, Tensors>{{kiln::sigmoid(g[3]) * kiln::tanh(c), c}, {}};
          },
          {zero, zero}, {xs}, {.checkpoint_every = every});
      const Tensor loss = kiln::mean(kiln::square(state[0]));
      Tensors grads = tape.gradient(loss, std::vector<kiln::Variable>{kernel, recurrent});
      grads.push_back(loss);
      return grads;
    });
  };
  report("LSTM step in kiln::scan, train step, traced",
         measure(scan_step(1), scan_step(k), x, repeats));
  return 0;
}

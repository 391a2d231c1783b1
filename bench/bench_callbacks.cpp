// What callbacks cost in train::fit (issue 20): user scenario 2's model (LSTM(64,
// return_sequences) -> LSTM(32) -> Dense(1, sigmoid); 5 steps, 10 features; batch 16, Adam,
// binary cross-entropy) fitted on 2048 samples with validation_split 0.2, once without callbacks
// and once with TensorBoard (epoch scalars, weight histograms every epoch, the graph),
// ModelCheckpoint (best only, on val_loss) and EarlyStopping (on val_loss, restore best weights).
// The two kinds of fit alternate, so drift on a shared machine hits both; each reports the
// median seconds per epoch over all its epochs, the first of each fit (the trace) left out.
// Wall-time medians on a shared 2-core machine move by a few percent from run to run, so the
// time fit spent inside the callbacks' hooks (History::callback_seconds) is reported too, as a
// fraction of the epoch without callbacks: the cost itself, without the noise.
// Usage: kiln_bench_callbacks [--quick]
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;
namespace nn = kiln::nn;
namespace train = kiln::train;

nn::Sequential scenario2_model() {
  return nn::Sequential({nn::LSTM(64, {.return_sequences = true, .unroll = true}),
                         nn::LSTM(32, {.unroll = true}), nn::Dense(1, nn::Activation::sigmoid)},
                        "net");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv);
  if (args.bad()) {
    fmt::print(stderr,
               "kiln_bench_callbacks: unknown argument '{}'\nusage: kiln_bench_callbacks "
               "[--quick]\n",
               args.unknown);
    return 2;
  }
  const std::int64_t samples = args.quick ? 160 : 2048;
  const int epochs = args.quick ? 2 : 6, rounds = args.quick ? 1 : 15;
  const Tensor x = kiln::random::normal({samples, 5, 10}, 0.0, 1.0, 1);
  const Tensor y = kiln::cast(kiln::sum(kiln::slice(x, 2, 0, 1), {1}) > 0.f, kiln::f32);
  const auto dir = std::filesystem::temp_directory_path() / "kiln-bench-callbacks";
  std::filesystem::remove_all(dir);

  std::vector<double> plain, with_callbacks, in_callbacks;
  int traces = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const bool callbacks : {false, true}) {
      auto model = scenario2_model();
      kiln::optim::Adam opt({.learning_rate = 1e-3});
      train::TensorBoard board(
          {.log_dir = dir / fmt::format("logs{}", round), .histogram_freq = 1});
      train::ModelCheckpoint best((dir / fmt::format("best{}.safetensors", round)).string(),
                                  {.save_best_only = true});
      train::EarlyStopping stop({.patience = 100, .restore_best_weights = true});
      train::FitOptions options{.epochs = epochs,
                                .batch_size = 16,
                                .seed = 7,
                                .verbose = 0,
                                .metrics = {train::metrics::binary_accuracy()},
                                .validation_split = 0.2};
      if (callbacks) options.callbacks = {board, best, stop};
      const train::History h =
          train::fit(model, opt, nn::losses::binary_crossentropy, x, y, options);
      traces = std::max(traces, h.traces + h.validation_traces);
      auto& out = callbacks ? with_callbacks : plain;
      const std::size_t skip = h.seconds.size() > 1 ? 1 : 0;
      out.insert(out.end(), h.seconds.begin() + skip, h.seconds.end());
      if (callbacks)
        in_callbacks.insert(in_callbacks.end(), h.callback_seconds.begin() + skip,
                            h.callback_seconds.end());
    }
  }
  const double a = median(plain), b = median(with_callbacks), c = median(in_callbacks);
  fmt::print(
      "fit, scenario 2's model, {} samples (20% validation), batch 16, {} epochs each: median "
      "epoch {:.2f} ms without callbacks, {:.2f} ms with TensorBoard + ModelCheckpoint + "
      "EarlyStopping ({:+.1f}%); time in the callbacks {:.3f} ms per epoch = {:.1f}% of the epoch "
      "without them; at most {} traces per fit\n",
      samples, plain.size(), a * 1e3, b * 1e3, (b / a - 1.0) * 100.0, c * 1e3, c / a * 100.0,
      traces);
  std::filesystem::remove_all(dir);
  return 0;
}

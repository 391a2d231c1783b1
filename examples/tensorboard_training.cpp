// Training watched in TensorBoard: user scenario 2's model (two LSTMs and a sigmoid Dense) on a
// generated task (is the sum of feature 0 over time positive?), fitted with 20% of the samples
// held out for validation and four callbacks: TensorBoard (scalars per epoch and every 10
// batches, weight histograms, the train step's graph), ModelCheckpoint (the best epoch by
// val_loss), EarlyStopping (restoring the best weights) and CSVLogger.
//
// Usage: tensorboard_training [LOG_DIR]   (default "logs"; then: tensorboard --logdir LOG_DIR)
#include <fmt/format.h>

#include <kiln/kiln.hpp>

namespace nn = kiln::nn;
namespace train = kiln::train;

int main(int argc, char** argv) {
  const std::filesystem::path log_dir = argc > 1 ? argv[1] : "logs";
  kiln::random::set_global_seed(7);
  const kiln::Tensor x = kiln::random::normal({1024, 5, 10}, 0.0, 1.0, 1);
  const kiln::Tensor y = kiln::cast(kiln::sum(kiln::slice(x, 2, 0, 1), {1}) > 0.f, kiln::f32);

  nn::Sequential model({nn::LSTM(64, {.return_sequences = true}), nn::LSTM(32),
                        nn::Dense(1, nn::Activation::sigmoid)},
                       "net");
  kiln::optim::Adam opt({.learning_rate = 3e-3});
  train::TensorBoard tensorboard({.log_dir = log_dir, .histogram_freq = 1, .update_freq = 10});
  train::ModelCheckpoint best((log_dir / "best.safetensors").string(), {.save_best_only = true});
  train::EarlyStopping stop({.patience = 3, .restore_best_weights = true});
  train::CSVLogger csv(log_dir / "history.csv");

  const train::History history = train::fit(model, opt, nn::losses::binary_crossentropy, x, y,
                                            {.epochs = 30,
                                             .batch_size = 32,
                                             .seed = 3,
                                             .verbose = 1,
                                             .metrics = {train::metrics::binary_accuracy()},
                                             .validation_split = 0.2,
                                             .callbacks = {tensorboard, best, stop, csv}});

  const auto& val_loss = history.at("val_loss");
  fmt::print("ran {} epochs ({}), best val_loss {:.4f} at epoch {}, val accuracy there {:.3f}\n",
             history.epochs.size(), stop.stopped_epoch() >= 0 ? "stopped early" : "all of them",
             stop.best(), stop.best_epoch() + 1,
             history.at("val_binary_accuracy")[static_cast<std::size_t>(stop.best_epoch())]);
  fmt::print("traces: train step {}, validation step {}\n", history.traces,
             history.validation_traces);
  fmt::print("wrote {}/train, {}/validation, {} and {}\n", log_dir.string(), log_dir.string(),
             best.saved().back().string(), (log_dir / "history.csv").string());
  fmt::print("see it: tensorboard --logdir {}\n", log_dir.string());
  const bool learned = val_loss.back() < val_loss.front() && history.traces == 1;
  return learned ? 0 : 1;
}

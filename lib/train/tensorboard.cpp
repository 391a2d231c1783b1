// The TensorBoard callback: epoch and batch scalars, weight histograms and the train step's graph.
#include "core/fail.hpp"
#include "kiln/callbacks.hpp"
#include "kiln/summary.hpp"

namespace kiln::train {

TensorBoard::TensorBoard(TensorBoardOptions options) : options_(std::move(options)) {
  if (options_.histogram_freq < 0)
    kiln::detail::fail("train.TensorBoard", "histogram_freq must be >= 0, got {}",
                       options_.histogram_freq);
  if (options_.update_freq < 0)
    kiln::detail::fail("train.TensorBoard", "update_freq must be >= 0 batches, got {}",
                       options_.update_freq);
}

TensorBoard::~TensorBoard() = default;

void TensorBoard::on_train_begin(const Logs&) {
  train_ = std::make_unique<summary::FileWriter>(options_.log_dir / "train");
  validation_.reset();
  if (fit().has_validation)
    validation_ = std::make_unique<summary::FileWriter>(options_.log_dir / "validation");
  if (options_.write_graph) train_->graph(fit().train_function);
}

void TensorBoard::on_batch_end(std::int64_t, const Logs& logs) {
  const std::int64_t step = fit().global_step;
  if (options_.update_freq == 0 || step % options_.update_freq != 0) return;
  for (const auto& [key, value] : logs.items()) train_->scalar("batch_" + key, value, step);
}

void TensorBoard::write_histograms(std::int64_t step) {
  for (const auto& [path, variable] : fit().model.named_variables())
    train_->histogram(path, variable.value(), step);
}

void TensorBoard::on_epoch_end(int epoch, const Logs& logs) {
  for (const auto& [key, value] : logs.items()) {
    if (key.rfind("val_", 0) == 0) {
      if (validation_) validation_->scalar("epoch_" + key.substr(4), value, epoch);
    } else {
      train_->scalar("epoch_" + key, value, epoch);
    }
  }
  if (options_.histogram_freq > 0 && epoch % options_.histogram_freq == 0) write_histograms(epoch);
  train_->flush();
  if (validation_) validation_->flush();
}

void TensorBoard::on_train_end(const Logs&) {
  if (train_) train_->close();
  if (validation_) validation_->close();
  train_.reset();
  validation_.reset();
}

}  // namespace kiln::train

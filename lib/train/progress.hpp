#pragma once
// What fit and evaluate print: a progress bar on a terminal, plain lines otherwise.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/train.hpp"

namespace kiln::train::detail {

class Progress {
 public:
  /// verbose: 0 silent, 1 bar on a terminal (one line per epoch otherwise), 2 lines.
  Progress(int verbose, int epochs, std::int64_t samples);

  /// Whether update() draws anything (a bar on a terminal).
  bool draws_bar() const { return bar_; }
  void begin_epoch(int epoch);
  /// After a batch: `done` samples of this epoch so far and the running averages. Redraws the
  /// bar (with ETA, samples/s and the values) at most ten times a second.
  void update(std::int64_t done, const Logs& logs);
  /// The epoch's line: its logs (validation included; not the learning rate) and its time.
  void end_epoch(const Logs& logs, double seconds);

 private:
  int verbose_;
  bool bar_;
  int epochs_;
  int epoch_ = 0;
  std::int64_t samples_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

/// "loss 0.6931 - binary_accuracy 0.5000 - val_loss ...": the logs but the learning rate.
std::string logs_text(const Logs& logs);

/// One line for evaluate: "evaluate - 100 samples - loss 0.6931 - binary_accuracy 0.5000".
void print_evaluation(std::int64_t samples, const Logs& logs);

/// "3s", "2m05s", "1h02m" for an estimate.
std::string duration_text(double seconds);

}  // namespace kiln::train::detail

#pragma once
// What fit and evaluate print: a progress bar on a terminal, plain lines otherwise.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::train::detail {

class Progress {
 public:
  /// verbose: 0 silent, 1 bar on a terminal (lines otherwise), 2 lines.
  Progress(int verbose, int epochs, std::int64_t samples, std::vector<std::string> metric_names);

  void begin_epoch(int epoch);
  /// After a batch: `done` samples of this epoch so far and the running averages.
  void update(std::int64_t done, double loss, const std::vector<double>& metrics);
  void end_epoch(double loss, const std::vector<double>& metrics, double seconds);

 private:
  std::string values(double loss, const std::vector<double>& metrics) const;

  int verbose_;
  bool bar_;
  int epochs_;
  int epoch_ = 0;
  std::int64_t samples_;
  std::vector<std::string> metric_names_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

/// One line for evaluate: "evaluate - 100 samples - loss 0.6931 - binary_accuracy 0.5000".
void print_evaluation(std::int64_t samples, double loss, const std::vector<std::string>& names,
                      const std::vector<double>& metrics);

}  // namespace kiln::train::detail

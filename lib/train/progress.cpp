#include "train/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace kiln::train::detail {

namespace {

constexpr int bar_width = 30;
constexpr double redraw_seconds = 0.1;

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string metric_text(double loss, const std::vector<std::string>& names,
                        const std::vector<double>& metrics) {
  std::string out = fmt::format("loss {:.4f}", loss);
  for (std::size_t i = 0; i < names.size() && i < metrics.size(); ++i)
    out += fmt::format(" - {} {:.4f}", names[i], metrics[i]);
  return out;
}

}  // namespace

Progress::Progress(int verbose, int epochs, std::int64_t samples,
                   std::vector<std::string> metric_names)
    : verbose_(verbose),
      bar_(verbose == 1 && isatty(fileno(stdout)) != 0),
      epochs_(epochs),
      samples_(samples),
      metric_names_(std::move(metric_names)) {}

std::string Progress::values(double loss, const std::vector<double>& metrics) const {
  return metric_text(loss, metric_names_, metrics);
}

void Progress::begin_epoch(int epoch) {
  epoch_ = epoch;
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_ - std::chrono::seconds(1);  // the first batch draws at once
}

void Progress::update(std::int64_t done, double loss, const std::vector<double>& metrics) {
  if (!bar_ || done >= samples_) return;  // end_epoch draws the finished bar
  const auto now = std::chrono::steady_clock::now();
  if (seconds_between(last_draw_, now) < redraw_seconds) return;
  last_draw_ = now;
  const double elapsed = seconds_between(start_, now);
  const int filled = static_cast<int>(bar_width * done / std::max<std::int64_t>(samples_, 1));
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < bar_width) bar += '>';
  bar.resize(bar_width, '.');
  fmt::print("\r\033[Kepoch {}/{} [{}] {}/{} - {} - {:.0f} samples/s", epoch_ + 1, epochs_, bar,
             done, samples_, values(loss, metrics), elapsed > 0 ? done / elapsed : 0.0);
  std::fflush(stdout);
}

void Progress::end_epoch(double loss, const std::vector<double>& metrics, double seconds) {
  if (verbose_ == 0) return;
  const double rate = seconds > 0 ? samples_ / seconds : 0.0;
  if (bar_) {
    fmt::print("\r\033[Kepoch {}/{} [{}] {}/{} - {} - {:.0f} samples/s - {:.2f} s\n", epoch_ + 1,
               epochs_, std::string(bar_width, '='), samples_, samples_, values(loss, metrics),
               rate, seconds);
  } else {
    fmt::print("epoch {}/{} - {} samples in {:.3f} s ({:.0f} samples/s) - {}\n", epoch_ + 1,
               epochs_, samples_, seconds, rate, values(loss, metrics));
  }
  std::fflush(stdout);
}

void print_evaluation(std::int64_t samples, double loss, const std::vector<std::string>& names,
                      const std::vector<double>& metrics) {
  fmt::print("evaluate - {} samples - {}\n", samples, metric_text(loss, names, metrics));
  std::fflush(stdout);
}

}  // namespace kiln::train::detail

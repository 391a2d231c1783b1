#include "train/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace kiln::train::detail {

namespace {

constexpr int bar_width = 30;
constexpr double redraw_seconds = 0.1;

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string logs_text(const Logs& logs) {
  std::string out;
  for (const auto& [key, value] : logs.items()) {
    if (key == "learning_rate") continue;
    if (!out.empty()) out += " - ";
    out += fmt::format("{} {:.4f}", key, value);
  }
  return out;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

Progress::Progress(int verbose, int epochs, std::int64_t samples)
    : verbose_(verbose),
      bar_(verbose == 1 && isatty(fileno(stdout)) != 0),
      epochs_(epochs),
      samples_(samples) {}

void Progress::begin_epoch(int epoch) {
  epoch_ = epoch;
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_ - std::chrono::seconds(1);  // the first batch draws at once
}

void Progress::update(std::int64_t done, const Logs& logs) {
  if (!bar_ || done >= samples_) return;  // end_epoch draws the finished bar
  const auto now = std::chrono::steady_clock::now();
  if (seconds_between(last_draw_, now) < redraw_seconds) return;
  last_draw_ = now;
  const double elapsed = seconds_between(start_, now);
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(samples_ - done) / rate : -1.0;
  const int filled = static_cast<int>(bar_width * done / std::max<std::int64_t>(samples_, 1));
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < bar_width) bar += '>';
  bar.resize(bar_width, '.');
  fmt::print("\r\033[Kepoch {}/{} [{}] {}/{} - ETA {} - {:.0f} samples/s - {}", epoch_ + 1, epochs_,
             bar, done, samples_, duration_text(eta), rate, logs_text(logs));
  std::fflush(stdout);
}

void Progress::end_epoch(const Logs& logs, double seconds) {
  if (verbose_ == 0) return;
  const double rate = seconds > 0 ? static_cast<double>(samples_) / seconds : 0.0;
  if (bar_) {
    fmt::print("\r\033[Kepoch {}/{} [{}] {}/{} - {:.2f} s - {:.0f} samples/s - {}\n", epoch_ + 1,
               epochs_, std::string(bar_width, '='), samples_, samples_, seconds, rate,
               logs_text(logs));
  } else {
    fmt::print("epoch {}/{} - {} samples in {:.3f} s ({:.0f} samples/s) - {}\n", epoch_ + 1,
               epochs_, samples_, seconds, rate, logs_text(logs));
  }
  std::fflush(stdout);
}

void print_evaluation(std::int64_t samples, const Logs& logs) {
  fmt::print("evaluate - {} samples - {}\n", samples, logs_text(logs));
  std::fflush(stdout);
}

}  // namespace kiln::train::detail

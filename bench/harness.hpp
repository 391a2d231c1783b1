#pragma once
// A small timing harness for kiln's benchmarks: warm-up, calibrated repetitions, median and
// spread; the command line they share; and the string quoting of their --json output.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::bench {

/// Seconds per call over the samples of one measurement.
struct Timing {
  double median = 0;
  double p10 = 0;  // 10th percentile
  double p90 = 0;  // 90th percentile
  std::int64_t calls_per_sample = 0;
  int samples = 0;

  /// (p90 - p10) / median: how far the middle 80% of samples spread, as a fraction.
  double spread() const { return median > 0 ? (p90 - p10) / median : 0; }
};

/// How long and how often to measure.
struct TimingPlan {
  double warmup_seconds = 0.2;   // calls run (and discarded) before measuring
  double sample_seconds = 0.03;  // each sample repeats the call at least this long
  int samples = 21;

  /// One call of warm-up, one sample of one call: a smoke test, not a measurement.
  static TimingPlan quick() { return {0.0, 0.0, 1}; }
};

/// Fills timing's median and percentiles from per-call times (one per sample; reordered).
inline void summarize(std::vector<double>& per_call, Timing& timing) {
  std::sort(per_call.begin(), per_call.end());
  auto percentile = [&](double q) {
    return per_call[static_cast<std::size_t>(q * static_cast<double>(per_call.size() - 1) + 0.5)];
  };
  timing.median = percentile(0.5);
  timing.p10 = percentile(0.1);
  timing.p90 = percentile(0.9);
}

/// Times fn() under `plan`: warms up, picks a repetition count so one sample lasts about
/// plan.sample_seconds, takes plan.samples samples and returns per-call statistics.
template <class Fn>
Timing measure(const TimingPlan& plan, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };

  const auto warmup_start = Clock::now();
  std::int64_t warmup_calls = 0;
  do {
    fn();
    ++warmup_calls;
  } while (seconds_since(warmup_start) < plan.warmup_seconds);
  const double seconds_per_call = seconds_since(warmup_start) / static_cast<double>(warmup_calls);

  Timing timing;
  timing.calls_per_sample =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(plan.sample_seconds / seconds_per_call));
  timing.samples = std::max(1, plan.samples);
  std::vector<double> per_call;
  per_call.reserve(static_cast<std::size_t>(timing.samples));
  for (int s = 0; s < timing.samples; ++s) {
    const auto start = Clock::now();
    for (std::int64_t i = 0; i < timing.calls_per_sample; ++i) fn();
    per_call.push_back(seconds_since(start) / static_cast<double>(timing.calls_per_sample));
  }
  summarize(per_call, timing);
  return timing;
}

/// The command line every benchmark takes: --quick (one short iteration of each measurement, a
/// smoke test), --json (the results as JSON) and, where the benchmark writes initial weights for
/// the peers, --save-init PATH.
struct BenchArgs {
  bool quick = false;
  bool json = false;
  std::string init_path;     // --save-init's PATH (empty: not given)
  std::string_view unknown;  // the first argument not understood (then the rest is unread)
  bool bad() const { return !unknown.empty(); }
};

inline BenchArgs parse_bench_args(int argc, char** argv, bool takes_save_init = false) {
  BenchArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      args.quick = true;
    } else if (arg == "--json") {
      args.json = true;
    } else if (takes_save_init && arg == "--save-init" && i + 1 < argc) {
      args.init_path = argv[++i];
    } else {
      args.unknown = arg;
      break;
    }
  }
  return args;
}

/// `text` as a JSON string literal, quotes included.
inline std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      constexpr char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[(ch >> 4) & 0xf];
      out += hex[ch & 0xf];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace kiln::bench

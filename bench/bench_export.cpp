// Exported functions at run time (issue 19): user scenario 2's model (LSTM(64,
// return_sequences) -> LSTM(32) -> Dense(1, sigmoid); batch 16, 5 steps, 10 features), its
// predict call and its train step (binary cross-entropy, Adam) traced, exported and loaded
// back in the same run. Reports the original's first call (trace, passes, plan, run) and cached
// call, export_function, load_function, and the loaded function's first and cached calls.
// Usage: kiln_bench_export [--quick]
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;
namespace nn = kiln::nn;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// Times one call of fn in milliseconds.
template <class Fn>
double once_ms(Fn&& fn) {
  const auto start = Clock::now();
  fn();
  return ms_since(start);
}

struct Row {
  const char* what;
  double first_ms = 0, cached_us = 0, export_ms = 0, load_ms = 0, loaded_first_ms = 0,
         loaded_cached_us = 0;
};

void print(const Row& r) {
  fmt::print(
      "{:<12} original: first call {:7.2f} ms, cached {:8.1f} us | export {:6.2f} ms, "
      "load_function {:6.2f} ms, first call {:6.3f} ms, cached {:8.1f} us ({:.2f}x the "
      "original's)\n",
      r.what, r.first_ms, r.cached_us, r.export_ms, r.load_ms, r.loaded_first_ms,
      r.loaded_cached_us, r.loaded_cached_us / r.cached_us);
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv);
  if (args.bad()) {
    fmt::print(stderr,
               "kiln_bench_export: unknown argument '{}'\nusage: kiln_bench_export [--quick]\n",
               args.unknown);
    return 2;
  }
  const kiln::bench::TimingPlan plan =
      args.quick ? kiln::bench::TimingPlan::quick() : kiln::bench::TimingPlan{};
  const auto dir = std::filesystem::temp_directory_path() / "kiln-bench-export";
  std::filesystem::create_directories(dir);

  nn::Sequential model({nn::LSTM(64, {.return_sequences = true, .unroll = true}),
                        nn::LSTM(32, {.unroll = true}), nn::Dense(1, nn::Activation::sigmoid)},
                       "net");
  kiln::optim::Adam opt({.learning_rate = 1e-3});
  const Tensor x = kiln::random::normal({16, 5, 10}, 0.0, 1.0, 1);
  const Tensor y = kiln::cast(kiln::sum(x, {1, 2}) > 0.f, kiln::f32);
  model(x);  // the weights exist before either function is traced

  auto predict = kiln::function([&](const Tensor& in) { return model(in); }, {.name = "predict"});
  auto train_step = kiln::function(
      [&](const Tensor& in, const Tensor& target) {
        std::vector<kiln::Variable> vars;
        std::vector<Tensor> grads;
        Tensor loss;
        {
          kiln::GradientTape tape;
          loss = nn::losses::binary_crossentropy(target, model(in));
          vars = model.trainable_variables();
          grads = tape.gradient(loss, vars);
        }
        opt.apply(grads, vars);
        return loss;
      },
      {.name = "train_step"});

  std::vector<Row> rows;
  {
    Row r{"predict"};
    r.first_ms = once_ms([&] { predict(x); });
    r.cached_us = kiln::bench::measure(plan, [&] { predict(x); }).median * 1e6;
    r.export_ms = once_ms(
        [&] { kiln::export_function(predict.get_concrete_function(x), dir / "predict.kiln"); });
    std::optional<kiln::LoadedFunction> loaded;
    r.load_ms = once_ms([&] { loaded = kiln::load_function(dir / "predict.kiln"); });
    r.loaded_first_ms = once_ms([&] { (*loaded)(x); });
    r.loaded_cached_us = kiln::bench::measure(plan, [&] { (*loaded)(x); }).median * 1e6;
    rows.push_back(r);
  }
  {
    Row r{"train step"};
    r.first_ms = once_ms([&] { train_step(x, y); });
    r.cached_us = kiln::bench::measure(plan, [&] { train_step(x, y); }).median * 1e6;
    r.export_ms = once_ms([&] {
      kiln::export_function(train_step.get_concrete_function(x, y), dir / "train_step.kiln");
    });
    std::optional<kiln::LoadedFunction> loaded;
    r.load_ms = once_ms([&] { loaded = kiln::load_function(dir / "train_step.kiln"); });
    r.loaded_first_ms = once_ms([&] { (*loaded)(x, y); });
    r.loaded_cached_us = kiln::bench::measure(plan, [&] { (*loaded)(x, y); }).median * 1e6;
    rows.push_back(r);
  }
  fmt::print("scenario 2 (batch 16, 5 steps, 10 features), exported and loaded in one run\n");
  for (const Row& r : rows) print(r);
  std::filesystem::remove_all(dir);
}

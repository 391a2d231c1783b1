// Workload 10 of bench/compare (issue 21): an embedding train step. A table of 1,000,000 x 64
// f32 (nn::Embedding) and a [64, 1] weight; each step looks up 4096 ids, predicts emb @ w,
// takes the mean squared error against a target and applies Adam (learning rate 1e-3, lazy
// sparse updates: only the touched rows of the table and its slots change). The step is one
// kiln::function, cached; eight batches of ids are drawn first and cycled. Reports the median
// step time and the step's peak memory above the live bytes before it (the table, its slots and
// the batches), against the bytes of the rows a step touches in the table and its two slots.
// Usage: kiln_bench_embedding [--quick] [--json]
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;

struct Sizes {
  std::int64_t vocab, dim, batch;
};

struct Figures {
  kiln::bench::Timing traced;
  std::int64_t peak_extra_bytes = 0;
  std::int64_t table_bytes = 0;
  std::int64_t touched_row_bytes = 0;
  std::vector<float> losses;
};

struct Model : kiln::Module {
  kiln::nn::Embedding embedding;
  kiln::nn::Dense head;
  Model(std::int64_t vocab, std::int64_t dim)
      : Module("model"),
        embedding(vocab, dim),
        head(1, kiln::nn::Activation::none, {.use_bias = false}) {
    add_module("embedding", embedding);
    add_module("head", head);
  }
  Tensor operator()(const Tensor& ids) { return head(embedding(ids)); }
};

Figures run(const Sizes& s, bool quick) {
  Model model(s.vocab, s.dim);
  kiln::optim::Adam opt({.learning_rate = 1e-3});
  constexpr int batches = 8;
  std::vector<Tensor> ids, targets;
  for (int b = 0; b < batches; ++b) {
    ids.push_back(kiln::random::uniform_int({s.batch}, 0, s.vocab, 100 + b));
    targets.push_back(kiln::random::uniform({s.batch, 1}, 0.0, 1.0, 200 + b));
  }
  auto step = kiln::function(
      [&](const Tensor& x, const Tensor& y) {
        kiln::GradientTape tape;
        const Tensor loss = kiln::mean(kiln::square(model(x) - y));
        const auto vars = model.trainable_variables();
        opt.apply(tape.gradient(loss, vars), vars);
        return loss;
      },
      {.name = "embedding_train"});
  Figures f;
  f.losses.push_back(step(ids[0], targets[0]).item<float>());  // creates the slots
  // Memory: one cached step above what lives between steps.
  kiln::reset_peak_bytes();
  const std::int64_t live = kiln::memory_stats().live_bytes;
  f.losses.push_back(step(ids[1], targets[1]).item<float>());
  f.peak_extra_bytes = kiln::memory_stats().peak_bytes - live;
  f.table_bytes = s.vocab * s.dim * 4;
  f.touched_row_bytes = 3 * s.batch * s.dim * 4;
  int next = 2;
  const kiln::bench::TimingPlan plan =
      quick ? kiln::bench::TimingPlan::quick() : kiln::bench::TimingPlan{};
  f.traced = kiln::bench::measure(plan, [&] {
    step(ids[next % batches], targets[next % batches]);
    ++next;
  });
  if (step.tracing_count() != 1)
    throw std::runtime_error(fmt::format("the step traced {} times", step.tracing_count()));
  return f;
}

int usage(std::string_view arg) {
  fmt::print(stderr,
             "usage: kiln_bench_embedding [--quick] [--json]\n"
             "  --quick  a 10,000 x 16 table, batch 256, one call per measurement\n"
             "  --json   print the results as JSON\n");
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv, false);
  if (args.bad()) return usage(args.unknown);
  const Sizes sizes = args.quick ? Sizes{10000, 16, 256} : Sizes{1000000, 64, 4096};
  Figures f;
  try {
    f = run(sizes, args.quick);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln_bench_embedding: {}\n", e.what());
    return 1;
  }
  const std::int64_t slot_bytes = 2 * f.table_bytes;
  if (args.json) {
    fmt::print(
        "{{\"program\": \"kiln_bench_embedding\", \"quick\": {}, \"vocab\": {}, \"dim\": {}, "
        "\"batch\": {}, \"losses\": [{}], \"rows\": [{{\"workload\": \"embedding_train\", "
        "\"median_s\": {}, \"p10_s\": {}, \"p90_s\": {}, \"samples\": {}, \"peak_extra_bytes\": "
        "{}, \"touched_row_bytes\": {}, \"table_bytes\": {}, \"slot_bytes\": {}}}]}}\n",
        args.quick, sizes.vocab, sizes.dim, sizes.batch, fmt::join(f.losses, ", "), f.traced.median,
        f.traced.p10, f.traced.p90, f.traced.samples, f.peak_extra_bytes, f.touched_row_bytes,
        f.table_bytes, slot_bytes);
  } else {
    fmt::print(
        "embedding train step, table {}x{}, batch {}: {:.3f} ms (spread {:.1f}%); peak above "
        "the live bytes {:.2f} MiB = {:.2f}x the touched rows of the table and its slots "
        "({:.2f} MiB); table {:.1f} MiB\n",
        sizes.vocab, sizes.dim, sizes.batch, f.traced.median * 1e3, f.traced.spread() * 100,
        f.peak_extra_bytes / 1048576.0,
        static_cast<double>(f.peak_extra_bytes) / static_cast<double>(f.touched_row_bytes),
        f.touched_row_bytes / 1048576.0, f.table_bytes / 1048576.0);
  }
  return 0;
}

// Optimizer updates alone: Adam, SGD with momentum (plain and Nesterov), RMSprop and Adagrad
// applied by a kiln::function to a fixed list of gradients, for two sets of variables:
// - "mlp": workload 9's six variables (1024x1024, 1024, 1024x1024, 1024, 1024x10, 10; 2.1
//   million parameters: Adam's variables, gradients and moments take 34 MiB);
// - "large": four [4096, 1024] variables (16.8 million parameters, 268 MiB for Adam).
// Each row prints the median and 10th-percentile time of one update and the bandwidth it
// reaches counting what one loop over the elements must move (Adam: the variable, gradient and
// two moments read and three of them written, 28 bytes per f32 parameter; the others, with one
// slot, 20). KILN_FUSED_GROUPS=0 turns off the grouped runs of jit/plan_groups.cpp for A/B
// comparisons; bench/peers/torch_optimizer_update.py times PyTorch on the same variables.
// Usage: kiln_bench_optimizer [--quick] [--json]
#include <fmt/format.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;

struct Model {
  const char* name;
  std::vector<Shape> shapes;
};

struct Rule {
  const char* name;
  int bytes_per_parameter;  // what one loop reads and writes per f32 parameter
  std::unique_ptr<kiln::optim::Optimizer> (*make)();
};

const Rule rules[] = {
    {"adam", 28,
     []() -> std::unique_ptr<kiln::optim::Optimizer> {
       return std::make_unique<kiln::optim::Adam>(kiln::optim::AdamOptions{.learning_rate = 1e-3});
     }},
    {"momentum", 20,
     []() -> std::unique_ptr<kiln::optim::Optimizer> {
       return std::make_unique<kiln::optim::SGD>(
           kiln::optim::SGDOptions{.learning_rate = 1e-2, .momentum = 0.9});
     }},
    {"nesterov", 20,
     []() -> std::unique_ptr<kiln::optim::Optimizer> {
       return std::make_unique<kiln::optim::SGD>(
           kiln::optim::SGDOptions{.learning_rate = 1e-2, .momentum = 0.9, .nesterov = true});
     }},
    {"rmsprop", 20,
     []() -> std::unique_ptr<kiln::optim::Optimizer> {
       return std::make_unique<kiln::optim::RMSprop>(
           kiln::optim::RMSpropOptions{.learning_rate = 1e-3});
     }},
    {"adagrad", 20,
     []() -> std::unique_ptr<kiln::optim::Optimizer> {
       return std::make_unique<kiln::optim::Adagrad>(
           kiln::optim::AdagradOptions{.learning_rate = 1e-3});
     }},
};

}  // namespace

int main(int argc, char** argv) try {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv);
  if (args.bad()) {
    fmt::print(stderr, "kiln_bench_optimizer: unknown argument {}\n", args.unknown);
    return 2;
  }
  const std::vector<Model> models = {
      {"mlp", {{1024, 1024}, {1024}, {1024, 1024}, {1024}, {1024, 10}, {10}}},
      {"large", {{4096, 1024}, {4096, 1024}, {4096, 1024}, {4096, 1024}}},
  };
  const kiln::bench::TimingPlan plan =
      args.quick ? kiln::bench::TimingPlan::quick() : kiln::bench::TimingPlan{0.3, 0.05, 21};
  std::vector<std::string> rows;
  for (const Model& model : models) {
    for (const Rule& rule : rules) {
      std::vector<Variable> vars;
      std::vector<Tensor> grads;
      std::int64_t parameters = 0;
      for (std::size_t i = 0; i < model.shapes.size(); ++i) {
        const auto seed = static_cast<std::uint64_t>(i);
        vars.emplace_back(kiln::random::normal(model.shapes[i], 0, 1, seed), fmt::format("v{}", i));
        grads.push_back(kiln::random::normal(model.shapes[i], 0, 1, 100 + seed));
        parameters += model.shapes[i].numel();
      }
      const auto optimizer = rule.make();
      auto update =
          kiln::function([&](const std::vector<Tensor>& g) { optimizer->apply(g, vars); });
      const kiln::bench::Timing t = kiln::bench::measure(plan, [&] { update(grads); });
      const double gbps =
          static_cast<double>(parameters * rule.bytes_per_parameter) / t.median / 1e9;
      if (args.json) {
        rows.push_back(fmt::format(
            R"({{"model": "{}", "rule": "{}", "parameters": {}, "median_s": {}, "p10_s": {}, )"
            R"("p90_s": {}, "gbps": {}}})",
            model.name, rule.name, parameters, t.median, t.p10, t.p90, gbps));
      } else {
        fmt::print(
            "{:<6} {:<9} {:>9} parameters: median {:8.3f} ms, p10 {:8.3f} ms, {:6.1f} GB/s\n",
            model.name, rule.name, parameters, t.median * 1e3, t.p10 * 1e3, gbps);
      }
    }
  }
  if (args.json) fmt::print("{{\"rows\": [{}]}}\n", fmt::join(rows, ", "));
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "kiln_bench_optimizer: {}\n", e.what());
  return 1;
}

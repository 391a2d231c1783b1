// Workload 9 of bench/compare (issue 18): an MLP train step. Dense(1024, relu) -> Dense(1024,
// relu) -> Dense(10), batch 256, 1024 input features, softmax cross-entropy of the logits
// against one-hot labels, with SGD (learning rate 0.1) and, as a second row, with Adam (learning
// rate 0.001, epsilon 1e-12, where Keras's and PyTorch's placements of it agree; see
// bench/peers/sizes.py): nn::Sequential of nn::Dense in a kiln::function with
// GradientTape and the optimizer (the pattern of bench/bench_train.cpp), cached call; the same
// steps eagerly for reference. --save-init writes the initial weights, x, y and kiln's first
// losses of both as .npz for the peers (bench/peers/peer_*_sizes.py).
// Usage: kiln_bench_mlp [--quick] [--json] [--save-init PATH]
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;
using kiln::bench::measure;
using kiln::bench::Timing;
using kiln::bench::TimingPlan;
using kiln::nn::Activation;
using kiln::nn::Dense;

constexpr std::int64_t classes = 10;
constexpr double learning_rate = 0.1;         // SGD's
constexpr double adam_learning_rate = 0.001;  // Adam's
constexpr double adam_epsilon = 1e-12;
constexpr int checked_steps = 3;  // losses compared traced against eager (and by the peers)

struct Sizes {
  std::int64_t batch, features, width;
};

/// The optimizers of the two rows.
enum class Rule { sgd, adam };

std::unique_ptr<kiln::optim::Optimizer> make_optimizer(Rule rule) {
  if (rule == Rule::adam)
    return std::make_unique<kiln::optim::Adam>(
        kiln::optim::AdamOptions{.learning_rate = adam_learning_rate, .epsilon = adam_epsilon});
  return std::make_unique<kiln::optim::SGD>(
      kiln::optim::SGDOptions{.learning_rate = learning_rate});
}

/// The model, its optimizer and its train step (eager: a plain call; traced: kiln::function).
struct Trainer {
  kiln::nn::Sequential net;
  std::unique_ptr<kiln::optim::Optimizer> opt;
  Trainer(std::int64_t width, Rule rule)
      : net({Dense(width, Activation::relu), Dense(width, Activation::relu), Dense(classes)}),
        opt(make_optimizer(rule)) {}
  Tensor step(const Tensor& x, const Tensor& y) {
    std::vector<kiln::Variable> vars;
    std::vector<Tensor> grads;
    Tensor loss;
    {
      kiln::GradientTape tape;
      loss = kiln::nn::losses::categorical_crossentropy_from_logits(y, net(x));
      vars = net.trainable_variables();
      grads = tape.gradient(loss, vars);
    }
    opt->apply(grads, vars);
    return loss;
  }
  void create_weights(const Tensor& x) {
    kiln::random::set_global_seed(9);
    net(x);
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// One optimizer's row.
struct Figures {
  Timing eager, traced;
  double first_call_s = 0;
  std::size_t nodes = 0;
  std::vector<float> losses;  // traced; eager matched them
};

struct Failure {
  std::string what;
};

/// The one-hot labels: sample i is of class (7 i + 3) mod 10.
Tensor one_hot_labels(std::int64_t batch) {
  std::vector<float> y(static_cast<std::size_t>(batch * classes), 0.0f);
  for (std::int64_t i = 0; i < batch; ++i)
    y[static_cast<std::size_t>(i * classes + (7 * i + 3) % classes)] = 1.0f;
  return kiln::tensor(y, {batch, classes});
}

/// One optimizer's row on x and y. Every trainer starts from the same weights (one seed); the
/// first row saves them in `arrays`, the others check theirs against them.
Figures run(const Sizes& s, Rule rule, const Tensor& x, const Tensor& y, bool quick,
            std::map<std::string, Tensor>& arrays) {
  Trainer eager(s.width, rule), traced(s.width, rule);
  eager.create_weights(x);
  traced.create_weights(x);
  for (std::size_t i = 0; i < traced.net.size(); ++i)
    for (const auto& [name, var] : traced.net.layer(i).named_variables()) {
      const std::string key = fmt::format("l{}/{}", i, name.substr(name.rfind('/') + 1));
      if (!arrays.contains(key))
        arrays[key] = var.value();
      else if (!kiln::all(kiln::equal(arrays[key], var.value())).item<bool>())
        throw Failure{fmt::format("initial {} differs between the rows", key)};
    }

  auto step = kiln::function(
      [&](const Tensor& in, const Tensor& target) { return traced.step(in, target); },
      {.name = rule == Rule::adam ? "mlp_adam_train" : "mlp_train"});
  Figures f;
  const auto t0 = std::chrono::steady_clock::now();
  f.losses.push_back(step(x, y).item<float>());
  f.first_call_s = seconds_since(t0);
  for (int i = 1; i < checked_steps; ++i) f.losses.push_back(step(x, y).item<float>());
  for (int i = 0; i < checked_steps; ++i) {
    const float want = eager.step(x, y).item<float>(), got = f.losses[i];
    if (!std::isfinite(got) || !(std::abs(got - want) <= 1e-5f * std::max(1.0f, std::abs(want))))
      throw Failure{fmt::format("traced loss {} of step {} differs from eager's {}", got, i, want)};
  }
  if (!(f.losses.back() < f.losses.front()))
    throw Failure{fmt::format("losses {} do not decrease", fmt::join(f.losses, ", "))};
  arrays[rule == Rule::adam ? "adam_losses" : "losses"] = kiln::tensor(f.losses);
  f.nodes = step.get_concrete_function(x, y).graph().num_nodes();
  const TimingPlan plan = quick ? TimingPlan::quick() : TimingPlan{};
  f.traced = measure(plan, [&] { step(x, y); });
  f.eager = measure(plan, [&] { eager.step(x, y); });
  return f;
}

std::string timing_json(const Timing& t) {
  return fmt::format("{{\"median_s\": {}, \"p10_s\": {}, \"p90_s\": {}, \"samples\": {}}}",
                     t.median, t.p10, t.p90, t.samples);
}

int usage(std::string_view arg) {
  fmt::print(stderr,
             "usage: kiln_bench_mlp [--quick] [--json] [--save-init PATH]\n"
             "  --quick           batch 16, 32 features, width 64, one call per measurement\n"
             "  --json            print the results as JSON\n"
             "  --save-init PATH  write the initial weights (l0/kernel, ...), x, y and kiln's\n"
             "                    first losses as .npz (for the peers)\n");
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv, true);
  if (args.bad()) return usage(args.unknown);
  const Sizes sizes = args.quick ? Sizes{16, 32, 64} : Sizes{256, 1024, 1024};
  std::map<std::string, Tensor> arrays;
  Figures sgd, adam;
  try {
    const Tensor x = kiln::random::normal({sizes.batch, sizes.features}, 0, 1, 400);
    const Tensor y = one_hot_labels(sizes.batch);
    arrays["x"] = x;
    arrays["y"] = y;
    sgd = run(sizes, Rule::sgd, x, y, args.quick, arrays);
    adam = run(sizes, Rule::adam, x, y, args.quick, arrays);
  } catch (const Failure& e) {
    fmt::print(stderr, "kiln_bench_mlp: {}\n", e.what);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln_bench_mlp: {}\n", e.what());
    return 1;
  }
  if (!args.init_path.empty()) kiln::io::save_npz(args.init_path, arrays);
  if (args.json) {
    fmt::print(
        "{{\"program\": \"kiln_bench_mlp\", \"quick\": {}, \"batch\": {}, \"features\": {}, "
        "\"width\": {}, \"classes\": {}, \"learning_rate\": {}, \"nodes\": {}, \"losses\": [{}], "
        "\"first_call_s\": {}, \"traced\": {}, \"eager\": {}, \"adam\": {{\"learning_rate\": {}, "
        "\"nodes\": {}, \"losses\": [{}], \"first_call_s\": {}, \"traced\": {}, \"eager\": "
        "{}}}}}\n",
        args.quick, sizes.batch, sizes.features, sizes.width, classes, learning_rate, sgd.nodes,
        fmt::join(sgd.losses, ", "), sgd.first_call_s, timing_json(sgd.traced),
        timing_json(sgd.eager), adam_learning_rate, adam.nodes, fmt::join(adam.losses, ", "),
        adam.first_call_s, timing_json(adam.traced), timing_json(adam.eager));
  } else {
    for (const auto& [label, f] : {std::pair{"SGD", &sgd}, std::pair{"Adam", &adam}})
      fmt::print(
          "MLP train step ({}) {}x{} -> {} -> {} -> {}: traced {:.3f} ms (spread {:.1f}%), eager "
          "{:.3f} ms, first call {:.2f} ms, {} nodes\nlosses: {}\n",
          label, sizes.batch, sizes.features, sizes.width, sizes.width, classes,
          f->traced.median * 1e3, f->traced.spread() * 100, f->eager.median * 1e3,
          f->first_call_s * 1e3, f->nodes, fmt::join(f->losses, ", "));
  }
  return 0;
}

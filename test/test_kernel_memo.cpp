// Kernel memos (kernels/kernel.hpp KernelMemo): a compiled LSTM or GRU keeps its weights packed
// between calls, and whatever changes the weights (an assignment, an optimizer's update in place, a
// row update, a reload) is seen by the next call; the memo is shared by a function's plans for
// every sequence length, used from several threads, and let go of with the function.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

namespace {

using kiln::Tensor;
using kiln::test::max_diff;

// 64 units, batch 32, 16 steps: the forward runs in two parts (one per thread), as
// test_fused_recurrent.cpp's table explains; 40 units: one part with a part-filled panel.
constexpr std::int64_t batch = 32, steps = 16, features = 6;

/// A recurrent layer (nn::LSTM or nn::GRU), a compiled forward of it, and its eager forward to
/// check the compiled one against.
template <class Layer = kiln::nn::LSTM>
struct Forward {
  Layer layer;
  kiln::Function<std::function<Tensor(const Tensor&)>> traced;
  explicit Forward(std::int64_t units, kiln::FunctionOptions options = {})
      : layer(units, {.return_sequences = true}),
        traced(std::function<Tensor(const Tensor&)>([this](const Tensor& x) { return layer(x); }),
               std::move(options)) {}
  /// The compiled call's largest difference from the eager one.
  double error(const Tensor& x) { return max_diff(traced(x), layer(x)); }
};

Tensor input(std::int64_t length, std::uint64_t seed) {
  return kiln::random::normal({batch, length, features}, 0, 1, seed);
}

}  // namespace

TEMPLATE_TEST_CASE(
    "a compiled LSTM or GRU sees every change of its weights after keeping them "
    "packed",
    "[fused_recurrent][function]", kiln::nn::LSTM, kiln::nn::GRU) {
  for (const std::int64_t units : {64, 40}) {
    INFO(units << " units");
    Forward<TestType> f(units);
    const Tensor x = input(steps, 1);
    CHECK(f.error(x) <= 2e-5);
    CHECK(f.error(x) <= 2e-5);  // from the kept packing
    kiln::Variable w = f.layer.recurrent_kernel();
    const auto changed = [&](const char* how) {
      INFO(how);
      CHECK(f.error(x) <= 2e-5);
      CHECK(f.error(x) <= 2e-5);
    };
    w.assign(w.value() * 0.5);
    changed("assign");
    w.assign_sub(kiln::full(w.shape(), 0.01));
    changed("assign_sub");
    f.layer.kernel().assign_add(kiln::full(f.layer.kernel().shape(), 0.02));
    changed("assign_add of the input kernel");
    f.layer.bias().assign(f.layer.bias().value() + 0.3);
    changed("assign of the bias");
    w.scatter_update(kiln::tensor(std::vector<std::int64_t>{0, 3}, {2}),
                     kiln::full({2, w.shape()[1]}, 0.25));
    changed("scatter_update of two rows");
    // An optimizer's update in a compiled train step, which writes a variable in place when
    // nothing else holds its value.
    kiln::optim::SGD sgd({.learning_rate = 0.5});
    auto train = kiln::function([&](const Tensor& in) {
      std::vector<kiln::Variable> vars = f.layer.trainable_variables();
      std::vector<Tensor> grads;
      Tensor loss;
      {
        kiln::GradientTape tape;
        loss = kiln::mean(kiln::square(f.layer(in)));
        grads = tape.gradient(loss, vars);
      }
      sgd.apply(grads, vars);
      return loss;
    });
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> before = w.value().to_vector<float>();  // not holding the value
      train(x);
      CHECK(w.value().to_vector<float>() != before);
      changed("a compiled SGD step");
    }
    // A reload from a file.
    const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                       ("kiln_memo_" + std::to_string(units) + ".safetensors");
    kiln::save_weights(f.layer, file);
    w.assign(kiln::zeros(w.shape()));
    changed("assign zeros");
    kiln::load_weights(f.layer, file);
    std::filesystem::remove(file);
    changed("load_weights");
    CHECK(f.traced.tracing_count() == 1);
  }
}

TEST_CASE("a compiled LSTM keeps one packing for every sequence length and lets go of it",
          "[fused_recurrent][function]") {
  const kiln::MemoryStats before = kiln::memory_stats();
  {
    Forward<> f(64, {.input_signature = {kiln::TensorSpec({batch, -1, features})}});
    std::int64_t kept = 0;
    for (int round = 0; round < 2; ++round)
      for (const std::int64_t length : {16, 20, 1, 17, 16}) {
        INFO("T = " << length << ", round " << round);
        CHECK(f.error(input(length, 2 + static_cast<std::uint64_t>(length))) <= 2e-5);
        const std::int64_t graph_bytes = kiln::memory_stats().graph_bytes - before.graph_bytes;
        if (round == 1) CHECK(graph_bytes <= kept);  // nothing grows after the first round
        kept = std::max(kept, graph_bytes);
      }
    CHECK(f.traced.tracing_count() == 1);
    // The packing is counted: at least the 64 x 256 recurrent kernel's floats.
    CHECK(kept >= 64 * 256 * 4);
  }
  CHECK(kiln::memory_stats().graph_bytes == before.graph_bytes);
}

TEST_CASE("a compiled LSTM called from several threads at once equals its eager form",
          "[fused_recurrent][function][threads]") {
  Forward<> f(64);
  const Tensor x = input(steps, 3);
  const Tensor want = f.layer(x);
  // Each thread keeps its calls' outputs; they are checked here (Catch's assertions are for
  // the test's own thread).
  std::vector<std::vector<Tensor>> outputs(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < outputs.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) outputs[t].push_back(f.traced(x));
    });
  for (std::thread& t : threads) t.join();
  for (const std::vector<Tensor>& calls : outputs) {
    REQUIRE(calls.size() == 5);
    for (const Tensor& out : calls) CHECK(max_diff(out, want) <= 2e-5);
  }
}

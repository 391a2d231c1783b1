// Weights and checkpoints: save a model's weights by variable path, load them into a model
// whose forward pass is a cached kiln::function (no retrace, no growth), map weight names from
// another framework, and restore a checkpoint into a model that has not built its layers yet.
#include <fmt/format.h>

#include <filesystem>

#include <kiln/kiln.hpp>

namespace {

/// A dense layer that creates its variables on the first call, from the input's last dim.
struct Dense : kiln::Module {
  std::int64_t units;
  Dense(std::string name, std::int64_t u) : Module(std::move(name)), units(u) {}
  kiln::Tensor operator()(const kiln::Tensor& x) {
    const auto kernel = add_variable("kernel", {x.shape()[x.ndim() - 1], units},
                                     kiln::init::glorot_uniform());
    const auto bias = add_variable("bias", {units}, kiln::init::zeros());
    return kiln::matmul(x, kernel.value()) + bias.value();
  }
};

struct Net : kiln::Module {
  Dense l1{"l1", 16}, l2{"l2", 1};
  Net() : Module("net") {
    add_module("l1", l1);
    add_module("l2", l2);
  }
  kiln::Tensor operator()(const kiln::Tensor& x) { return kiln::sigmoid(l2(kiln::tanh(l1(x)))); }
};

}  // namespace

int main() {
  const auto dir = std::filesystem::temp_directory_path() / "kiln-checkpoint-example";
  std::filesystem::create_directories(dir);
  const kiln::Tensor x = kiln::random::normal({4, 8}, 0, 1, 1);

  // 1. Save the weights of a trained (here: built) model; keys are variable paths.
  Net trained;
  const kiln::Tensor expected = trained(x);
  kiln::save_weights(trained, dir / "net.safetensors");
  for (const auto& info : kiln::io::inspect(dir / "net.safetensors"))
    fmt::print("saved {:<14} {} {}\n", info.name, info.stored_dtype, info.shape);

  // 2. Load them into another model whose forward pass is a cached function: the next call
  //    uses the new values, with no retrace and no new graph nodes.
  Net served;
  auto forward = kiln::function([&](const kiln::Tensor& in) { return served(in); });
  forward(x);
  const auto nodes = forward.get_concrete_function(x).graph().num_nodes();
  const auto before = kiln::memory_stats();
  for (int i = 0; i < 100; ++i) kiln::load_weights(served, dir / "net.safetensors");
  const auto after = kiln::memory_stats();
  fmt::print("after 100 loads: same output {}, traces {}, nodes {} -> {}, live bytes {} -> {}\n",
             kiln::all(kiln::equal(forward(x), expected)).item<bool>(), forward.tracing_count(),
             nodes, forward.get_concrete_function(x).graph().num_nodes(), before.live_bytes,
             after.live_bytes);

  // 3. Strict loading reports every problem at once and changes nothing.
  kiln::io::save_safetensors(dir / "other.safetensors",
                             {{"fc1.weight", kiln::zeros({8, 16})}, {"fc1.bias", kiln::zeros({16})},
                              {"fc2.weight", kiln::zeros({16, 1})}, {"fc2.bias", kiln::ones({1})}});
  try {
    kiln::load_weights(served, dir / "other.safetensors");
  } catch (const kiln::Error& e) {
    fmt::print("strict load refused:\n{}\n", e.what());
  }
  // ...and a key map loads weights named by another framework.
  const auto torch_names = [](const std::string& key) {
    const std::string layer = key.rfind("fc1", 0) == 0 ? "l1" : "l2";
    return layer + (key.find("weight") != std::string::npos ? "/kernel" : "/bias");
  };
  const auto result =
      kiln::load_weights(served, dir / "other.safetensors", {.key_map = torch_names});
  fmt::print("mapped load: {} variables, output now {}\n", result.loaded.size(),
             forward(x).to_vector<float>()[0]);

  // 4. A checkpoint restored before the layers are built: values wait for their variables.
  kiln::Variable step(kiln::scalar(41.0, kiln::i64), "step", false);
  kiln::Checkpoint({{"model", &trained}}).track("step", step).save(dir / "ckpt");
  Net fresh;
  kiln::Variable fresh_step(kiln::scalar(0.0, kiln::i64), "fresh_step", false);
  kiln::Checkpoint ckpt({{"model", &fresh}});
  ckpt.track("step", fresh_step);
  ckpt.restore(dir / "ckpt");
  fmt::print("restored step {}, {} values waiting for variables\n",
             fresh_step.value().item<std::int64_t>(), ckpt.pending().size());
  const kiln::Tensor y = fresh(x);  // builds the layers with the restored values
  ckpt.assert_consumed();
  fmt::print("fresh model after its first call matches: {}\n",
             kiln::all(kiln::equal(y, expected)).item<bool>());
  std::filesystem::remove_all(dir);
  return 0;
}

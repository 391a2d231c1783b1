// docs/guide/variables.md: variables, scopes with get_variable, and a module tree with paths,
// freezing and get_weights/set_weights.
#include <kiln/kiln.hpp>

namespace {

struct Net : kiln::Module {
  kiln::nn::Dense hidden{8, kiln::nn::Activation::relu}, out{1};
  Net() : Module("net") {
    add_module("hidden", hidden);
    add_module("out", out);
  }
  kiln::Tensor operator()(const kiln::Tensor& x) { return out(hidden(x)); }
};

}  // namespace

int main() {
  kiln::Variable counter(kiln::zeros({}, kiln::i64), "counter", /*trainable*/ false);
  for (int i = 0; i < 3; ++i) counter.assign_add(kiln::scalar(std::int64_t{1}));
  fmt::print("{} = {}\n", counter.name(), counter.value().item<std::int64_t>());

  // get_variable with explicit reuse rules.
  for (int call = 0; call < 3; ++call) {
    kiln::NameScope scope("layer1");
    kiln::get_variable("weights", {4, 2}, kiln::init::glorot_uniform(), kiln::Reuse::Auto);
  }
  fmt::print("after 3 calls, layer1 holds {} variable(s)\n",
             kiln::global_variables("layer1").size());
  try {
    kiln::NameScope scope("layer1");
    kiln::get_variable("bias", {2}, kiln::init::zeros(), kiln::Reuse::Yes);
  } catch (const kiln::Error& e) {
    fmt::print("Reuse::Yes on a missing name: {}\n", e.what());
  }
  kiln::clear_session();

  // Modules.
  Net net;
  net(kiln::ones({2, 4}));
  for (const auto& [path, v] : net.named_variables())
    fmt::print("  {:<18} {} trainable={}\n", path, v.shape(), v.trainable());
  net.hidden.freeze();
  fmt::print("hidden frozen: {} of {} variables trainable\n", net.trainable_variables().size(),
             net.variables().size());
  net.hidden.unfreeze();
  auto weights = net.get_weights();
  weights[0] = kiln::zeros_like(weights[0]);
  net.set_weights(weights);
  fmt::print("after set_weights the hidden kernel sums to {}\n",
             kiln::sum(net.variable("hidden/kernel").value()).item<float>());
  try {
    net.variable("hiden/kernel");
  } catch (const kiln::Error& e) {
    fmt::print("typo: {}\n", e.what());
  }
  return 0;
}

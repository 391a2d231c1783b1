// A small transformer encoder trained by train::fit (docs/guide/cnn-and-transformer.md). Each
// sample is a sequence of 12 tokens of 16 symbols (one-hot) with a flag on the last position;
// the label says whether the last token's symbol occurs earlier in the sequence, which the last
// position can only learn by attending to the others. One encoder block (multi-head
// self-attention and a feed-forward network, each with a residual connection and layer
// normalization), then the last position's features -> Dense(1, sigmoid).
//
// Usage: transformer. Exits 0 when the validation accuracy of the last epoch is above 0.9 (about
// half the labels are 1) and the train step was traced once.
#include <fmt/format.h>

#include <vector>

#include <kiln/kiln.hpp>

namespace nn = kiln::nn;
namespace train = kiln::train;

namespace {

constexpr std::int64_t kLength = 12, kSymbols = 16, kWidth = 32;

/// The encoder: a Module with its layers as submodules (their variables are found by path).
struct Encoder : kiln::Module {
  nn::Dense embed{kWidth};
  nn::MultiHeadAttention attention{4, kWidth / 4};
  nn::LayerNormalization norm1, norm2;
  nn::Dense expand{2 * kWidth, nn::Activation::relu};
  nn::Dense project{kWidth};
  nn::Dense head{1, nn::Activation::sigmoid};

  Encoder() : Module("encoder") {
    add_module("embed", embed);
    add_module("attention", attention);
    add_module("norm1", norm1);
    add_module("norm2", norm2);
    add_module("expand", expand);
    add_module("project", project);
    add_module("head", head);
  }

  kiln::Tensor operator()(const kiln::Tensor& tokens) {
    const kiln::Tensor h = embed(tokens);                               // [batch, 12, 32]
    const kiln::Tensor a = norm1(h + attention(h));                     // self-attention block
    const kiln::Tensor f = norm2(a + project(expand(a)));               // feed-forward block
    const kiln::Tensor last = kiln::slice(f, 1, kLength - 1, kLength);  // [batch, 1, 32]
    return kiln::reshape(head(last), {-1, 1});
  }
};

/// n sequences [n, 12, 17] (16 one-hot symbols and the last-position flag) and labels [n, 1].
std::pair<kiln::Tensor, kiln::Tensor> make_sequences(std::int64_t n, std::uint64_t seed) {
  const std::vector<std::int32_t> symbols =
      kiln::random::uniform_int({n, kLength}, 0, kSymbols, seed).to_vector<std::int32_t>();
  std::vector<float> features(static_cast<std::size_t>(n * kLength * (kSymbols + 1)), 0.0f);
  std::vector<float> labels(static_cast<std::size_t>(n), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto symbol = [&](std::int64_t t) {
      return symbols[static_cast<std::size_t>(i * kLength + t)];
    };
    for (std::int64_t t = 0; t < kLength; ++t) {
      const std::int64_t at = (i * kLength + t) * (kSymbols + 1);
      features[static_cast<std::size_t>(at + symbol(t))] = 1.0f;
      if (t == kLength - 1) features[static_cast<std::size_t>(at + kSymbols)] = 1.0f;
      if (t < kLength - 1 && symbol(t) == symbol(kLength - 1))
        labels[static_cast<std::size_t>(i)] = 1.0f;
    }
  }
  return {kiln::tensor(features, {n, kLength, kSymbols + 1}), kiln::tensor(labels, {n, 1})};
}

}  // namespace

int main() {
  kiln::random::set_global_seed(13);
  const auto [x, y] = make_sequences(2000, 21);
  fmt::print("{:.2f} of the labels are 1\n", kiln::mean(y).item<float>());

  Encoder model;
  kiln::optim::Adam opt({.learning_rate = 3e-3});
  const train::History history = train::fit(model, opt, nn::losses::binary_crossentropy, x, y,
                                            {.epochs = 20,
                                             .batch_size = 32,
                                             .seed = 4,
                                             .verbose = 2,
                                             .metrics = {train::metrics::binary_accuracy()},
                                             .validation_split = 0.2});

  const auto& val_loss = history.at("val_loss");
  fmt::print("val_loss {:.4f} -> {:.4f}, val accuracy {:.3f}; train step traced {} time(s)\n",
             val_loss.front(), val_loss.back(), history.at("val_binary_accuracy").back(),
             history.traces);
  return history.at("val_binary_accuracy").back() > 0.9 && history.traces == 1 ? 0 : 1;
}

// A small convolutional network trained by train::fit (docs/guide/cnn-and-transformer.md): 12x12
// single-channel images that hold a horizontal bar, a vertical bar or a diagonal one at a random
// place, under noise; the network names the kind. Conv2D -> BatchNormalization -> MaxPooling2D
// -> Conv2D -> GlobalAveragePooling2D -> Dense(3, softmax), Adam, sparse categorical
// cross-entropy, 20% of the images held out for validation.
//
// Usage: cnn. Exits 0 when the validation accuracy of the last epoch is above 0.9 and the train
// step was traced once.
#include <fmt/format.h>

#include <vector>

#include <kiln/kiln.hpp>

namespace nn = kiln::nn;
namespace train = kiln::train;

namespace {

/// n images [n, 12, 12, 1] and their labels [n] (0 horizontal, 1 vertical, 2 diagonal).
std::pair<kiln::Tensor, kiln::Tensor> make_images(std::int64_t n, std::uint64_t seed) {
  constexpr std::int64_t size = 12, bar = 5;
  const std::vector<std::int32_t> kinds =
      kiln::random::uniform_int({n}, 0, 3, seed).to_vector<std::int32_t>();
  const std::vector<std::int32_t> places =
      kiln::random::uniform_int({n, 2}, 0, size - bar, seed + 1).to_vector<std::int32_t>();
  std::vector<float> pixels(static_cast<std::size_t>(n * size * size), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto kind = kinds[static_cast<std::size_t>(i)];
    const std::int64_t r = places[static_cast<std::size_t>(2 * i)];
    const std::int64_t c = places[static_cast<std::size_t>(2 * i + 1)];
    for (std::int64_t k = 0; k < bar; ++k) {
      const std::int64_t row = kind == 1 ? r + k : kind == 0 ? r + bar / 2 : r + k;
      const std::int64_t col = kind == 0 ? c + k : kind == 1 ? c + bar / 2 : c + k;
      pixels[static_cast<std::size_t>((i * size + row) * size + col)] = 1.0f;
    }
  }
  const kiln::Tensor clean = kiln::tensor(pixels, {n, size, size, 1});
  const kiln::Tensor noise = kiln::random::normal({n, size, size, 1}, 0.0, 0.3, seed + 2);
  return {clean + noise, kiln::tensor(kinds, {n})};
}

}  // namespace

int main() {
  kiln::random::set_global_seed(11);
  const auto [x, y] = make_images(1500, 5);

  nn::Sequential model(
      {nn::Conv2D(8, {3}, {.padding = kiln::ConvPadding::same}), nn::BatchNormalization(),
       nn::ActivationLayer(nn::Activation::relu), nn::MaxPooling2D(),
       nn::Conv2D(16, {3}, {.activation = nn::Activation::relu}), nn::GlobalAveragePooling2D(),
       nn::Dense(3, nn::Activation::softmax)},
      "cnn");
  kiln::optim::Adam opt({.learning_rate = 1e-2});
  const train::History history =
      train::fit(model, opt, nn::losses::sparse_categorical_crossentropy, x, y,
                 {.epochs = 8,
                  .batch_size = 32,
                  .seed = 3,
                  .verbose = 2,
                  .metrics = {train::metrics::sparse_categorical_accuracy()},
                  .validation_split = 0.2});

  const double accuracy = history.at("val_sparse_categorical_accuracy").back();
  fmt::print("validation accuracy after {} epochs: {:.3f}; train step traced {} time(s)\n",
             history.epochs.size(), accuracy, history.traces);
  fmt::print("variables: {}\n", model.variables().size());
  return accuracy > 0.9 && history.traces == 1 ? 0 : 1;
}

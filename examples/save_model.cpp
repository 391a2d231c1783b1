// Saves a trained model as data: its architecture (model.json), its weights (model.safetensors)
// and an input with the model's predictions for it (input.npy, predictions.npy), in the folder
// given (default: the current one). examples/load_model.cpp rebuilds the model from the files
// alone, with none of this code, and prints the same predictions.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include <kiln/kiln.hpp>

namespace nn = kiln::nn;

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : ".";
  std::filesystem::create_directories(dir);

  nn::Sequential model({nn::LSTM(16, {.return_sequences = true}), nn::GRU(8),
                        nn::Dense(1, nn::Activation::sigmoid, {.name = "out"})},
                       "classifier");
  kiln::optim::Adam opt({.learning_rate = 1e-2});
  const kiln::Tensor x = kiln::random::normal({64, 5, 4}, 0.0, 1.0, /*seed*/ 3);
  const kiln::Tensor y = kiln::cast(kiln::sum(x, {1, 2}) > 0.f, kiln::f32);
  const auto history = kiln::train::fit(model, opt, nn::losses::binary_crossentropy, x, y,
                                        {.epochs = 5, .batch_size = 16, .verbose = 0});
  fmt::print("trained: loss {:.3f} -> {:.3f}\n", history.loss.front(), history.loss.back());

  nn::save_architecture(model, dir / "model.json");
  kiln::save_weights(model, dir / "model.safetensors");
  const kiln::Tensor sample = kiln::slice(x, 0, 0, 4);
  const kiln::Tensor predictions = model(sample);
  kiln::io::save_npy(dir / "input.npy", sample);
  kiln::io::save_npy(dir / "predictions.npy", predictions);
  fmt::print("saved model.json, model.safetensors, input.npy and predictions.npy\n");
  fmt::print("predictions: {::.6f}\n", predictions.to_vector<float>());
}

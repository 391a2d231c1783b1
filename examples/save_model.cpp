// Saves a trained model as data, in the folder given (default: the current one): its
// architecture (model.json), its weights (model.safetensors), its traced predict function
// exported with its weights (model.kiln), and an input with the model's predictions for it
// (input.npy, predictions.npy). examples/load_model.cpp rebuilds the model from the first two
// files, examples/run_exported.cpp runs model.kiln; both have none of this code and print the
// same predictions.
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
  // The traced predict call for any batch size: graph, compiled plan's inputs and weights.
  auto predict = kiln::function([&](const kiln::Tensor& in) { return model(in); },
                                {.name = "predict", .input_signature = {{{-1, 5, 4}}}});
  kiln::export_function(predict.get_concrete_function(sample), dir / "model.kiln");
  fmt::print("saved model.json, model.safetensors, model.kiln, input.npy and predictions.npy\n");
  fmt::print("predictions: {::.6f}\n", predictions.to_vector<float>());
}

// Loads the model examples/save_model.cpp saved, from its files alone: the architecture file
// rebuilds the layers (with every variable, since the file says what input they were built
// for), load_weights fills them, and the predictions for the saved input are printed and
// checked against the saved ones. Nothing here knows what layers the model has.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include <kiln/kiln.hpp>

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : ".";
  const std::unique_ptr<kiln::nn::Layer> model =
      kiln::nn::load_architecture<kiln::nn::Layer>(dir / "model.json");
  kiln::load_weights(*model, dir / "model.safetensors");
  fmt::print("loaded '{}': {} variables\n", model->name(), model->variables().size());

  const kiln::Tensor predictions = (*model)(kiln::io::load_npy(dir / "input.npy"));
  const kiln::Tensor saved = kiln::io::load_npy(dir / "predictions.npy");
  fmt::print("predictions: {::.6f}\n", predictions.to_vector<float>());
  const bool same = kiln::all(kiln::equal(predictions, saved)).item<bool>();
  fmt::print("same as the saved predictions: {}\n", same);
  return same ? 0 : 1;
}

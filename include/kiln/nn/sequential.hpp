#pragma once
/// @file nn/sequential.hpp
/// nn::Sequential: layers applied one after the other.

#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// A layer handed to Sequential: either a layer moved in (Sequential then owns it) or a
/// shared_ptr to one.
class LayerArg {
 public:
  template <class L>
  requires std::derived_from<L, Layer> &&(!std::is_reference_v<L>)
      LayerArg(L&& layer)  // NOLINT(google-explicit-constructor): {Dense(4), LSTM(8)} lists
      : layer_(std::make_shared<L>(std::move(layer))) {}
  template <class L>
  requires std::derived_from<L, Layer> LayerArg(
      std::shared_ptr<L> layer)  // NOLINT(google-explicit-constructor)
      : layer_(std::move(layer)) {}

  const std::shared_ptr<Layer>& get() const { return layer_; }

 private:
  std::shared_ptr<Layer> layer_;
};

/// Applies its layers in order. It owns them, registered as children under their own names
/// (so variables are "sequential/lstm/kernel", "sequential/lstm_1/kernel", "sequential/dense/
/// kernel" for automatically named layers):
///
/// ```cpp
/// kiln::nn::Sequential seq({kiln::nn::LSTM(64, {.return_sequences = true}), kiln::nn::LSTM(32),
///                           kiln::nn::Dense(1, kiln::nn::Activation::sigmoid)});
/// ```
///
/// Two layers with the same name are an error (explicitly named layers must differ).
class Sequential : public Layer {
 public:
  /// An empty model named `name` (automatic: "sequential", "sequential_1", ...).
  explicit Sequential(std::string name = {});
  Sequential(std::initializer_list<LayerArg> layers, std::string name = {});

  /// Appends a layer (moved in, or shared) and returns it.
  template <class L>
  requires std::derived_from<L, Layer> &&(!std::is_reference_v<L>)L& add(L&& layer) {
    return static_cast<L&>(add_layer(std::make_shared<L>(std::move(layer))));
  }
  template <class L>
  requires std::derived_from<L, Layer> L& add(std::shared_ptr<L> layer) {
    L* raw = layer.get();
    add_layer(std::move(layer));
    return *raw;
  }

  /// x through every layer in order (an empty Sequential is an error).
  Tensor operator()(const Tensor& x) override;

  std::size_t size() const { return layers_.size(); }
  /// Layer i (in order of addition).
  Layer& layer(std::size_t i) const;
  const std::vector<Layer*>& layers() const { return layers_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static Sequential from_config(const Config& config);

 private:
  Layer& add_layer(std::shared_ptr<Layer> layer);
  std::vector<Layer*> layers_;  // owned through Module::add_module
};

}  // namespace kiln::nn

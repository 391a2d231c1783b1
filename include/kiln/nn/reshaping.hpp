#pragma once
/// @file nn/reshaping.hpp
/// Layers without variables that reshape or transform their input: Flatten, Reshape and
/// ActivationLayer (Keras's Flatten, Reshape and Activation).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// [batch, d1, d2, ...] -> [batch, d1 * d2 * ...] (rank >= 1; a rank-1 input becomes
/// [batch, 1]), in row-major order. The batch dim may be dynamic inside a traced function; the
/// other dims must be static.
class Flatten : public Layer {
 public:
  explicit Flatten(std::string name = {});

  Tensor operator()(const Tensor& x) override;

  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe.
  Config config() const;
  static Flatten from_config(const Config& config);
};

/// [batch, ...] -> [batch, target_shape...]: the target shape leaves the batch dim out and may
/// hold one -1 (inferred from the element count). The batch dim may be dynamic.
class Reshape : public Layer {
 public:
  explicit Reshape(std::vector<std::int64_t> target_shape, std::string name = {});

  Tensor operator()(const Tensor& x) override;

  const std::vector<std::int64_t>& target_shape() const { return target_shape_; }
  Config config() const;
  static Reshape from_config(const Config& config);

 private:
  std::vector<std::int64_t> target_shape_;
};

/// An activation as a layer of its own (Keras's Activation layer; the name Activation is
/// kiln's enum of activations, so the layer is ActivationLayer, stored in architecture files
/// as "Activation"). Elementwise; softmax is over the last axis.
class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(Activation activation, std::string name = {});
  /// By name: "none", "relu", "sigmoid", "tanh" or "softmax"; another is a kiln::Error.
  explicit ActivationLayer(std::string_view activation, std::string name = {});

  Tensor operator()(const Tensor& x) override;

  Activation activation() const { return activation_; }
  Config config() const;
  static ActivationLayer from_config(const Config& config);

 private:
  Activation activation_;
};

}  // namespace kiln::nn

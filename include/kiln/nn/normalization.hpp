#pragma once
/// @file nn/normalization.hpp
/// Keras's LayerNormalization and BatchNormalization over kiln::nn::layer_norm, moments and
/// batch_norm (nn/functional.hpp).

#include <cstdint>
#include <string>

#include "kiln/init.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// Settings of LayerNormalization (Keras's names and defaults).
struct LayerNormalizationOptions {
  /// The axis normalized over (negative counts from the end); gamma and beta have its size.
  std::int64_t axis = -1;
  double epsilon = 1e-3;
  bool center = true;  ///< add beta
  bool scale = true;   ///< multiply by gamma
  init::Initializer beta_initializer = init::zeros();
  init::Initializer gamma_initializer = init::ones();
  /// Empty: an automatic name ("layer_normalization", ...).
  std::string name = {};
};

/// Each sample normalized over `axis`: (x - mean) / sqrt(var + epsilon) * gamma + beta with the
/// biased variance. Variables "gamma" and "beta" (as center and scale ask) of the size of x's
/// `axis`, created on the first call; that dim must be static.
class LayerNormalization : public Layer {
 public:
  explicit LayerNormalization(LayerNormalizationOptions options = {});

  Tensor operator()(const Tensor& x) override;

  const LayerNormalizationOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe.
  Config config() const;
  static LayerNormalization from_config(const Config& config);

  /// The variables (after the first call; without center or scale, or before the first call,
  /// kiln::Error).
  Variable gamma() const;
  Variable beta() const;

 private:
  LayerNormalizationOptions options_;
};

/// Settings of BatchNormalization (Keras's names and defaults).
struct BatchNormalizationOptions {
  /// The channel axis (negative counts from the end): -1 for channels_last, 1 for
  /// channels_first. Statistics are taken over every other axis.
  std::int64_t axis = -1;
  /// The weight of the old moving statistics in each update.
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;  ///< add beta
  bool scale = true;   ///< multiply by gamma
  init::Initializer beta_initializer = init::zeros();
  init::Initializer gamma_initializer = init::ones();
  init::Initializer moving_mean_initializer = init::zeros();
  init::Initializer moving_variance_initializer = init::ones();
  std::string name = {};
};

/// Batch normalization with moving statistics (Keras's BatchNormalization). Variables, created
/// on the first call with C = the size of x's `axis`: "gamma" and "beta" [C] (trainable, as
/// scale and center ask), "moving_mean" and "moving_variance" [C] (non-trainable).
///
/// In training (nn::learning_phase(), or the explicit flag) it normalizes with the mean and
/// biased variance of this batch, taken over every axis but `axis`, and assigns
/// `moving = moving * momentum + batch * (1 - momentum)` to both moving statistics. The
/// assignments are graph nodes inside a kiln::function, so every replay of a traced training
/// step updates them as an eager call does. In inference it normalizes with the moving
/// statistics and changes nothing. As with Dropout, the phase in effect while a function is
/// traced is baked into its graph.
class BatchNormalization : public Layer {
 public:
  explicit BatchNormalization(BatchNormalizationOptions options = {});

  /// Training when nn::learning_phase() is true.
  Tensor operator()(const Tensor& x) override;
  /// Training when `training` is true.
  Tensor operator()(const Tensor& x, bool training);

  const BatchNormalizationOptions& options() const { return options_; }
  Config config() const;
  static BatchNormalization from_config(const Config& config);

  Variable gamma() const;
  Variable beta() const;
  Variable moving_mean() const;
  Variable moving_variance() const;

 private:
  BatchNormalizationOptions options_;
};

}  // namespace kiln::nn

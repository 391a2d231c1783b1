#pragma once
/// @file nn/pooling.hpp
/// Pooling layers (Keras's MaxPooling1D/2D, AveragePooling1D/2D and the global poolings) over
/// kiln::max_pool, avg_pool, global_max_pool and global_avg_pool. They have no variables.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/conv.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// Settings of the windowed pooling layers (Keras's names and defaults).
struct PoolingLayerOptions {
  /// One per spatial axis, or one for all; empty: the pool size (Keras's strides=None).
  std::vector<std::int64_t> strides = {};
  /// valid or same; with same, average pooling divides by the positions inside x (Keras).
  ConvPadding padding = ConvPadding::valid;
  DataLayout data_format = DataLayout::channels_last;
  /// Empty: an automatic name ("max_pooling2d", ...).
  std::string name = {};
};

/// The windowed pooling behind the MaxPooling and AveragePooling layers.
class PoolingLayer : public Layer {
 public:
  /// x is [batch, spatial.., C] (channels_last) or [batch, C, spatial..] (channels_first).
  Tensor operator()(const Tensor& x) override;

  /// One size per spatial axis.
  const std::vector<std::int64_t>& pool_size() const { return pool_size_; }
  /// The options with strides expanded to one value per spatial axis.
  const PoolingLayerOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json).
  Config config() const;

 protected:
  PoolingLayer(std::string_view op, std::string_view default_name, std::size_t spatial, bool max,
               const std::vector<std::int64_t>& pool_size, PoolingLayerOptions options);
  static PoolingLayerOptions options_from(std::string_view op, const Config& config);

 private:
  std::string_view op_;
  std::size_t spatial_;
  bool max_;
  std::vector<std::int64_t> pool_size_;
  PoolingLayerOptions options_;
};

/// The maximum of each window over [batch, steps, C] (default pool_size 2).
class MaxPooling1D : public PoolingLayer {
 public:
  explicit MaxPooling1D(std::vector<std::int64_t> pool_size = {2},
                        PoolingLayerOptions options = {});
  /// The layer a config() describes (a misspelt key or a bad value is a kiln::Error).
  static MaxPooling1D from_config(const Config& config);
};

/// The maximum of each window over [batch, H, W, C] (default pool_size 2x2).
class MaxPooling2D : public PoolingLayer {
 public:
  explicit MaxPooling2D(std::vector<std::int64_t> pool_size = {2, 2},
                        PoolingLayerOptions options = {});
  static MaxPooling2D from_config(const Config& config);
};

/// The mean of each window over [batch, steps, C] (default pool_size 2).
class AveragePooling1D : public PoolingLayer {
 public:
  explicit AveragePooling1D(std::vector<std::int64_t> pool_size = {2},
                            PoolingLayerOptions options = {});
  static AveragePooling1D from_config(const Config& config);
};

/// The mean of each window over [batch, H, W, C] (default pool_size 2x2).
class AveragePooling2D : public PoolingLayer {
 public:
  explicit AveragePooling2D(std::vector<std::int64_t> pool_size = {2, 2},
                            PoolingLayerOptions options = {});
  static AveragePooling2D from_config(const Config& config);
};

/// Settings of the global pooling layers.
struct GlobalPoolingLayerOptions {
  DataLayout data_format = DataLayout::channels_last;
  /// Keep the spatial axes with size 1 ([batch, 1.., C]) instead of returning [batch, C].
  bool keepdims = false;
  std::string name = {};
};

/// The mean or maximum over all spatial axes, behind the four global pooling layers.
class GlobalPoolingLayer : public Layer {
 public:
  Tensor operator()(const Tensor& x) override;

  const GlobalPoolingLayerOptions& options() const { return options_; }
  Config config() const;

 protected:
  GlobalPoolingLayer(std::string_view op, std::string_view default_name, std::size_t spatial,
                     bool max, GlobalPoolingLayerOptions options);
  static GlobalPoolingLayerOptions options_from(std::string_view op, const Config& config);

 private:
  std::string_view op_;
  std::size_t spatial_;
  bool max_;
  GlobalPoolingLayerOptions options_;
};

/// [batch, steps, C] -> [batch, C], the mean over the steps.
class GlobalAveragePooling1D : public GlobalPoolingLayer {
 public:
  explicit GlobalAveragePooling1D(GlobalPoolingLayerOptions options = {});
  static GlobalAveragePooling1D from_config(const Config& config);
};

/// [batch, H, W, C] -> [batch, C], the mean over H and W.
class GlobalAveragePooling2D : public GlobalPoolingLayer {
 public:
  explicit GlobalAveragePooling2D(GlobalPoolingLayerOptions options = {});
  static GlobalAveragePooling2D from_config(const Config& config);
};

/// [batch, steps, C] -> [batch, C], the maximum over the steps.
class GlobalMaxPooling1D : public GlobalPoolingLayer {
 public:
  explicit GlobalMaxPooling1D(GlobalPoolingLayerOptions options = {});
  static GlobalMaxPooling1D from_config(const Config& config);
};

/// [batch, H, W, C] -> [batch, C], the maximum over H and W.
class GlobalMaxPooling2D : public GlobalPoolingLayer {
 public:
  explicit GlobalMaxPooling2D(GlobalPoolingLayerOptions options = {});
  static GlobalMaxPooling2D from_config(const Config& config);
};

}  // namespace kiln::nn

#pragma once
/// @file nn/conv.hpp
/// Convolution layers (Keras's Conv1D, Conv2D, Conv2DTranspose) over kiln::conv and
/// kiln::conv_transpose.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/conv.hpp"
#include "kiln/init.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// Settings of Conv1D and Conv2D (Keras's names and defaults). Per-axis settings take one
/// value per spatial axis, or one value for all of them.
struct ConvLayerOptions {
  std::vector<std::int64_t> strides = {};        ///< empty: 1
  ConvPadding padding = ConvPadding::valid;      ///< valid or same
  std::vector<std::int64_t> dilation_rate = {};  ///< empty: 1
  /// Input channels and filters must be divisible by it (groups == channels: depthwise).
  std::int64_t groups = 1;
  Activation activation = Activation::none;
  bool use_bias = true;
  DataLayout data_format = DataLayout::channels_last;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer bias_initializer = init::zeros();
  /// Empty: an automatic name ("conv2d", "conv2d_1", ...).
  std::string name = {};
};

/// The convolution layer behind Conv1D and Conv2D: activation(conv(x, kernel) + bias). The
/// variables are created on the first call, sized from x's channels C: "kernel" in the layout
/// kiln::conv expects, [k.., C/groups, filters] (HWIO) for channels_last and
/// [filters, C/groups, k..] (OIHW) for channels_first, initialized as the HWIO kernel would be
/// (so both layouts get Keras's fans); "bias" [filters]. A later input with another channel
/// count is a kiln::Error naming the layer.
class ConvLayer : public Layer {
 public:
  /// x is [batch, spatial.., C] (channels_last) or [batch, C, spatial..] (channels_first).
  Tensor operator()(const Tensor& x) override;

  std::int64_t filters() const { return filters_; }
  /// One size per spatial axis.
  const std::vector<std::int64_t>& kernel_size() const { return kernel_size_; }
  /// The options with the per-axis settings expanded to one value per spatial axis.
  const ConvLayerOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json).
  Config config() const;

  /// The variables (after the first call; before it, kiln::Error).
  Variable kernel() const;
  Variable bias() const;

 protected:
  ConvLayer(std::string_view op, std::string_view default_name, std::size_t spatial,
            std::int64_t filters, const std::vector<std::int64_t>& kernel_size,
            ConvLayerOptions options);
  static ConvLayerOptions options_from(std::string_view op, const Config& config);

 private:
  std::string_view op_;
  std::size_t spatial_;
  std::int64_t filters_;
  std::vector<std::int64_t> kernel_size_;
  ConvLayerOptions options_;
};

/// A 1-D convolution over [batch, steps, C] (or [batch, C, steps]): variable paths
/// "conv1d/kernel" [k, C/groups, filters] and "conv1d/bias".
class Conv1D : public ConvLayer {
 public:
  Conv1D(std::int64_t filters, std::vector<std::int64_t> kernel_size,
         ConvLayerOptions options = {});
  /// The layer a config() describes (a misspelt key or a bad value is a kiln::Error).
  static Conv1D from_config(const Config& config);
};

/// A 2-D convolution over [batch, H, W, C] (or [batch, C, H, W]): variable paths
/// "conv2d/kernel" [kh, kw, C/groups, filters] (HWIO; OIHW for channels_first) and
/// "conv2d/bias". `kernel_size` {3} is 3x3.
class Conv2D : public ConvLayer {
 public:
  Conv2D(std::int64_t filters, std::vector<std::int64_t> kernel_size,
         ConvLayerOptions options = {});
  static Conv2D from_config(const Config& config);
};

/// Settings of Conv2DTranspose (Keras's names and defaults).
struct ConvTransposeLayerOptions {
  std::vector<std::int64_t> strides = {};  ///< empty: 1
  /// valid: (in - 1) * stride + dilation * (k - 1) + 1 positions per axis; same: in * stride.
  ConvPadding padding = ConvPadding::valid;
  /// Extra positions at the end of each axis (each below its stride); empty: none.
  std::vector<std::int64_t> output_padding = {};
  std::vector<std::int64_t> dilation_rate = {};  ///< empty: 1
  Activation activation = Activation::none;
  bool use_bias = true;
  DataLayout data_format = DataLayout::channels_last;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer bias_initializer = init::zeros();
  std::string name = {};
};

/// The transposed 2-D convolution (Keras's Conv2DTranspose, the gradient of Conv2D with respect
/// to its input): activation(conv_transpose(x, kernel) + bias). Variables: "kernel"
/// [kh, kw, filters, C] for channels_last (Keras's layout), [C, filters, kh, kw] for
/// channels_first (PyTorch's), and "bias" [filters].
class Conv2DTranspose : public Layer {
 public:
  Conv2DTranspose(std::int64_t filters, std::vector<std::int64_t> kernel_size,
                  ConvTransposeLayerOptions options = {});

  Tensor operator()(const Tensor& x) override;

  std::int64_t filters() const { return filters_; }
  const std::vector<std::int64_t>& kernel_size() const { return kernel_size_; }
  const ConvTransposeLayerOptions& options() const { return options_; }
  Config config() const;
  static Conv2DTranspose from_config(const Config& config);

  Variable kernel() const;
  Variable bias() const;

 private:
  std::int64_t filters_;
  std::vector<std::int64_t> kernel_size_;
  ConvTransposeLayerOptions options_;
};

}  // namespace kiln::nn

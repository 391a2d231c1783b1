#pragma once
/// @file conv.hpp
/// Convolution and pooling over 1, 2 or 3 spatial axes, in either layout. f32 convolutions run
/// on oneDNN (JIT kernels for the machine's instruction set); f64 ones on kiln's direct loops.
/// Each op has a gradient and traces like any other.

#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

/// Where the channels are. channels_last: x [N, spatial.., C] with kernels [k.., C/groups, O]
/// (TensorFlow and Keras: NHWC, HWIO). channels_first: x [N, C, spatial..] with kernels
/// [O, C/groups, k..] (PyTorch and ONNX: NCHW, OIHW).
enum class DataLayout : std::uint8_t { channels_last, channels_first };

/// How the borders are padded. valid: none. same: the output has ceil(in / stride) positions,
/// the padding split evenly with the odd one after (TensorFlow's "SAME", ONNX's SAME_UPPER).
/// explicit_pads: `pads` gives (before, after) per spatial axis.
enum class ConvPadding : std::uint8_t { valid, same, explicit_pads };

struct ConvOptions {
  std::vector<std::int64_t> strides = {};    ///< one per spatial axis; empty: all 1
  std::vector<std::int64_t> dilations = {};  ///< one per spatial axis; empty: all 1
  ConvPadding padding = ConvPadding::valid;
  std::vector<std::pair<std::int64_t, std::int64_t>> pads = {};  ///< with explicit_pads
  std::int64_t groups = 1;  ///< C and O divisible by it; groups == C is depthwise
  DataLayout layout = DataLayout::channels_last;
};

/// Cross-correlation of x with kernel (what every framework calls convolution), summed over
/// the input channels of each group. The rank of x (3, 4 or 5) sets the spatial axes (1, 2, 3).
Tensor conv(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});
/// conv of a rank-3, 4 or 5 x (errors name the op).
Tensor conv1d(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});
Tensor conv2d(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});
Tensor conv3d(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});

struct ConvTransposeOptions {
  std::vector<std::int64_t> strides = {};
  std::vector<std::int64_t> dilations = {};
  /// same: the output has in * stride positions per axis.
  ConvPadding padding = ConvPadding::valid;
  std::vector<std::pair<std::int64_t, std::int64_t>> pads = {};
  /// Extra positions at the end of each spatial axis (each below its stride or dilation).
  std::vector<std::int64_t> output_padding = {};
  std::int64_t groups = 1;
  DataLayout layout = DataLayout::channels_last;
};

/// The transposed convolution (the gradient of conv with respect to its input): each input
/// position spreads kernel-weighted values over the output. The kernel has conv's layout with
/// the roles of the channels swapped: [k.., O/groups, C] channels_last (Keras
/// Conv2DTranspose), [C, O/groups, k..] channels_first (PyTorch ConvTranspose, ONNX). Output
/// extent per axis: (in - 1) * stride + dilation * (k - 1) + 1 - before - after +
/// output_padding.
Tensor conv_transpose(const Tensor& x, const Tensor& kernel,
                      const ConvTransposeOptions& options = {});

struct PoolOptions {
  std::vector<std::int64_t> window = {};   ///< one per spatial axis (required)
  std::vector<std::int64_t> strides = {};  ///< empty: the window
  /// One per spatial axis: the window's taps are this far apart (empty: all 1, adjacent).
  std::vector<std::int64_t> dilations = {};
  ConvPadding padding = ConvPadding::valid;
  std::vector<std::pair<std::int64_t, std::int64_t>> pads = {};
  DataLayout layout = DataLayout::channels_last;
  /// avg_pool: divide by the whole window, padding included (ONNX count_include_pad), instead
  /// of by the positions inside x.
  bool count_padding = false;
};

/// The largest element of each window (padding never wins; NaN does).
Tensor max_pool(const Tensor& x, const PoolOptions& options);
/// The mean of each window.
Tensor avg_pool(const Tensor& x, const PoolOptions& options);
/// The mean or maximum over all spatial axes: [N, C] (keepdims: [N, 1.., C] or [N, C, 1..]).
Tensor global_avg_pool(const Tensor& x, DataLayout layout = DataLayout::channels_last,
                       bool keepdims = false);
Tensor global_max_pool(const Tensor& x, DataLayout layout = DataLayout::channels_last,
                       bool keepdims = false);

}  // namespace kiln

#pragma once
// The geometry of a convolution as the conv primitives carry it in their attrs (read by the
// front ends in lib/ops/conv.cpp, the kernels in kernels/conv.cpp and the gradients).
//
// attrs.ints = {s, channels_last, groups, strides[s], dilations[s], pads_before[s],
// pads_after[s]} for s spatial axes (1, 2 or 3). Layouts: channels_last: x [N, spatial.., C],
// kernel [k.., C/groups, O] (TensorFlow's HWIO); channels first: x [N, C, spatial..], kernel
// [O, C/groups, k..] (PyTorch's and ONNX's OIHW). The output of conv has the layout of x with O
// channels and, per axis, (in + before + after - dilation * (k - 1) - 1) / stride + 1 positions.

#include <cstdint>
#include <vector>

#include "kernels/kernel.hpp"

namespace kiln::detail {

struct ConvGeometry {
  std::size_t spatial = 2;
  bool channels_last = true;
  std::int64_t groups = 1;
  std::vector<std::int64_t> strides, dilations, pads_before, pads_after;

  /// Reads attrs.ints.
  static ConvGeometry from(const Attrs& attrs);
  /// Writes attrs.ints.
  void store(Attrs& attrs) const;

  /// Per-axis sizes of x (or y) and the kernel, and the channel counts, from their shapes.
  std::int64_t batch(const Shape& x) const { return x[0]; }
  std::int64_t channels(const Shape& x) const { return channels_last ? x[x.size() - 1] : x[1]; }
  std::int64_t extent(const Shape& x, std::size_t axis) const {
    return x[channels_last ? 1 + axis : 2 + axis];
  }
  std::int64_t kernel_extent(const Shape& w, std::size_t axis) const {
    return w[channels_last ? axis : 2 + axis];
  }
  std::int64_t kernel_outputs(const Shape& w) const {
    return channels_last ? w[w.size() - 1] : w[0];
  }
  std::int64_t kernel_inputs(const Shape& w) const {
    return channels_last ? w[w.size() - 2] : w[1];
  }
  /// The output positions along `axis` for an input extent `in` and kernel extent `k`.
  std::int64_t output_extent(std::int64_t in, std::int64_t k, std::size_t axis) const {
    const std::int64_t span = dilations[axis] * (k - 1) + 1;
    const std::int64_t padded = in + pads_before[axis] + pads_after[axis];
    return padded < span ? 0 : (padded - span) / strides[axis] + 1;
  }
  /// The shape of an activation of this layout.
  Shape activation_shape(std::int64_t n, std::int64_t c,
                         const std::vector<std::int64_t>& extents) const;
};

}  // namespace kiln::detail

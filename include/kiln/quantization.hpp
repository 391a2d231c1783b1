#pragma once
/// @file quantization.hpp
/// Fake quantization (TensorFlow's tf.quantization.fake_quant_with_min_max_*): values rounded
/// to the grid an integer type of `num_bits` bits would hold, kept in floating point, with
/// straight-through gradients, for quantization-aware training.
///
/// The range [min, max] is first *nudged* so that 0.0 is exactly on the grid, as TensorFlow
/// does: with qmin = narrow_range ? 1 : 0 and qmax = 2^num_bits - 1,
///   scale = (max - min) / (qmax - qmin), zero point = qmin - min / scale rounded (half away
///   from zero) and clamped to [qmin, qmax],
///   nudged_min = (qmin - zero point) * scale, nudged_max = (qmax - zero point) * scale;
/// then y = floor((clamp(x, nudged_min, nudged_max) - nudged_min) / scale + 0.5) * scale +
/// nudged_min (the division as a multiplication by 1 / scale, in the input's dtype).
///
/// Gradients are TensorFlow's: with respect to x, the output gradient where nudged_min <= x <=
/// nudged_max and zero elsewhere (straight-through); with respect to min (the vars forms), the
/// sum of the output gradient where x < nudged_min; with respect to max, where x > nudged_max.
/// Every form works eagerly and in kiln::function, f32 or f64.

#include "kiln/tensor.hpp"

namespace kiln {

struct FakeQuantOptions {
  /// Bits of the integer grid, 2 to 16.
  int num_bits = 8;
  /// Leave out the lowest integer (a symmetric grid of 2^num_bits - 1 levels).
  bool narrow_range = false;
};

/// Fake quantization of x to a fixed range [min, max] (min < max; a range that does not hold
/// 0 is shifted to hold it by the nudging).
Tensor fake_quant_with_min_max_args(const Tensor& x, double min = -6.0, double max = 6.0,
                                    FakeQuantOptions options = {});

/// Fake quantization of x to the range given by the scalar tensors min and max (of x's dtype;
/// variables in quantization-aware training, so they get gradients). min > max is a kiln::Error
/// when the values are known (eagerly); inside a traced function the result is NaN then.
Tensor fake_quant_with_min_max_vars(const Tensor& x, const Tensor& min, const Tensor& max,
                                    FakeQuantOptions options = {});

/// Per-channel form: min and max have one value per element of x's last dim ([d]); channel c
/// of x uses min[c], max[c].
Tensor fake_quant_with_min_max_vars_per_channel(const Tensor& x, const Tensor& min,
                                                const Tensor& max, FakeQuantOptions options = {});

}  // namespace kiln

#pragma once
/// @file quantization.hpp
/// Fake quantization (TensorFlow's tf.quantization.fake_quant_with_min_max_*): values rounded
/// to the grid an integer type of `num_bits` bits would hold, kept in floating point, with
/// straight-through gradients, for quantization-aware training. And quantize / dequantize, which
/// store values on the same grid in 8-bit integer tensors (i8 or u8) for post-training use:
/// dequantize(quantize(x, p), p) equals the fake quantization of x on p's range bit for bit.
///
/// The range [min, max] is first *nudged* so that 0.0 is exactly on the grid, as TensorFlow
/// does: with qmin = narrow_range ? 1 : 0 and qmax = 2^num_bits - 1,
///   scale = (max - min) / (qmax - qmin), zero point = qmin - min / scale rounded (half away
///   from zero) and clamped to [qmin, qmax],
///   nudged_min = (qmin - zero point) * scale, nudged_max = (qmax - zero point) * scale;
/// then level = floor((clamp(x, nudged_min, nudged_max) - nudged_min) / scale + 0.5) (the
/// division as a multiplication by 1 / scale, in the input's dtype) and
/// y = (level + qmin - zero point) * scale, a whole number of steps times scale. (TensorFlow
/// computes level * scale + nudged_min, which can differ in the last bits.)
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

/// How quantize stores values: the integer dtype and the grid's levels.
struct QuantizeOptions {
  /// i8 (levels -2^(num_bits-1) .. 2^(num_bits-1) - 1) or u8 (levels 0 .. 2^num_bits - 1).
  DType dtype = u8;
  /// Bits of the grid, 2 to 8.
  int num_bits = 8;
  /// Leave out the lowest level (a symmetric grid of 2^num_bits - 1 levels).
  bool narrow_range = false;
};

/// The grid of a quantized tensor: real value = (q - zero_point) * scale, for the integer levels
/// q in [quant_min, quant_max]. scale is f32 or f64; zero_point has the quantized dtype; both are
/// scalars, or one per channel of the quantized tensor's last dim ([d]).
struct QuantizationParams {
  Tensor scale;
  Tensor zero_point;
  std::int64_t quant_min = 0;
  std::int64_t quant_max = 255;
  /// The quantized dtype (zero_point's): i8 or u8.
  DType dtype() const { return zero_point.dtype(); }
};

/// The grid fake quantization uses for the range [min, max] (TensorFlow's nudging, above), its
/// levels stored as options.dtype. min and max are f32 or f64 scalars, or one value per channel
/// ([d]); min > max is an error. On an i8 grid the levels are those of u8 moved down by
/// 2^(num_bits-1), so both store the same values.
QuantizationParams quantization_params(const Tensor& min, const Tensor& max,
                                       QuantizeOptions options = {});
/// quantization_params of an f32 range.
QuantizationParams quantization_params(double min, double max, QuantizeOptions options = {});

/// x (f32 or f64, the dtype of params.scale) on the grid, as integers of params.dtype():
/// floor((clamp(x, lowest, highest) - lowest) / scale + 0.5) + quant_min, where lowest and
/// highest are the real values of quant_min and quant_max. Not differentiable.
Tensor quantize(const Tensor& x, const QuantizationParams& params);

/// The real values of quantized integers q (i8 or u8, params.dtype()): (q - zero_point) *
/// scale, in scale's dtype. Gradients reach scale, not q.
Tensor dequantize(const Tensor& q, const QuantizationParams& params);

}  // namespace kiln

#pragma once
// The integer grid that fake quantization rounds to and quantize stores, shared so that
// dequantize(quantize(x)) equals fake_quant(x) bit for bit (kiln/quantization.hpp).

#include <string_view>

#include "kiln/tensor.hpp"

namespace kiln::detail {

/// A grid of integer levels qmin..qmax: real value = (level - zero_point) * scale. The tensors
/// are of the input's floating dtype (integers held in floats) and broadcast against it.
struct QuantizationGrid {
  Tensor scale;
  Tensor zero_point;
  double qmin = 0, qmax = 255;
};

/// TensorFlow's nudged grid of levels qmin..qmax for the range [min, max] (quantization.hpp):
/// scale = (max - min) / (qmax - qmin), zero point = qmin - min / scale rounded half away from
/// zero and clamped to [qmin, qmax]. Reads min and max through stop_gradient.
QuantizationGrid nudged_grid(const Tensor& min, const Tensor& max, double qmin, double qmax);

/// The same grid with every level moved by `offset` (zero point, qmin and qmax): the values it
/// stands for are unchanged.
QuantizationGrid shifted(const QuantizationGrid& grid, double offset);

/// The level of each element of x on the grid, as floats: floor((clamp(x, lowest, highest) -
/// lowest) / scale + 0.5) + qmin, where lowest and highest are the real values of qmin and qmax
/// (the division as a multiplication by 1 / scale).
Tensor grid_levels(const Tensor& x, const QuantizationGrid& grid);

/// The real value of integer levels (floats of the grid's dtype): (levels - zero_point) * scale.
Tensor grid_values(const Tensor& levels, const QuantizationGrid& grid);

/// The real value of level `level` (qmin or qmax) on the grid.
Tensor grid_value_of(double level, const QuantizationGrid& grid);

/// "[op] min must not exceed max" when min > max somewhere and both are known now (also inside a
/// trace, for values made there); symbolic ranges are not checked.
void check_range_order(const Tensor& min, const Tensor& max, std::string_view op);

}  // namespace kiln::detail

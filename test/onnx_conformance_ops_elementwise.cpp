// ONNX conformance mapping table, elementwise family: unary math, binary arithmetic,
// comparisons, logic, bitwise ops, casts and activations (see onnx_conformance.hpp).
#include <cmath>

#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

using kiln::DType;

OpFn unary(Tensor (*fn)(const Tensor&)) {
  return [fn](const Case& c) -> Outputs { return {fn(c.in(0))}; };
}

OpFn binary(Tensor (*fn)(const Tensor&, const Tensor&)) {
  return [fn](const Case& c) -> Outputs { return {fn(c.in(0), c.in(1))}; };
}

/// Folds a variadic op (Max, Min, Sum) over its inputs, which broadcast together.
OpFn variadic(Tensor (*fn)(const Tensor&, const Tensor&)) {
  return [fn](const Case& c) -> Outputs {
    Tensor acc = c.in(0);
    for (std::size_t k = 1; k < c.inputs.size(); ++k) acc = fn(acc, c.in(k));
    return {acc};
  };
}

Tensor scalar_as(double v, const Tensor& like) { return kiln::scalar(v, like.dtype()); }

/// ONNX IsInf: +-inf, optionally only one sign.
Outputs is_inf(const Case& c) {
  const Tensor& x = c.in(0);
  const Tensor inf =
      kiln::logical_and(kiln::logical_not(kiln::isfinite(x)), kiln::logical_not(kiln::isnan(x)));
  const bool positive = c.i("detect_positive", 1) != 0;
  const bool negative = c.i("detect_negative", 1) != 0;
  if (positive && negative) return {inf};
  if (!positive && !negative)
    return {kiln::logical_and(inf, kiln::zeros(x.shape(), kiln::boolean))};
  const Tensor zero = scalar_as(0, x);
  return {kiln::logical_and(inf, positive ? kiln::greater(x, zero) : kiln::less(x, zero))};
}

/// ONNX Pow: the result has the base's dtype; the exponent may have another.
Outputs pow(const Case& c) {
  const Tensor& base = c.in(0);
  const Tensor& exponent = c.in(1);
  if (base.dtype() == exponent.dtype()) return {kiln::pow(base, exponent)};
  if (kiln::is_floating(base.dtype())) return {kiln::pow(base, kiln::cast(exponent, base.dtype()))};
  // Integer base, other exponent: computed in f64, converted back (truncating, as NumPy's
  // astype does in ONNX's reference).
  const Tensor r = kiln::pow(kiln::cast(base, kiln::f64), kiln::cast(exponent, kiln::f64));
  return {kiln::cast(r, base.dtype())};
}

/// ONNX Div: true division for floats, truncation toward zero for integers.
Outputs div(const Case& c) {
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  if (kiln::is_floating(a.dtype())) return {kiln::div(a, b)};
  return {kiln::trunc_div(a, b)};
}

Outputs mod(const Case& c) {
  if (c.i("fmod", 0) != 0) return {kiln::fmod(c.in(0), c.in(1))};
  return {kiln::mod(c.in(0), c.in(1))};
}

Outputs mean(const Case& c) {
  Tensor acc = c.in(0);
  for (std::size_t k = 1; k < c.inputs.size(); ++k) acc = kiln::add(acc, c.in(k));
  return {kiln::div(acc, scalar_as(static_cast<double>(c.inputs.size()), acc))};
}

/// ONNX Clip: bounds as optional inputs (opset >= 11) or attributes (before); where min > max
/// every element becomes max.
Outputs clip(const Case& c) {
  Tensor x = c.in(0);
  if (c.opset < 11) {
    if (c.has_attr("min")) x = kiln::maximum(x, scalar_as(c.f("min", 0), x));
    if (c.has_attr("max")) x = kiln::minimum(x, scalar_as(c.f("max", 0), x));
    return {x};
  }
  if (c.has(1)) x = kiln::maximum(x, kiln::reshape(c.in(1), {}));
  if (c.has(2)) x = kiln::minimum(x, kiln::reshape(c.in(2), {}));
  return {x};
}

/// The largest finite value of an 8-bit float dtype.
double largest_float8(kiln::DType dtype) {
  switch (dtype) {
    case kiln::f8e4m3fn:
      return float(kiln::float8_e4m3fn::from_bits(0x7e));
    case kiln::f8e4m3fnuz:
      return float(kiln::float8_e4m3fnuz::from_bits(0x7f));
    case kiln::f8e5m2:
      return float(kiln::float8_e5m2::from_bits(0x7b));
    case kiln::f8e5m2fnuz:
      return float(kiln::float8_e5m2fnuz::from_bits(0x7f));
    default:
      throw NotMapped("not an 8-bit float");
  }
}

bool is_float8(kiln::DType d) { return kiln::is_minifloat(d) && d != kiln::f4e2m1fn; }

/// x cast to an 8-bit float `to` as ONNX's saturate=1 does: values beyond the largest finite
/// one (infinities too) become it, NaN stays NaN; kiln's cast itself overflows to NaN or
/// infinity, as ml_dtypes and PyTorch do.
Tensor saturating_cast(const Tensor& x, kiln::DType to) {
  const double top = largest_float8(to);
  return kiln::cast(kiln::clip(x, -top, top), to);
}

/// Where ONNX's Cast of float x to `to` is undefined: for an integer `to`, where x (truncated)
/// is outside its range or NaN ("fixed point: undefined if OOR"); for f4e2m1fn, which has no
/// NaN, where x is NaN. Undefined (no mask) for every other pair.
Tensor undefined_cast_elements(const Tensor& x, kiln::DType to) {
  if (!kiln::is_floating(x.dtype())) return Tensor();
  const Tensor wide = kiln::cast(x, kiln::f64);
  const Tensor nan = kiln::isnan(wide);
  if (to == kiln::f4e2m1fn) return nan;
  if (!kiln::is_integer(to)) return Tensor();
  double lowest = 0, highest = 0;
  switch (to) {
    case kiln::i2:
      lowest = -2, highest = 1;
      break;
    case kiln::u2:
      highest = 3;
      break;
    case kiln::i4:
      lowest = -8, highest = 7;
      break;
    case kiln::u4:
      highest = 15;
      break;
    case kiln::i8:
      lowest = -128, highest = 127;
      break;
    case kiln::u8:
      highest = 255;
      break;
    case kiln::i16:
      lowest = -32768, highest = 32767;
      break;
    case kiln::u16:
      highest = 65535;
      break;
    case kiln::i32:
      lowest = -2147483648.0, highest = 2147483647.0;
      break;
    case kiln::u32:
      highest = 4294967295.0;
      break;
    case kiln::i64:
      lowest = -0x1p63, highest = 0x1p63 - 1024;
      break;  // the doubles in range
    default:
      highest = 0x1p64 - 2048;
      break;  // u64
  }
  // Truncated below lowest means x <= lowest - 1; above highest, x >= highest + 1.
  return kiln::logical_or(
      nan, kiln::logical_or(kiln::less_equal(wide, kiln::scalar(lowest - 1, kiln::f64)),
                            kiln::greater_equal(wide, kiln::scalar(highest + 1, kiln::f64))));
}

/// Cast or CastLike of x to `to` with ONNX's `saturate` (8-bit floats only).
Outputs onnx_cast(const Case& c, const Tensor& x, kiln::DType to) {
  c.unspecified = {undefined_cast_elements(x, to)};
  if (is_float8(to) && c.i("saturate", 1) == 1) return {saturating_cast(x, to)};
  return {kiln::cast(x, to)};
}

Outputs cast(const Case& c) {
  c.only({"to", "saturate", "round_mode"});
  if (c.s("round_mode", "up") != "up") throw NotMapped("Cast round_mode (float8e8m0 only)");
  return onnx_cast(c, c.in(0), dtype_from_onnx(c.i("to", 1)));
}

Outputs elu(const Case& c) { return {kiln::elu(c.in(0), c.f("alpha", 1.0))}; }

Outputs selu(const Case& c) {
  const Tensor& x = c.in(0);
  const double alpha = c.f("alpha", 1.67326319217681884765625);
  const double gamma = c.f("gamma", 1.05070102214813232421875);
  const Tensor neg = kiln::mul(kiln::expm1(x), scalar_as(alpha * gamma, x));
  return {kiln::where(kiln::greater(x, scalar_as(0, x)), kiln::mul(x, scalar_as(gamma, x)), neg)};
}

Outputs celu(const Case& c) {
  const Tensor& x = c.in(0);
  const double alpha = c.f("alpha", 1.0);
  const Tensor e = kiln::mul(kiln::expm1(kiln::div(x, scalar_as(alpha, x))), scalar_as(alpha, x));
  return {kiln::add(kiln::relu(x), kiln::minimum(e, scalar_as(0, x)))};
}

Outputs thresholded_relu(const Case& c) {
  const Tensor& x = c.in(0);
  return {kiln::where(kiln::greater(x, scalar_as(c.f("alpha", 1.0), x)), x, scalar_as(0, x))};
}

Outputs prelu(const Case& c) {
  const Tensor& x = c.in(0);
  return {kiln::where(kiln::less(x, scalar_as(0, x)), kiln::mul(x, c.in(1)), x)};
}

Outputs shrink(const Case& c) {
  const Tensor& x = c.in(0);
  const double lambd = c.f("lambd", 0.5);
  const double bias = c.f("bias", 0.0);
  const Tensor zero = scalar_as(0, x);
  const Tensor below = kiln::add(x, scalar_as(bias, x));
  const Tensor above = kiln::sub(x, scalar_as(bias, x));
  return {kiln::where(kiln::less(x, scalar_as(-lambd, x)), below,
                      kiln::where(kiln::greater(x, scalar_as(lambd, x)), above, zero))};
}

Outputs gelu(const Case& c) {
  const std::string approximate = c.s("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    throw NotMapped("Gelu approximate=" + approximate);
  return {kiln::gelu(c.in(0), approximate == "tanh")};
}

Outputs hard_swish(const Case& c) {
  const Tensor& x = c.in(0);
  return {kiln::mul(x, kiln::hard_sigmoid(x, 1.0 / 6.0, 0.5))};
}

Outputs swish(const Case& c) {
  const Tensor& x = c.in(0);
  return {kiln::mul(x, kiln::sigmoid(kiln::mul(x, scalar_as(c.f("alpha", 1.0), x))))};
}

Outputs reciprocal(const Case& c) { return {kiln::div(scalar_as(1, c.in(0)), c.in(0))}; }

Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return kiln::not_equal(kiln::cast(a, kiln::boolean), kiln::cast(b, kiln::boolean));
}

// ------------------------------------------------------------------ quantization (8-, 4- and
// 2-bit)

/// A per-tensor, per-axis or blocked scale or zero point of QuantizeLinear / DequantizeLinear
/// shaped to broadcast against x: a scalar stays; a 1-D one lies along `axis`; a blocked one
/// (block_size > 0, x's rank) has each entry repeated block_size times along `axis`.
Tensor spread(const Tensor& t, const Tensor& x, std::int64_t axis, std::int64_t block_size) {
  if (t.ndim() == 0 || t.size() == 1) return kiln::reshape(t, {});
  if (block_size > 0) {
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < x.dim(axis); ++i) rows.push_back(i / block_size);
    return kiln::gather(t, kiln::tensor(rows, kiln::Shape{x.dim(axis)}), axis);
  }
  kiln::Shape shape(std::vector<std::int64_t>(static_cast<std::size_t>(x.ndim()), 1));
  shape[static_cast<std::size_t>(axis)] = t.size();
  return kiln::reshape(t, shape);
}

/// round(x / scale) + zero_point (halves to even), saturated to the zero point's dtype.
Tensor quantize_to(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                   kiln::DType dtype) {
  const Tensor levels =
      kiln::add(kiln::round(kiln::div(x, scale)), kiln::cast(zero_point, x.dtype()));
  return kiln::cast(levels, dtype);  // kiln's cast saturates out-of-range values
}

Outputs quantize_linear(const Case& c) {
  const Tensor& x = c.in(0);
  if (c.i("output_dtype", 0) != 0 || c.i("precision", 0) != 0)
    throw NotMapped("QuantizeLinear output_dtype or precision");
  const auto axis = normalize_axis(c.i("axis", 1), x.ndim());
  const auto block = c.i("block_size", 0);
  const Tensor scale = spread(c.in(1), x, axis, block);
  if (!c.has(2)) return {quantize_to(x, scale, kiln::zeros({}, x.dtype()), kiln::u8)};
  const Tensor& zero_point = c.in(2);
  const kiln::DType to = zero_point.dtype();
  if (is_float8(to)) {  // x / scale rounded to the 8-bit float; the zero point is 0
    const Tensor y = kiln::div(x, scale);
    return {c.i("saturate", 1) == 1 ? saturating_cast(y, to) : kiln::cast(y, to)};
  }
  if (to == kiln::f4e2m1fn) {  // x / scale + zero point, rounded (and saturated) to the float
    const Tensor zp = kiln::cast(spread(zero_point, x, axis, block), x.dtype());
    return {kiln::cast(kiln::add(kiln::div(x, scale), zp), to)};
  }
  return {quantize_to(x, scale, spread(zero_point, x, axis, block), to)};
}

Outputs dequantize_linear(const Case& c) {
  const Tensor& x = c.in(0);
  if (c.i("output_dtype", 0) != 0) throw NotMapped("DequantizeLinear output_dtype");
  const Tensor& scale = c.in(1);
  const auto axis = normalize_axis(c.i("axis", 1), x.ndim());
  const auto block = c.i("block_size", 0);
  Tensor levels = kiln::cast(x, scale.dtype());
  if (c.has(2))
    levels = kiln::sub(levels, kiln::cast(spread(c.in(2), x, axis, block), scale.dtype()));
  return {kiln::mul(levels, spread(scale, x, axis, block))};
}

/// DynamicQuantizeLinear: u8 levels over [min(x, 0), max(x, 0)], with the scale and zero point.
Outputs dynamic_quantize_linear(const Case& c) {
  const Tensor& x = c.in(0);
  const Tensor zero = scalar_as(0, x);
  const Tensor low = kiln::minimum(kiln::min(x), zero), high = kiln::maximum(kiln::max(x), zero);
  const Tensor scale = kiln::div(kiln::sub(high, low), scalar_as(255, x));
  const Tensor zero_point =
      kiln::cast(kiln::clip(kiln::round(kiln::div(kiln::neg(low), scale)), 0, 255), kiln::u8);
  return {quantize_to(x, scale, zero_point, kiln::u8), scale, zero_point};
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  t["QuantizeLinear"] = quantize_linear;
  t["DequantizeLinear"] = dequantize_linear;
  t["DynamicQuantizeLinear"] = dynamic_quantize_linear;
  // Unary math.
  t["Abs"] = unary(kiln::abs);
  t["Neg"] = unary(kiln::neg);
  t["Exp"] = unary(kiln::exp);
  t["Log"] = unary(kiln::log);
  t["Sqrt"] = unary(kiln::sqrt);
  t["Reciprocal"] = reciprocal;
  t["Erf"] = unary(kiln::erf);
  t["Sin"] = unary(kiln::sin);
  t["Cos"] = unary(kiln::cos);
  t["Tan"] = unary(kiln::tan);
  t["Asin"] = unary(kiln::asin);
  t["Acos"] = unary(kiln::acos);
  t["Atan"] = unary(kiln::atan);
  t["Sinh"] = unary(kiln::sinh);
  t["Cosh"] = unary(kiln::cosh);
  t["Asinh"] = unary(kiln::asinh);
  t["Acosh"] = unary(kiln::acosh);
  t["Atanh"] = unary(kiln::atanh);
  t["Floor"] = unary(kiln::floor);
  t["Ceil"] = unary(kiln::ceil);
  t["Round"] = unary(kiln::round);
  t["Sign"] = unary(kiln::sign);
  t["IsNaN"] = unary(kiln::isnan);
  t["IsInf"] = is_inf;
  t["Not"] = unary(kiln::logical_not);
  t["BitwiseNot"] = unary(kiln::bitwise_not);
  t["Identity"] = [](const Case& c) -> Outputs { return {c.in(0)}; };

  // Binary and variadic arithmetic.
  t["Add"] = binary(kiln::add);
  t["Sub"] = binary(kiln::sub);
  t["Mul"] = binary(kiln::mul);
  t["Div"] = div;
  t["Pow"] = pow;
  t["Mod"] = mod;
  t["Max"] = variadic(kiln::maximum);
  t["Min"] = variadic(kiln::minimum);
  t["Sum"] = variadic(kiln::add);
  t["Mean"] = mean;
  t["Clip"] = clip;
  t["Where"] = [](const Case& c) -> Outputs { return {kiln::where(c.in(0), c.in(1), c.in(2))}; };

  // Comparisons, logic, bits.
  t["Equal"] = binary(kiln::equal);
  t["Less"] = binary(kiln::less);
  t["Greater"] = binary(kiln::greater);
  t["LessOrEqual"] = binary(kiln::less_equal);
  t["GreaterOrEqual"] = binary(kiln::greater_equal);
  t["And"] = binary(kiln::logical_and);
  t["Or"] = binary(kiln::logical_or);
  t["Xor"] = binary(logical_xor);
  t["BitwiseAnd"] = binary(kiln::bitwise_and);
  t["BitwiseOr"] = binary(kiln::bitwise_or);
  t["BitwiseXor"] = binary(kiln::bitwise_xor);
  t["BitShift"] = [](const Case& c) -> Outputs {
    c.only({"direction"});
    const std::string direction = c.s("direction", "");
    if (direction != "LEFT" && direction != "RIGHT")
      throw NotMapped("BitShift direction " + direction);
    return {direction == "LEFT" ? kiln::left_shift(c.in(0), c.in(1))
                                : kiln::right_shift(c.in(0), c.in(1))};
  };

  // Casts.
  t["Cast"] = cast;
  t["BitCast"] = [](const Case& c) -> Outputs {
    c.only({"to"});
    return {kiln::bitcast(c.in(0), dtype_from_onnx(c.i("to", 1)))};
  };
  t["CastLike"] = [](const Case& c) -> Outputs {
    c.only({"saturate", "round_mode"});
    return onnx_cast(c, c.in(0), c.in(1).dtype());
  };

  // Activations.
  t["Relu"] = unary(kiln::relu);
  t["Sigmoid"] = unary(kiln::sigmoid);
  t["Tanh"] = unary(kiln::tanh);
  t["Softplus"] = unary(kiln::softplus);
  t["Softsign"] = unary(kiln::softsign);
  t["Mish"] = unary(kiln::mish);
  t["Elu"] = elu;
  t["Selu"] = selu;
  t["Celu"] = celu;
  t["LeakyRelu"] = [](const Case& c) -> Outputs {
    return {kiln::leaky_relu(c.in(0), c.f("alpha", 0.01))};
  };
  t["HardSigmoid"] = [](const Case& c) -> Outputs {
    return {kiln::hard_sigmoid(c.in(0), c.f("alpha", 0.2), c.f("beta", 0.5))};
  };
  t["HardSwish"] = hard_swish;
  t["ThresholdedRelu"] = thresholded_relu;
  t["PRelu"] = prelu;
  t["Shrink"] = shrink;
  t["Gelu"] = gelu;
  t["Swish"] = swish;
}

}  // namespace onnx_conformance

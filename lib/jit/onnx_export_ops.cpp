// ONNX for kiln's elementwise, reduction, movement, indexing and windowed primitives: the
// OnnxWriter members that translate one node each (jit/onnx_writer.hpp).
#if KILN_HAVE_ONNX

#include <array>
#include <limits>

#include "jit/onnx_writer.hpp"
#include "kernels/conv.hpp"
#include "kiln/export.hpp"

namespace kiln::detail::onnx_writing {

/// ONNX for one elementwise primitive on named inputs of dtype `in` (cast: to `out`).
std::string OnnxWriter::elementwise(Prim p, DType in, DType out,
                                    const std::vector<std::string>& x) {
  const bool floating = is_floating(in);
  switch (p) {
    case Prim::neg:
      return op("Neg", x);
    case Prim::abs:
      return op("Abs", x);
    case Prim::sign:
      return op("Sign", x);
    case Prim::exp:
      return op("Exp", x);
    case Prim::log:
      return op("Log", x);
    case Prim::log1p:
      return op("Log", {op("Add", {x[0], scalar(1.0, in)})});
    case Prim::sqrt:
      return op("Sqrt", x);
    case Prim::rsqrt:
      return op("Reciprocal", {op("Sqrt", x)});
    case Prim::square:
      return op("Mul", {x[0], x[0]});
    case Prim::sin:
      return op("Sin", x);
    case Prim::cos:
      return op("Cos", x);
    case Prim::tanh:
      return op("Tanh", x);
    case Prim::sigmoid:
      return op("Sigmoid", x);
    case Prim::relu:
      return op("Relu", x);
    case Prim::softplus:
      return op("Softplus", x);
    case Prim::erf:
      return op("Erf", x);
    case Prim::expm1:
      return op("Sub", {op("Exp", x), scalar(1.0, in)});
    case Prim::tan:
      return op("Tan", x);
    case Prim::asin:
      return op("Asin", x);
    case Prim::acos:
      return op("Acos", x);
    case Prim::atan:
      return op("Atan", x);
    case Prim::sinh:
      return op("Sinh", x);
    case Prim::cosh:
      return op("Cosh", x);
    case Prim::asinh:
      return op("Asinh", x);
    case Prim::acosh:
      return op("Acosh", x);
    case Prim::atanh:
      return op("Atanh", x);
    case Prim::floor:
      return floating ? op("Floor", x) : op("Identity", x);
    case Prim::ceil:
      return floating ? op("Ceil", x) : op("Identity", x);
    case Prim::round:
      return floating ? op("Round", x) : op("Identity", x);
    case Prim::logical_not:
      return op("Not", {in == DType::boolean ? x[0] : cast_to(x[0], DType::boolean)});
    case Prim::isnan:  // integers are never NaN
      return floating ? op("IsNaN", x) : op("Not", {op("Equal", {x[0], x[0]})});
    case Prim::isfinite:  // integers always are finite
      return floating ? op("Not", {op("Or", {op("IsNaN", x), op("IsInf", x)})})
                      : op("Equal", {x[0], x[0]});
    case Prim::cast:
      if (in == out) return op("Identity", x);
      return cast_to(x[0], out);
    case Prim::add:
      return op("Add", x);
    case Prim::sub:
      return op("Sub", x);
    case Prim::mul:
      return op("Mul", x);
    case Prim::div:
      if (floating) return op("Div", x);
      return floor_div(x[0], x[1], in);
    case Prim::pow:
      return op("Pow", x);
    case Prim::maximum:
      return op("Max", x);
    case Prim::minimum:
      return op("Min", x);
    case Prim::mod:
      if (floating) return op("Sub", {x[0], op("Mul", {op("Floor", {op("Div", x)}), x[1]})});
      return mod_of(x[0], x[1]);
    case Prim::fmod: {
      const std::string out = fresh("v");
      attr(emit(graph_, "Mod", x, {out}), "fmod", 1);
      return out;
    }
    case Prim::trunc_div:
      if (!floating) return op("Div", x);  // ONNX's integer Div truncates
      // trunc(q) = sign(q) * floor(|q|): ONNX has no Trunc.
      {
        const std::string q = op("Div", x);
        return op("Mul", {op("Sign", {q}), op("Floor", {op("Abs", {q})})});
      }
    case Prim::atan2:
      unsupported("atan2 has no ONNX operator");
    case Prim::equal:
      return op("Equal", x);
    case Prim::not_equal:
      return op("Not", {op("Equal", x)});
    case Prim::less:
      return op("Less", x);
    case Prim::less_equal:
      return op("LessOrEqual", x);
    case Prim::greater:
      return op("Greater", x);
    case Prim::greater_equal:
      return op("GreaterOrEqual", x);
    case Prim::logical_and:
      return op("And", x);
    case Prim::logical_or:
      return op("Or", x);
    case Prim::where:
      return op("Where", x);
    case Prim::bitwise_and:
    case Prim::bitwise_or:
    case Prim::bitwise_xor:
    case Prim::bitwise_not:
      unsupported("{} needs ONNX opset 18 (kiln writes {})", detail::name(p), onnx_opset);
    case Prim::left_shift:
    case Prim::right_shift: {
      if (!is_unsigned(in))
        unsupported("ONNX's BitShift takes unsigned integers only, got {}", dtype_name(in));
      const std::string y = fresh("v");
      attr(emit(graph_, "BitShift", x, {y}), "direction",
           std::string(p == Prim::left_shift ? "LEFT" : "RIGHT"));
      return y;
    }
    default:
      unsupported("the primitive {} is not elementwise", detail::name(p));
  }
}

/// Python's a mod b for integers (the sign of b): ONNX Mod with fmod = 0.
std::string OnnxWriter::mod_of(const std::string& a, const std::string& b) {
  const std::string out = fresh("v");
  attr(emit(graph_, "Mod", {a, b}, {out}), "fmod", 0);
  return out;
}

/// Floor division of integers (kiln's, Python's): ONNX Div truncates, so one less where the
/// remainder is nonzero and a, b have opposite signs.
std::string OnnxWriter::floor_div(const std::string& a, const std::string& b, DType dtype) {
  const std::string q = op("Div", {a, b});
  const std::string r = op("Sub", {a, op("Mul", {q, b})});
  const std::string zero = scalar(0, dtype);
  const std::string adjust = op("And", {op("Not", {op("Equal", {r, zero})}),
                                        op("Xor", {op("Less", {r, zero}), op("Less", {b, zero})})});
  return op("Sub", {q, cast_to(adjust, dtype)});
}

std::string OnnxWriter::normalization(const Node& n, const std::vector<std::string>& x,
                                      const Node& input) {
  const std::int64_t first = n.attrs.axes[0];
  std::vector<std::int64_t> tail, row_axes;
  for (std::size_t d = static_cast<std::size_t>(first); d < input.shape.size(); ++d) {
    tail.push_back(input.shape[d]);
    row_axes.push_back(static_cast<std::int64_t>(d));
  }
  const NormalizeInputs at = normalize_inputs(n.attrs);
  const std::string gamma = at.gamma >= 0 ? x.at(static_cast<std::size_t>(at.gamma)) : "";
  if (n.prim == Prim::layer_norm) {
    std::vector<std::string> inputs{
        x[0], at.gamma >= 0 ? gamma : op("Expand", {scalar(1, n.dtype), ints(tail)})};
    if (at.beta >= 0) inputs.push_back(x.at(static_cast<std::size_t>(at.beta)));
    const std::string out = fresh("v");
    onnx::NodeProto& node = emit(graph_, "LayerNormalization", inputs, {out});
    attr(node, "axis", first);
    float_attr(node, "epsilon", static_cast<float>(n.attrs.value));
    return out;
  }
  const std::string out = fresh("v");
  onnx::NodeProto& mean_square = emit(graph_, "ReduceMean", {op("Mul", {x[0], x[0]})}, {out});
  attr(mean_square, "axes", row_axes);
  attr(mean_square, "keepdims", 1);
  const std::string scale =
      op("Reciprocal", {op("Sqrt", {op("Add", {out, scalar(n.attrs.value, n.dtype)})})});
  const std::string y = op("Mul", {x[0], scale});
  return at.gamma >= 0 ? op("Mul", {y, gamma}) : y;
}

std::string OnnxWriter::reduce(const Node& n, const std::string& x, const Node& input) {
  const std::vector<std::int64_t> axes(n.attrs.axes.begin(), n.attrs.axes.end());
  if (axes.empty()) return op("Identity", {x});
  const auto reduce_with = [&](std::string_view type, const std::string& in) {
    const std::string out = fresh("v");
    onnx::NodeProto& node = type == "ReduceSum" ? emit(graph_, type, {in, ints(axes)}, {out})
                                                : emit(graph_, type, {in}, {out});
    if (type != "ReduceSum") attr(node, "axes", axes);
    attr(node, "keepdims", n.attrs.keepdims ? 1 : 0);
    return out;
  };
  switch (n.prim) {
    case Prim::reduce_sum:
      return reduce_with("ReduceSum", x);
    case Prim::reduce_prod:
      return reduce_with("ReduceProd", x);
    case Prim::reduce_max:
      return reduce_with("ReduceMax", x);
    case Prim::reduce_min:
      return reduce_with("ReduceMin", x);
    case Prim::logsumexp:
      return reduce_with("ReduceLogSumExp", x);
    case Prim::reduce_all:
      return cast_to(reduce_with("ReduceMin", cast_to(x, DType::i32)), DType::boolean);
    case Prim::reduce_any:
      return cast_to(reduce_with("ReduceMax", cast_to(x, DType::i32)), DType::boolean);
    case Prim::argmax:
    case Prim::argmin: {
      const std::string out = fresh("v");
      onnx::NodeProto& node =
          emit(graph_, n.prim == Prim::argmax ? "ArgMax" : "ArgMin", {x}, {out});
      attr(node, "axis", axes.at(0));
      attr(node, "keepdims", n.attrs.keepdims ? 1 : 0);
      if (!n.attrs.ints.empty() && n.attrs.ints[0] == 1) attr(node, "select_last_index", 1);
      return out;
    }
    case Prim::softmax:
    case Prim::log_softmax: {
      const std::string out = fresh("v");
      attr(emit(graph_, n.prim == Prim::softmax ? "Softmax" : "LogSoftmax", {x}, {out}), "axis",
           axes.at(0));
      return out;
    }
    case Prim::dim_size: {
      std::int64_t count = 1;
      bool dynamic = false;
      for (auto a : axes) {
        const std::int64_t d = input.shape[static_cast<std::size_t>(a)];
        if (is_dynamic_dim(d))
          dynamic = true;
        else
          count *= d;
      }
      if (!dynamic) return scalar(static_cast<double>(count), n.dtype);
      std::vector<std::string> factors;
      for (auto a : axes) {
        const std::int64_t d = input.shape[static_cast<std::size_t>(a)];
        factors.push_back(is_dynamic_dim(d) ? dim_value(d) : ints({d}));
      }
      std::string product = factors[0];
      for (std::size_t k = 1; k < factors.size(); ++k) product = op("Mul", {product, factors[k]});
      return cast_to(op("Squeeze", {product, ints({0})}), n.dtype);
    }
    default:
      unsupported("no ONNX form for {}", detail::name(n.prim));
  }
}

std::string OnnxWriter::movement(const Node& n, const std::vector<std::string>& x,
                                 const GraphData& g) {
  const Node& in = g.nodes[static_cast<std::size_t>(n.inputs[0])];
  switch (n.prim) {
    case Prim::reshape: {
      const std::string out = fresh("v");
      attr(emit(graph_, "Reshape", {x[0], shape_value(n.shape)}, {out}), "allowzero", 1);
      return out;
    }
    case Prim::transpose: {
      const std::string out = fresh("v");
      attr(emit(graph_, "Transpose", {x[0]}, {out}), "perm",
           std::vector<std::int64_t>(n.attrs.axes.begin(), n.attrs.axes.end()));
      return out;
    }
    case Prim::broadcast_to:
      return op("Expand", {x[0], shape_value(n.shape)});
    case Prim::slice: {
      std::vector<std::int64_t> starts, ends, axes, steps;
      for (std::size_t a = 0; a < n.shape.size(); ++a) {
        const std::int64_t start = n.attrs.ints[2 * a], step = n.attrs.ints[2 * a + 1];
        const std::int64_t count = n.shape[a], size = in.shape[a];
        if (is_dynamic_dim(count)) {
          if (count != size || start != 0 || step != 1) unsupported("a slice of dynamic length");
          continue;  // the whole axis
        }
        if (count == size && start == 0 && step == 1) continue;
        std::int64_t end = start + (count - 1) * step + (step > 0 ? 1 : -1);
        if (count == 0) end = start;
        if (end < 0) end = std::numeric_limits<std::int64_t>::min();  // before the first
        starts.push_back(start);
        ends.push_back(end);
        axes.push_back(static_cast<std::int64_t>(a));
        steps.push_back(step);
      }
      if (axes.empty()) return op("Identity", x);
      return op("Slice", {x[0], ints(starts), ints(ends), ints(axes), ints(steps)});
    }
    case Prim::concat: {
      const std::string out = fresh("v");
      attr(emit(graph_, "Concat", x, {out}), "axis", n.attrs.axis);
      return out;
    }
    case Prim::pad: {
      std::vector<std::int64_t> pads(2 * n.shape.size());
      for (std::size_t a = 0; a < n.shape.size(); ++a) {
        pads[a] = n.attrs.ints[2 * a];
        pads[a + n.shape.size()] = n.attrs.ints[2 * a + 1];
      }
      return op("Pad", {x[0], ints(pads), scalar(n.attrs.value, n.dtype)});
    }
    case Prim::gather: {
      const std::string out = fresh("v");
      attr(emit(graph_, "Gather", x, {out}), "axis", n.attrs.axis);
      return out;
    }
    default:
      unsupported("no ONNX form for {}", detail::name(n.prim));
  }
}

std::string OnnxWriter::indexing(const Node& n, const std::vector<std::string>& x,
                                 const GraphData& g) {
  const Node& in = g.nodes[static_cast<std::size_t>(n.inputs[0])];
  const std::string out = fresh("v");
  std::vector<std::string> inputs = x;
  // GatherND and ScatterND take i64 indices only.
  const auto wide_indices = [&] {
    std::vector<std::string> widened = x;
    if (g.nodes[static_cast<std::size_t>(n.inputs[1])].dtype == DType::i32)
      widened[1] = cast_to(x[1], DType::i64);
    return widened;
  };
  const auto with_mode = [&](std::string_view type) -> onnx::NodeProto& {
    static constexpr std::array<const char*, 3> reductions{"none", "add", "mul"};
    const auto mode = static_cast<std::size_t>(n.attrs.ints.at(0));
    if (mode >= reductions.size())
      unsupported("{} in mode maximum or minimum needs ONNX opset 18 (kiln writes {})",
                  detail::name(n.prim), onnx_opset);
    onnx::NodeProto& node = emit(graph_, type, inputs, {out});
    if (mode != 0) {
      onnx::AttributeProto& a = *node.add_attribute();
      a.set_name("reduction");
      a.set_type(onnx::AttributeProto::STRING);
      a.set_s(reductions[mode]);
    }
    return node;
  };
  switch (n.prim) {
    case Prim::cumsum: {
      onnx::NodeProto& node = emit(
          graph_, "CumSum", {x[0], scalar(static_cast<double>(n.attrs.axis), DType::i64)}, {out});
      if (n.attrs.ints[0] != 0) attr(node, "exclusive", 1);
      if (n.attrs.ints[1] != 0) attr(node, "reverse", 1);
      return out;
    }
    case Prim::argsort: {
      const std::int64_t d = in.shape[static_cast<std::size_t>(n.attrs.axis)];
      const std::int64_t k = n.attrs.ints[0];
      const std::string count = k >= 0 ? ints({k}) : is_dynamic_dim(d) ? dim_value(d) : ints({d});
      onnx::NodeProto& node = emit(graph_, "TopK", {x[0], count}, {fresh("values"), out});
      attr(node, "axis", n.attrs.axis);
      attr(node, "largest", n.attrs.ints[1]);
      return out;
    }
    case Prim::take_along_axis:
      attr(emit(graph_, "GatherElements", x, {out}), "axis", n.attrs.axis);
      return out;
    case Prim::scatter:
      attr(with_mode("ScatterElements"), "axis", n.attrs.axis);
      return out;
    case Prim::gather_nd:
      attr(emit(graph_, "GatherND", wide_indices(), {out}), "batch_dims", n.attrs.axis);
      return out;
    case Prim::scatter_nd:
      if (n.attrs.axis != 0) unsupported("ONNX ScatterND has no batch dims");
      inputs = wide_indices();
      with_mode("ScatterND");
      return out;
    default:
      unsupported("the primitive {} has no ONNX operator (ONNX has no running product)",
                  detail::name(n.prim));
  }
}

/// conv, the transposed convolution and pooling. ONNX puts channels first: a channels-last
/// node transposes its input (and kernel) there and its output back.
std::string OnnxWriter::window(const Node& n, const std::vector<std::string>& x,
                               const GraphData& g) {
  const detail::ConvGeometry geo = detail::ConvGeometry::from(n.attrs);
  const auto s = static_cast<std::int64_t>(geo.spatial);
  const Node& in = g.nodes[static_cast<std::size_t>(n.inputs[0])];
  std::vector<std::int64_t> to_first{0, s + 1}, to_last{0}, kernel_to_oihw{s + 1, s};
  for (std::int64_t a = 0; a < s; ++a) {
    to_first.push_back(1 + a);
    to_last.push_back(2 + a);
    kernel_to_oihw.push_back(a);
  }
  to_last.push_back(1);
  const auto transposed = [&](const std::string& v, const std::vector<std::int64_t>& perm) {
    const std::string out = fresh("v");
    attr(emit(graph_, "Transpose", {v}, {out}), "perm", perm);
    return out;
  };
  std::vector<std::string> inputs = x;
  if (geo.channels_last) {
    inputs[0] = transposed(x[0], to_first);
    if (inputs.size() > 1) inputs[1] = transposed(x[1], kernel_to_oihw);
  }
  std::vector<std::int64_t> pads = geo.pads_before;
  pads.insert(pads.end(), geo.pads_after.begin(), geo.pads_after.end());
  const std::string out = fresh("v");
  const auto common = [&](std::string_view type) -> onnx::NodeProto& {
    onnx::NodeProto& node = emit(graph_, type, inputs, {out});
    attr(node, "strides", geo.strides);
    attr(node, "pads", pads);
    return node;
  };
  switch (n.prim) {
    case Prim::conv:
    case Prim::conv_input_grad: {
      const bool forward = n.prim == Prim::conv;
      onnx::NodeProto& node = common(forward ? "Conv" : "ConvTranspose");
      attr(node, "dilations", geo.dilations);
      attr(node, "group", geo.groups);
      if (!forward) {  // the positions beyond the geometry's own output extent
        const Node& w = g.nodes[static_cast<std::size_t>(n.inputs[1])];
        std::vector<std::int64_t> extra;
        for (std::size_t a = 0; a < geo.spatial; ++a) {
          const std::int64_t span = geo.dilations[a] * (geo.kernel_extent(w.shape, a) - 1) + 1;
          extra.push_back(geo.extent(n.shape, a) - ((geo.extent(in.shape, a) - 1) * geo.strides[a] +
                                                    span - geo.pads_before[a] - geo.pads_after[a]));
        }
        attr(node, "output_padding", extra);
      }
      break;
    }
    case Prim::max_pool:
    case Prim::avg_pool: {
      const auto window_at = n.attrs.ints.begin() + 3 + 4 * s;
      onnx::NodeProto& node = common(n.prim == Prim::max_pool ? "MaxPool" : "AveragePool");
      attr(node, "kernel_shape", std::vector<std::int64_t>(window_at, window_at + s));
      if (n.prim == Prim::avg_pool && n.attrs.ints[static_cast<std::size_t>(3 + 5 * s)] != 0)
        attr(node, "count_include_pad", 1);
      break;
    }
    default:
      unsupported(
          "the primitive {} has no ONNX form (gradients do not export; export an "
          "inference function)",
          detail::name(n.prim));
  }
  return geo.channels_last ? transposed(out, to_last) : out;
}

}  // namespace kiln::detail::onnx_writing

#endif

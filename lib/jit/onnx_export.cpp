// kiln::export_onnx: a concrete function's graph as an ONNX model (opset 17), built with the
// protobuf classes of Debian's libonnx-dev and checked by its checker before it is written.
#include <fmt/format.h>

#include "core/fail.hpp"
#include "jit/concrete_function.hpp"
#include "jit/export_format.hpp"
#include "kiln/creation.hpp"
#include "kiln/export.hpp"
#include "kiln/ops.hpp"
#include "primitives/primitive.hpp"
#include "state/variable_impl.hpp"

#if KILN_HAVE_ONNX
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <array>
#include <limits>
#include <map>

#include "io/atomic_file.hpp"
#include "kernels/conv.hpp"
#endif

namespace kiln {

#if KILN_HAVE_ONNX

namespace {

using detail::Attrs;
using detail::GraphData;
using detail::Node;
using detail::Prim;

constexpr std::string_view onnx_op = "export_onnx";

int onnx_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return onnx::TensorProto::FLOAT;
    case DType::f64:
      return onnx::TensorProto::DOUBLE;
    case DType::i32:
      return onnx::TensorProto::INT32;
    case DType::i64:
      return onnx::TensorProto::INT64;
    case DType::boolean:
      return onnx::TensorProto::BOOL;
    case DType::i8:
      return onnx::TensorProto::INT8;
    case DType::u8:
      return onnx::TensorProto::UINT8;
  }
  return onnx::TensorProto::UNDEFINED;
}

/// What the writers of one model share: where messages point, the dynamic dims' sources, the
/// counter that keeps every name unique, and the variables written as initializers.
struct ModelState {
  std::string source;
  const std::vector<std::pair<std::uint32_t, std::uint32_t>>& symbol_sources;
  std::size_t counter = 0;
  std::map<std::int32_t, std::string> variables;  // slot -> initializer name
};

/// Writes one kiln graph into an ONNX GraphProto, node by node: the function's graph, or a
/// region (a loop body) into the body graph of an ONNX Scan.
class OnnxWriter {
 public:
  OnnxWriter(onnx::GraphProto& graph, ModelState& model) : graph_(graph), model_(model) {}

  /// The function's graph: parameters become the inputs input_<i>, outputs output_<i>.
  void write(const GraphData& g) {
    nodes(g);
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      const Node& n = g.nodes[static_cast<std::size_t>(g.outputs[k])];
      const std::string name = fmt::format("output_{}", k);
      emit(graph_, "Identity", {names_[static_cast<std::size_t>(g.outputs[k])]}, {name});
      describe(*graph_.add_output(), name, n.dtype, n.shape);
    }
  }

  /// A region: parameter k is `parameters[k]` (a body input or an outer value); its outputs
  /// become the body outputs `outputs`.
  void write_region(const GraphData& g, std::vector<std::string> parameters,
                    const std::vector<std::string>& outputs) {
    region_parameters_ = std::move(parameters);
    is_region_ = true;
    nodes(g);
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      const Node& n = g.nodes[static_cast<std::size_t>(g.outputs[k])];
      emit(graph_, "Identity", {names_[static_cast<std::size_t>(g.outputs[k])]}, {outputs[k]});
      describe(*graph_.add_output(), outputs[k], n.dtype, n.shape);
    }
  }

 private:
  onnx::GraphProto& graph_;
  ModelState& model_;
  std::vector<std::string> names_;
  std::map<std::size_t, std::vector<std::string>> results_;  // control-flow node -> results
  std::vector<std::string> region_parameters_;
  bool is_region_ = false;
  std::size_t current_ = 0;
  std::map<std::int64_t, std::string> dim_values_;  // dynamic dim id -> its size, int64 [1]

  void nodes(const GraphData& g) {
    names_.assign(g.nodes.size(), std::string());
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      current_ = i;
      names_[i] = node(g, g.nodes[i]);
    }
  }

  /// The run-time size of dynamic dim `d`, as an int64 [1] value: read from the shape of the
  /// argument the trace took it from (a graph input, visible inside loop bodies too).
  std::string dim_value(std::int64_t d) {
    const std::int64_t id = dynamic_dim_id(d);
    if (const auto it = dim_values_.find(id); it != dim_values_.end()) return it->second;
    const auto [argument, dim] = model_.symbol_sources.at(static_cast<std::size_t>(id));
    const std::string size = op("Gather", {op("Shape", {fmt::format("input_{}", argument)}),
                                           ints({static_cast<std::int64_t>(dim)})});
    dim_values_.emplace(id, size);
    return size;
  }

  /// `shape` as an int64 [rank] value, dynamic dims read at run time.
  std::string shape_value(const Shape& shape) {
    std::vector<std::string> parts;
    std::vector<std::int64_t> run;
    for (std::int64_t d : shape) {
      if (!is_dynamic_dim(d)) {
        run.push_back(d);
        continue;
      }
      if (!run.empty()) parts.push_back(ints(run));
      run.clear();
      parts.push_back(dim_value(d));
    }
    if (!run.empty() || parts.empty()) parts.push_back(ints(run));
    if (parts.size() == 1) return parts[0];
    const std::string out = fresh("shape");
    attr(emit(graph_, "Concat", parts, {out}), "axis", 0);
    return out;
  }

  template <class... Args>
  [[noreturn]] void unsupported(fmt::format_string<Args...> message, Args&&... args) const {
    detail::fail(onnx_op, "{}: {}node {}: {}", model_.source, is_region_ ? "loop body " : "",
                 current_, fmt::format(message, std::forward<Args>(args)...));
  }

  std::string fresh(std::string_view hint) { return fmt::format("{}_{}", hint, model_.counter++); }

  static void describe(onnx::ValueInfoProto& info, const std::string& name, DType dtype,
                       const Shape& shape) {
    info.set_name(name);
    auto* type = info.mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx_type(dtype));
    auto* dims = type->mutable_shape();
    for (std::int64_t d : shape) {
      auto* dim = dims->add_dim();
      if (is_dynamic_dim(d))
        dim->set_dim_param(fmt::format("d{}", dynamic_dim_id(d)));
      else
        dim->set_dim_value(d);
    }
  }

  /// Adds node op_type(inputs) -> outputs to `graph`; returns it for attributes.
  onnx::NodeProto& emit(onnx::GraphProto& graph, std::string_view op_type,
                        const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto& n = *graph.add_node();
    n.set_op_type(std::string(op_type));
    n.set_name(fresh(op_type));
    for (const auto& in : inputs) n.add_input(in);
    for (const auto& out : outputs) n.add_output(out);
    return n;
  }
  /// One node with one new output; returns the output's name.
  std::string op(onnx::GraphProto& graph, std::string_view op_type,
                 const std::vector<std::string>& inputs) {
    const std::string out = fresh("v");
    emit(graph, op_type, inputs, {out});
    return out;
  }
  std::string op(std::string_view op_type, const std::vector<std::string>& inputs) {
    return op(graph_, op_type, inputs);
  }

  static void attr(onnx::NodeProto& n, const char* name, std::int64_t value) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  static void attr(onnx::NodeProto& n, const char* name, const std::vector<std::int64_t>& values) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto v : values) a->add_ints(v);
  }

  /// An initializer holding `t` (any kiln dtype), named `name`.
  void initializer(const std::string& name, const Tensor& t) {
    onnx::TensorProto& p = *graph_.add_initializer();
    p.set_name(name);
    p.set_data_type(onnx_type(t.dtype()));
    for (std::int64_t d : t.shape()) p.add_dims(d);
    // ONNX's raw_data is the elements in row-major order, little-endian, a bool as one byte
    // holding 0 or 1: kiln's own layout of a contiguous tensor.
    const Tensor c = t.contiguous();
    const std::string bytes(static_cast<const char*>(c.data()),
                            static_cast<std::size_t>(c.size()) * dtype_size(c.dtype()));
    p.set_raw_data(bytes);
  }
  std::string ints(const std::vector<std::int64_t>& values) {
    const std::string name = fresh("ints");
    initializer(name, tensor(values, Shape{static_cast<std::int64_t>(values.size())}));
    return name;
  }
  std::string scalar(double value, DType dtype) {
    const std::string name = fresh("scalar");
    initializer(name, cast(full({}, value), dtype));
    return name;
  }
  std::string cast_to(const std::string& x, DType to) {
    const std::string out = fresh("v");
    attr(emit(graph_, "Cast", {x}, {out}), "to", onnx_type(to));
    return out;
  }

  /// ONNX for one elementwise primitive on named inputs of dtype `in` (cast: to `out`).
  std::string elementwise(Prim p, DType in, DType out, const std::vector<std::string>& x) {
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
      default:
        unsupported("the primitive {} is not elementwise", detail::name(p));
    }
  }

  /// Python's a mod b for integers (the sign of b): ONNX Mod with fmod = 0.
  std::string mod_of(const std::string& a, const std::string& b) {
    const std::string out = fresh("v");
    attr(emit(graph_, "Mod", {a, b}, {out}), "fmod", 0);
    return out;
  }

  /// Floor division of integers (kiln's, Python's): ONNX Div truncates, so one less where the
  /// remainder is nonzero and a, b have opposite signs.
  std::string floor_div(const std::string& a, const std::string& b, DType dtype) {
    const std::string q = op("Div", {a, b});
    const std::string r = op("Sub", {a, op("Mul", {q, b})});
    const std::string zero = scalar(0, dtype);
    const std::string adjust =
        op("And", {op("Not", {op("Equal", {r, zero})}),
                   op("Xor", {op("Less", {r, zero}), op("Less", {b, zero})})});
    return op("Sub", {q, cast_to(adjust, dtype)});
  }

  std::string reduce(const Node& n, const std::string& x, const Node& input) {
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
      case Prim::softmax: {
        const std::string out = fresh("v");
        attr(emit(graph_, "Softmax", {x}, {out}), "axis", axes.at(0));
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

  std::string movement(const Node& n, const std::vector<std::string>& x, const GraphData& g) {
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

  std::string indexing(const Node& n, const std::vector<std::string>& x, const GraphData& g) {
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
  std::string window(const Node& n, const std::vector<std::string>& x, const GraphData& g) {
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
            extra.push_back(geo.extent(n.shape, a) -
                            ((geo.extent(in.shape, a) - 1) * geo.strides[a] + span -
                             geo.pads_before[a] - geo.pads_after[a]));
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

  /// An LSTM or GRU recurrence as an ONNX Scan whose body is the step's math (so every step's
  /// state, and the saved gates where the graph has them, come out as kiln's y does).
  std::string recurrence(const Node& n, const std::vector<std::string>& x, const GraphData& g) {
    const bool lstm = n.prim == Prim::lstm_sequence;
    const Node& w = g.nodes[static_cast<std::size_t>(n.inputs[lstm ? 3 : 2])];
    const std::int64_t units = w.shape[0];
    const std::int64_t columns = n.shape[2];
    const bool saved = columns != (lstm ? 2 : 1) * units;
    const DType dtype = n.dtype;
    onnx::AttributeProto body_attr;
    body_attr.set_name("body");
    body_attr.set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto& body = *body_attr.mutable_g();
    body.set_name(fresh("step"));
    // The state's batch dim: that of h0 (input 1), [B, U].
    const Shape batch_units{g.nodes[static_cast<std::size_t>(n.inputs[1])].shape[0], units};
    const auto body_input = [&](const std::string& name, const Shape& shape) {
      describe(*body.add_input(), name, dtype, shape);
      return name;
    };
    const auto body_op = [&](std::string_view type, const std::vector<std::string>& in) {
      return op(body, type, in);
    };
    const std::string h = body_input(fresh("h"), batch_units);
    const std::string c = lstm ? body_input(fresh("c"), batch_units) : std::string();
    const std::int64_t gates = lstm ? 4 : 3;
    const std::string xp = body_input(fresh("xp"), {batch_units[0], gates * units});
    const auto split = [&](const std::string& v) {
      std::vector<std::string> parts;
      for (std::int64_t k = 0; k < gates; ++k) parts.push_back(fresh("gate"));
      attr(emit(body, "Split", {v, ints(std::vector<std::int64_t>(gates, units))}, parts), "axis",
           1);
      return parts;
    };
    std::vector<std::string> states, ys;
    if (lstm) {
      const std::string z =
          body_op("Add", {body_op("Add", {xp, body_op("MatMul", {h, x[3]})}), x[4]});
      const auto part = split(z);
      const std::string i = body_op("Sigmoid", {part[0]}), f = body_op("Sigmoid", {part[1]});
      const std::string gg = body_op("Tanh", {part[2]}), o = body_op("Sigmoid", {part[3]});
      const std::string c_next = body_op("Add", {body_op("Mul", {f, c}), body_op("Mul", {i, gg})});
      const std::string h_next = body_op("Mul", {o, body_op("Tanh", {c_next})});
      states = {h_next, c_next};
      ys = {h_next, c_next};
      if (saved) ys.insert(ys.end(), {i, f, gg, o});
    } else {
      const auto xs = split(body_op("Add", {xp, x[3]}));
      const auto qs = split(body_op("Add", {body_op("MatMul", {h, x[2]}), x[4]}));
      const std::string z = body_op("Sigmoid", {body_op("Add", {xs[0], qs[0]})});
      const std::string r = body_op("Sigmoid", {body_op("Add", {xs[1], qs[1]})});
      const std::string nn = body_op("Tanh", {body_op("Add", {xs[2], body_op("Mul", {r, qs[2]})})});
      const std::string one = fresh("one");
      {
        onnx::TensorProto& t = *body.add_initializer();
        t.set_name(one);
        t.set_data_type(onnx_type(dtype));
        const double v = 1.0;
        const float vf = 1.0f;
        t.set_raw_data(dtype == DType::f64 ? std::string(reinterpret_cast<const char*>(&v), 8)
                                           : std::string(reinterpret_cast<const char*>(&vf), 4));
      }
      const std::string h_next =
          body_op("Add", {body_op("Mul", {z, h}), body_op("Mul", {body_op("Sub", {one, z}), nn})});
      states = {h_next};
      ys = {h_next};
      if (saved) ys.insert(ys.end(), {z, r, nn, qs[2]});
    }
    // Body outputs: the next states, then this step's row of y.
    std::vector<std::string> state_outputs;
    for (std::size_t k = 0; k < states.size(); ++k) {
      const std::string name = fresh("state");
      emit(body, "Identity", {states[k]}, {name});
      describe(*body.add_output(), name, dtype, batch_units);
    }
    const std::string row = fresh("row");
    attr(emit(body, "Concat", ys, {row}), "axis", 1);
    describe(*body.add_output(), row, dtype, {batch_units[0], columns});

    std::vector<std::string> scan_inputs = {x[1]};
    if (lstm) scan_inputs.push_back(x[2]);
    scan_inputs.push_back(x[0]);
    std::vector<std::string> scan_outputs;
    for (std::size_t k = 0; k < states.size(); ++k) scan_outputs.push_back(fresh("final"));
    const std::string y = fresh("y");
    scan_outputs.push_back(y);
    onnx::NodeProto& scan = emit(graph_, "Scan", scan_inputs, scan_outputs);
    *scan.add_attribute() = body_attr;
    attr(scan, "num_scan_inputs", 1);
    return y;
  }

  /// A kiln::scan as an ONNX Scan: carries are its states, xs its scan inputs (both read
  /// backwards for a reversed scan, whose ys are then written backwards too, so y t still
  /// belongs to x t), and captures the outer values the body reads by name. Without xs, a
  /// dummy scan input of the step count drives it.
  std::vector<std::string> scan(const GraphData& g, const Node& n,
                                const std::vector<std::string>& x) {
    const auto nc = static_cast<std::size_t>(n.attrs.ints[0]);
    const auto nx = static_cast<std::size_t>(n.attrs.ints[1]);
    const bool reverse = n.attrs.ints[2] != 0;
    const GraphData& body_graph = *n.regions[0];
    onnx::AttributeProto body_attr;
    body_attr.set_name("body");
    body_attr.set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto& body = *body_attr.mutable_g();
    body.set_name(fresh("scan_body"));
    std::vector<std::string> parameters, scan_inputs;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      const Node& in = g.nodes[static_cast<std::size_t>(n.inputs[k])];
      if (k >= nc + nx) {  // a capture: the body reads the outer value itself
        parameters.push_back(x[k]);
        continue;
      }
      const std::string name = fresh(k < nc ? "carry" : "x");
      Shape shape = in.shape;
      if (k >= nc) shape = Shape(std::vector<std::int64_t>(in.shape.begin() + 1, in.shape.end()));
      describe(*body.add_input(), name, in.dtype, shape);
      parameters.push_back(name);
      scan_inputs.push_back(x[k]);
    }
    if (nx == 0) {  // the step count alone: a dummy sequence of that length
      if (n.attrs.axis < 0) unsupported("a scan without xs and without a step count");
      const std::string steps = fresh("steps");
      initializer(steps, kiln::zeros({n.attrs.axis}, DType::boolean));
      const std::string name = fresh("step");
      describe(*body.add_input(), name, DType::boolean, {});
      scan_inputs.push_back(steps);
    }
    std::vector<std::string> outputs;
    for (std::size_t k = 0; k < body_graph.outputs.size(); ++k)
      outputs.push_back(fresh(k < nc ? "carry_out" : "y"));
    OnnxWriter(body, model_).write_region(body_graph, parameters, outputs);
    std::vector<std::string> results;
    for (std::size_t k = 0; k < outputs.size(); ++k) results.push_back(fresh("result"));
    onnx::NodeProto& node = emit(graph_, "Scan", scan_inputs, results);
    *node.add_attribute() = body_attr;
    const std::size_t num_scan_inputs = scan_inputs.size() - nc;
    attr(node, "num_scan_inputs", static_cast<std::int64_t>(num_scan_inputs));
    if (reverse) {
      attr(node, "scan_input_directions", std::vector<std::int64_t>(num_scan_inputs, 1));
      if (outputs.size() > nc)
        attr(node, "scan_output_directions", std::vector<std::int64_t>(outputs.size() - nc, 1));
    }
    return results;
  }

  std::string node(const GraphData& g, const Node& n) {
    std::vector<std::string> x;
    for (auto i : n.inputs) x.push_back(names_[static_cast<std::size_t>(i)]);
    switch (n.kind) {
      case Node::Kind::parameter: {
        if (is_region_) return region_parameters_.at(static_cast<std::size_t>(n.index));
        const std::string name = fmt::format("input_{}", n.index);
        describe(*graph_.add_input(), name, n.dtype, n.shape);
        return name;
      }
      case Node::Kind::constant: {
        const std::string name = fresh("constant");
        initializer(name, n.constant);
        return name;
      }
      case Node::Kind::variable: {
        auto it = model_.variables.find(n.index);
        if (it != model_.variables.end()) return it->second;
        const auto v = g.variables[static_cast<std::size_t>(n.index)].lock();
        if (!v)
          detail::fail(onnx_op, "{}: the function's variable '{}' no longer exists", model_.source,
                       g.variable_names[static_cast<std::size_t>(n.index)]);
        initializer(v->name, Variable(v).value());
        model_.variables.emplace(n.index, v->name);
        return v->name;
      }
      case Node::Kind::assign:
      case Node::Kind::assign_rows:
        unsupported(
            "assigns the variable '{}'; an ONNX model has no variables (export an inference "
            "function: one that reads its variables and assigns none)",
            g.variable_names[static_cast<std::size_t>(n.index)]);
      case Node::Kind::fused: {
        std::vector<std::string> slots(n.program->num_slots);
        std::string last;
        for (const detail::FusedOp& f : n.program->ops) {
          std::vector<std::string> in;
          for (int k = 0; k < detail::info(f.prim).arity; ++k) {
            const int o = f.operands[static_cast<std::size_t>(k)];
            in.push_back(o >= 0 ? x[static_cast<std::size_t>(o)]
                                : slots[static_cast<std::size_t>(-(o + 1))]);
          }
          last = elementwise(f.prim, f.in_dtype, f.out_dtype, in);
          slots[static_cast<std::size_t>(f.result_slot)] = last;
        }
        return last;
      }
      case Node::Kind::primitive:
        break;
      case Node::Kind::scan:
        results_[current_] = scan(g, n, x);
        return std::string();
      case Node::Kind::output:
        return results_.at(static_cast<std::size_t>(n.inputs[0]))
            .at(static_cast<std::size_t>(n.index));
      case Node::Kind::while_loop:
      case Node::Kind::cond:
        unsupported(
            "the ONNX export does not write kiln's {} yet (kiln::scan loops and the layers' "
            "recurrences it does)",
            detail::kind_name(n.kind));
    }
    const detail::PrimitiveInfo& p = detail::info(n.prim);
    if (detail::is_elementwise(n.prim)) {
      const DType in = n.inputs.empty() ? n.dtype
                       : n.prim == Prim::where
                           ? g.nodes[static_cast<std::size_t>(n.inputs[1])].dtype
                           : g.nodes[static_cast<std::size_t>(n.inputs[0])].dtype;
      return elementwise(n.prim, in, n.prim == Prim::cast ? n.attrs.dtype : n.dtype, x);
    }
    switch (p.family) {
      case detail::Family::reduce:
        return reduce(n, x[0], g.nodes[static_cast<std::size_t>(n.inputs[0])]);
      case detail::Family::movement:
        return movement(n, x, g);
      case detail::Family::indexing:
        return indexing(n, x, g);
      case detail::Family::window:
        return window(n, x, g);
      case detail::Family::linalg:
        return op("MatMul", x);
      default:
        break;
    }
    if (n.prim == Prim::lstm_sequence || n.prim == Prim::gru_sequence) return recurrence(n, x, g);
    unsupported(
        "the primitive {} has no ONNX form (gradients, random draws and training steps do not "
        "export; export an inference function)",
        p.name);
  }
};

}  // namespace

void export_onnx(const ConcreteFunction& function, const std::filesystem::path& path) {
  const detail::ConcreteFunctionImpl& cf = *function.impl();
  const std::string source = path.string();
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("kiln");
  model.set_producer_version("0.1.0");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(onnx_opset);
  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name(cf.name);
  ModelState state{source, cf.symbol_sources, 0, {}};
  OnnxWriter(graph, state).write(*cf.graph);
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    detail::fail(onnx_op, "{}: the ONNX checker rejects the model kiln made: {}", source, e.what());
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    detail::fail(onnx_op, "{}: protobuf could not serialize the model", source);
  io::detail::write_file_atomically(
      path, std::string(onnx_op),
      std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

#else  // !KILN_HAVE_ONNX

void export_onnx(const ConcreteFunction&, const std::filesystem::path& path) {
  detail::fail("export_onnx",
               "{}: this kiln was built without ONNX (Debian's libonnx-dev and libprotobuf-dev "
               "were not found when it was configured)",
               path.string());
}

#endif

}  // namespace kiln

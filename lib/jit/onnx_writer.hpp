#pragma once
// The writer behind kiln::export_onnx (jit/onnx_export.cpp): one kiln graph written into an ONNX
// GraphProto node by node. Its small helpers are here; its translations of the primitives are in
// jit/onnx_export_ops.cpp (elementwise, reductions, movement, indexing, windows) and
// jit/onnx_export.cpp (recurrences, scans, the node dispatch). Included only where kiln has ONNX.

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/fail.hpp"
#include "jit/graph.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "primitives/primitive.hpp"

namespace kiln::detail::onnx_writing {

using detail::Attrs;
using detail::GraphData;
using detail::Node;
using detail::Prim;

inline constexpr std::string_view onnx_op = "export_onnx";

inline int onnx_type(DType dtype) {
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
    case DType::f16:
      return onnx::TensorProto::FLOAT16;
    case DType::bf16:
      return onnx::TensorProto::BFLOAT16;
    case DType::i16:
      return onnx::TensorProto::INT16;
    case DType::u16:
      return onnx::TensorProto::UINT16;
    case DType::u32:
      return onnx::TensorProto::UINT32;
    case DType::u64:
      return onnx::TensorProto::UINT64;
    case DType::f8e4m3fn:
    case DType::f8e4m3fnuz:
    case DType::f8e5m2:
    case DType::f8e5m2fnuz:
    case DType::f4e2m1fn:
    case DType::i4:
    case DType::u4:
    case DType::i2:
    case DType::u2:
      break;
  }
  kiln::detail::fail(onnx_op.data(),
                     "ONNX opset 17, which kiln writes, has no {} (the 8-, 4- and 2-bit types "
                     "came in opsets 19 to 25): kiln::cast to a wider dtype inside the function",
                     dtype_name(dtype));
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
  static void float_attr(onnx::NodeProto& n, const char* name, float value) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  static void attr(onnx::NodeProto& n, const char* name, const std::string& value) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(value);
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
  std::string elementwise(Prim p, DType in, DType out, const std::vector<std::string>& x);
  /// Python's a mod b for integers (the sign of b): ONNX Mod with fmod = 0.
  std::string mod_of(const std::string& a, const std::string& b);
  /// Floor division of integers (kiln's, Python's): ONNX Div truncates, so one less where the
  /// remainder is nonzero and a, b have opposite signs.
  std::string floor_div(const std::string& a, const std::string& b, DType dtype);
  std::string reduce(const Node& n, const std::string& x, const Node& input);
  /// layer_norm as ONNX LayerNormalization (a Scale of ones where the node has no gamma);
  /// rms_norm as x * 1 / sqrt(ReduceMean(x * x) + epsilon) * gamma (RMSNormalization needs
  /// opset 23).
  std::string normalization(const Node& n, const std::vector<std::string>& x, const Node& input);
  std::string movement(const Node& n, const std::vector<std::string>& x, const GraphData& g);
  std::string indexing(const Node& n, const std::vector<std::string>& x, const GraphData& g);
  /// conv, the transposed convolution and pooling. ONNX puts channels first: a channels-last
  /// node transposes its input (and kernel) there and its output back.
  std::string window(const Node& n, const std::vector<std::string>& x, const GraphData& g);

  /// An LSTM or GRU recurrence as an ONNX Scan whose body is the step's math (so every step's
  /// state, and the saved gates where the graph has them, come out as kiln's y does).
  std::string recurrence(const Node& n, const std::vector<std::string>& x, const GraphData& g);
  /// A kiln::scan as an ONNX Scan: carries are its states, xs its scan inputs (both read
  /// backwards for a reversed scan, whose ys are then written backwards too, so y t still
  /// belongs to x t), and captures the outer values the body reads by name. Without xs, a
  /// dummy scan input of the step count drives it.
  std::vector<std::string> scan(const GraphData& g, const Node& n,
                                const std::vector<std::string>& x);
  std::string node(const GraphData& g, const Node& n);
};

}  // namespace kiln::detail::onnx_writing

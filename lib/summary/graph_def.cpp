// A traced graph as a TensorFlow GraphDef, for TensorBoard's Graphs tab.
#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "jit/graph.hpp"
#include "primitives/primitive.hpp"
#include "summary/events.hpp"

namespace kiln::detail::summary {

namespace {

// GraphDef, NodeDef, NodeDef.attr's map entry, AttrValue, AttrValue.ListValue, VersionDef
constexpr int graph_node = 1, graph_versions = 4;
constexpr int node_name = 1, node_op = 2, node_input = 3, node_attr = 5;
constexpr int entry_key = 1, entry_value = 2;
constexpr int attr_list = 1, attr_s = 2, attr_i = 3, attr_type = 6;
constexpr int list_shape = 7;
constexpr int versions_producer = 1;
// TensorShapeProto and its Dim
constexpr int shape_dim = 2, dim_size = 1;

int tf_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return 1;  // DT_FLOAT
    case DType::f64:
      return 2;  // DT_DOUBLE
    case DType::i32:
      return 3;  // DT_INT32
    case DType::i64:
      return 9;  // DT_INT64
    case DType::boolean:
      return 10;  // DT_BOOL
    case DType::i8:
      return 6;  // DT_INT8
    case DType::u8:
      return 4;  // DT_UINT8
    case DType::f16:
      return 19;  // DT_HALF
    case DType::bf16:
      return 14;  // DT_BFLOAT16
    case DType::i16:
      return 5;  // DT_INT16
    case DType::u16:
      return 17;  // DT_UINT16
    case DType::u32:
      return 22;  // DT_UINT32
    case DType::u64:
      return 23;  // DT_UINT64
    case DType::f8e5m2:
      return 24;  // DT_FLOAT8_E5M2
    case DType::f8e4m3fn:
      return 25;  // DT_FLOAT8_E4M3FN
    case DType::i4:
      return 29;  // DT_INT4
    case DType::u4:
      return 30;  // DT_UINT4
    case DType::f8e4m3fnuz:
      return 26;  // DT_FLOAT8_E4M3FNUZ
    case DType::f8e5m2fnuz:
      return 28;  // DT_FLOAT8_E5M2FNUZ
    case DType::i2:
      return 31;  // DT_INT2
    case DType::u2:
      return 32;  // DT_UINT2
    case DType::f4e2m1fn:
      return 33;  // DT_FLOAT4_E2M1FN
  }
  return 0;
}

proto::Message shape_proto(const Shape& shape) {
  proto::Message s;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    proto::Message dim;
    dim.varint(dim_size, is_dynamic_dim(shape[d]) ? -1 : shape[d]);  // TensorFlow: -1 = unknown
    s.message(shape_dim, dim);
  }
  return s;
}

void add_attr(proto::Message& node, std::string_view key, const proto::Message& value) {
  proto::Message entry;
  entry.bytes(entry_key, key).message(entry_value, value);
  node.message(node_attr, entry);
}

const char* control_flow_op(Node::Kind kind) {
  switch (kind) {
    case Node::Kind::scan:
      return "Scan";
    case Node::Kind::while_loop:
      return "While";
    default:
      return "If";
  }
}

std::vector<const char*> region_names(Node::Kind kind) {
  if (kind == Node::Kind::scan) return {"body"};
  if (kind == Node::Kind::while_loop) return {"cond", "body"};
  return {"then", "else"};
}

/// Writes the nodes of one graph (the top level or a region) with names under `scope`.
class GraphDefWriter {
 public:
  GraphDefWriter(proto::Message& out, std::set<std::string>& taken, std::size_t& count)
      : out_(out), taken_(taken), count_(count) {}

  void write(const GraphData& g, const std::string& scope) {
    std::vector<std::string> names(g.nodes.size()), modules(g.nodes.size());
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      modules[i] = module_of(g, n, modules);
      names[i] = unique(full_name(g, n, i, names, scope, modules[i]));
      proto::Message node;
      node.bytes(node_name, names[i]).bytes(node_op, op_name(n));
      for (const std::int32_t in : n.inputs)
        node.bytes(node_input, names[static_cast<std::size_t>(in)]);
      if (!n.is_control_flow()) {
        proto::Message type;
        type.varint(attr_type, tf_dtype(n.dtype));
        add_attr(node, "T", type);
        proto::Message shapes;
        shapes.message(list_shape, shape_proto(n.shape));
        proto::Message list;
        list.message(attr_list, shapes);
        add_attr(node, "_output_shapes", list);
      }
      if (n.kind == Node::Kind::fused && n.program) {
        proto::Message program;
        program.bytes(attr_s, n.program->text);
        add_attr(node, "program", program);
      }
      if (n.kind == Node::Kind::parameter || n.kind == Node::Kind::output) {
        proto::Message index;
        index.varint(attr_i, n.index);
        add_attr(node, "index", index);
      }
      out_.message(graph_node, node);
      ++count_;
      if (n.is_control_flow()) {
        const auto region = region_names(n.kind);
        for (std::size_t r = 0; r < n.regions.size(); ++r)
          write(*n.regions[r], names[i] + "/" + (r < region.size() ? region[r] : "region") + "/");
      }
    }
  }

 private:
  static std::string variable_name(const GraphData& g, std::int32_t slot) {
    const auto s = static_cast<std::size_t>(slot);
    return s < g.variable_names.size() && !g.variable_names[s].empty()
               ? g.variable_names[s]
               : fmt::format("variable_{}", slot);
  }

  /// The module an op belongs to, for grouping: the graph keeps no name scopes, so an op is put
  /// with the module of the first variable it reads ("net/l1" for "net/l1/kernel"), else with
  /// its first input's module, so a layer's matmul, bias add and activation (and the gradients
  /// and updates that read them) form one group TensorBoard can collapse.
  static std::string module_of(const GraphData& g, const Node& n,
                               const std::vector<std::string>& modules) {
    if (n.kind == Node::Kind::variable) {
      const std::string path = variable_name(g, n.index);
      const auto slash = path.rfind('/');
      return slash == std::string::npos ? std::string() : path.substr(0, slash);
    }
    if (n.kind == Node::Kind::parameter || n.kind == Node::Kind::constant ||
        n.kind == Node::Kind::assign || n.kind == Node::Kind::assign_rows ||
        n.kind == Node::Kind::output)
      return {};
    for (const std::int32_t in : n.inputs)
      if (g.nodes[static_cast<std::size_t>(in)].kind == Node::Kind::variable)
        return modules[static_cast<std::size_t>(in)];
    for (const std::int32_t in : n.inputs)
      if (!modules[static_cast<std::size_t>(in)].empty())
        return modules[static_cast<std::size_t>(in)];
    return {};
  }

  /// The node's name: under `scope` (and its module, for an op), except an output node, named
  /// after its producer.
  static std::string full_name(const GraphData& g, const Node& n, std::size_t i,
                               const std::vector<std::string>& names, const std::string& scope,
                               const std::string& module) {
    if (n.kind == Node::Kind::output)
      return fmt::format("{}_output_{}", names[static_cast<std::size_t>(n.inputs.at(0))], n.index);
    if (n.kind == Node::Kind::variable || module.empty()) return scope + base_name(g, n, i);
    return scope + module + "/" + base_name(g, n, i);
  }

  static std::string base_name(const GraphData& g, const Node& n, std::size_t i) {
    switch (n.kind) {
      case Node::Kind::parameter:
        return fmt::format("input_{}", n.index);
      case Node::Kind::constant:
        return fmt::format("const_{}", i);
      case Node::Kind::variable:
        return variable_name(g, n.index);
      case Node::Kind::assign:
        return variable_name(g, n.index) + "/assign";
      case Node::Kind::assign_rows:
        return variable_name(g, n.index) + "/assign_rows";
      case Node::Kind::primitive:
        return fmt::format("{}_{}", name(n.prim), i);
      case Node::Kind::fused:
        return fmt::format("fused_{}", i);
      default:
        return fmt::format("{}_{}", control_flow_op(n.kind), i);
    }
  }

  static std::string op_name(const Node& n) {
    switch (n.kind) {
      case Node::Kind::parameter:
        return "Placeholder";
      case Node::Kind::constant:
        return "Const";
      case Node::Kind::variable:
        return "ReadVariable";
      case Node::Kind::assign:
        return "Assign";
      case Node::Kind::assign_rows:
        return "ResourceScatterUpdate";
      case Node::Kind::primitive:
        return std::string(name(n.prim));
      case Node::Kind::fused:
        return "FusedElementwise";
      case Node::Kind::output:
        return "Identity";
      default:
        return control_flow_op(n.kind);
    }
  }

  std::string unique(std::string name) {
    if (taken_.insert(name).second) return name;
    for (int k = 1;; ++k) {
      std::string candidate = fmt::format("{}_{}", name, k);
      if (taken_.insert(candidate).second) return candidate;
    }
  }

  proto::Message& out_;
  std::set<std::string>& taken_;
  std::size_t& count_;
};

}  // namespace

GraphDefBytes graph_def(const GraphData& graph) {
  proto::Message out;
  std::set<std::string> taken;
  GraphDefBytes result;
  GraphDefWriter(out, taken, result.nodes).write(graph, "");
  proto::Message versions;
  versions.varint(versions_producer, 22);
  out.message(graph_versions, versions);
  result.bytes = out.release();
  return result;
}

}  // namespace kiln::detail::summary

// kiln::export_function: a concrete function's graph as JSON and its tensors, in one
// safetensors file.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "core/fail.hpp"
#include "jit/concrete_function.hpp"
#include "jit/export_format.hpp"
#include "kiln/export.hpp"
#include "kiln/io.hpp"
#include "primitives/primitive.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

namespace {

constexpr Node::Kind all_kinds[] = {
    Node::Kind::parameter, Node::Kind::constant, Node::Kind::variable,   Node::Kind::primitive,
    Node::Kind::assign,    Node::Kind::fused,    Node::Kind::scan,       Node::Kind::while_loop,
    Node::Kind::cond,      Node::Kind::output,   Node::Kind::assign_rows};

using Json = nlohmann::ordered_json;

/// A double as JSON: a number, or "nan" / "inf" / "-inf", which JSON numbers cannot be.
Json number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

Json dims(const Shape& shape) {
  return Json(std::vector<std::int64_t>(shape.begin(), shape.end()));
}

/// Writes graphs (the root and every region) and collects the constants they capture.
class GraphWriter {
 public:
  std::map<std::string, Tensor> tensors;

  Json graph(const GraphData& g) {
    Json out = Json::object();
    out["num_parameters"] = g.num_parameters;
    Json nodes = Json::array();
    for (const Node& n : g.nodes) nodes.push_back(node(n));
    out["nodes"] = std::move(nodes);
    out["outputs"] = g.outputs;
    out["side_effects"] = g.side_effects;
    return out;
  }

 private:
  std::size_t next_constant_ = 0;

  Json node(const Node& n) {
    Json out = Json::object();
    out["kind"] = kind_name(n.kind);
    if (n.kind == Node::Kind::primitive) out["prim"] = name(n.prim);
    out["dtype"] = dtype_name(n.dtype);
    out["shape"] = dims(n.shape);
    out["inputs"] = n.inputs;
    if (n.index != -1) out["index"] = n.index;
    const Json a = attrs(n.attrs);
    if (!a.empty()) out["attrs"] = a;
    if (n.kind == Node::Kind::constant) {
      const std::string key = fmt::format("constants/{}", next_constant_++);
      tensors.emplace(key, n.constant);
      out["constant"] = key;
    }
    if (n.program) out["program"] = program(*n.program);
    if (!n.regions.empty()) {
      Json regions = Json::array();
      for (const auto& r : n.regions) regions.push_back(graph(*r));
      out["regions"] = std::move(regions);
    }
    return out;
  }

  static Json attrs(const Attrs& a) {
    const Attrs defaults;
    Json out = Json::object();
    if (!a.axes.empty()) out["axes"] = dims(a.axes);
    if (a.axis != defaults.axis) out["axis"] = a.axis;
    if (a.keepdims != defaults.keepdims) out["keepdims"] = a.keepdims;
    if (a.dtype != defaults.dtype) out["dtype"] = dtype_name(a.dtype);
    if (a.value != defaults.value || std::signbit(a.value)) out["value"] = number(a.value);
    if (!a.ints.empty()) out["ints"] = a.ints;
    return out;
  }

  static Json program(const FusedProgram& p) {
    Json ops = Json::array();
    for (const FusedOp& op : p.ops)
      ops.push_back(Json{{"prim", name(op.prim)},
                         {"in_dtype", dtype_name(op.in_dtype)},
                         {"out_dtype", dtype_name(op.out_dtype)},
                         {"operands", std::vector<int>(op.operands.begin(), op.operands.end())},
                         {"result_slot", op.result_slot}});
    return Json{{"num_inputs", p.num_inputs},
                {"num_slots", p.num_slots},
                {"text", p.text},
                {"ops", std::move(ops)}};
  }
};

}  // namespace

std::string_view kind_name(Node::Kind kind) {
  switch (kind) {
    case Node::Kind::parameter:
      return "parameter";
    case Node::Kind::constant:
      return "constant";
    case Node::Kind::variable:
      return "variable";
    case Node::Kind::primitive:
      return "primitive";
    case Node::Kind::assign:
      return "assign";
    case Node::Kind::assign_rows:
      return "assign_rows";
    case Node::Kind::fused:
      return "fused";
    case Node::Kind::scan:
      return "scan";
    case Node::Kind::while_loop:
      return "while_loop";
    case Node::Kind::cond:
      return "cond";
    case Node::Kind::output:
      return "output";
  }
  return "?";
}

std::optional<Node::Kind> kind_named(std::string_view name) {
  for (Node::Kind k : all_kinds)
    if (kind_name(k) == name) return k;
  return std::nullopt;
}

std::optional<DType> dtype_named(std::string_view name) {
  for (std::size_t i = 0; i < num_dtypes; ++i)
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<Prim> prim_named(std::string_view wanted) {
  for (std::size_t i = 0; i < num_primitives; ++i)
    if (primitive_table[i].name == wanted) return static_cast<Prim>(i);
  return std::nullopt;
}

std::string graph_checksum(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return fmt::format("{:016x}", hash);
}

}  // namespace detail

void export_function(const ConcreteFunction& function, const std::filesystem::path& path) {
  constexpr std::string_view op = "export_function";
  const detail::ConcreteFunctionImpl& cf = *function.impl();
  const detail::GraphData& g = *cf.graph;
  detail::GraphWriter writer;

  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  doc["name"] = cf.name;
  nlohmann::ordered_json variables = nlohmann::ordered_json::array();
  for (std::size_t slot = 0; slot < g.variables.size(); ++slot) {
    const std::shared_ptr<detail::VariableImpl> v = g.variables[slot].lock();
    if (!v)
      detail::fail(op,
                   "{}: the function's variable '{}' no longer exists (a concrete function reads "
                   "its variables by reference and does not keep them alive)",
                   path.string(), g.variable_names[slot]);
    variables.push_back({{"name", v->name}, {"trainable", v->trainable.load()}});
    writer.tensors.emplace(fmt::format("variables/{}", slot), Variable(v).value());
  }
  doc["variables"] = std::move(variables);
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const auto& [tensor, dim] : cf.symbol_sources) sources.push_back({tensor, dim});
  doc["symbol_sources"] = std::move(sources);
  doc["graph"] = writer.graph(g);

  const std::string text = doc.dump();
  io::Metadata metadata{{detail::format_key, std::string(detail::function_format)},
                        {detail::version_key, std::to_string(function_format_version)},
                        {detail::graph_key, text},
                        {detail::checksum_key, detail::graph_checksum(text)}};
  io::save_safetensors(path, writer.tensors, metadata);
}

}  // namespace kiln

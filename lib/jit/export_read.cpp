// kiln::load_function: an export file's graph rebuilt and checked, its variables created, and
// the plan compiled as kiln::function compiles a new trace.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/storage.hpp"
#include "core/tensor_impl.hpp"
#include "jit/concrete_function.hpp"
#include "jit/export_format.hpp"
#include "kiln/export.hpp"
#include "kiln/io.hpp"
#include "ops/rows.hpp"
#include "primitives/primitive.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

struct LoadedFunction::Impl {
  std::shared_ptr<detail::ConcreteFunctionImpl> function;
  std::vector<Variable> variables;
  std::vector<TensorSpec> inputs, outputs;
  std::string source;  // the file it came from, for messages
};

namespace detail {

namespace {

constexpr std::string_view load_op = "load_function";
/// Regions nest inside regions; far deeper than any traced program.
constexpr int max_region_depth = 32;

using Json = nlohmann::json;

/// Reads and checks the graph JSON of one file; every failure names the file and the node.
class GraphReader {
 public:
  GraphReader(std::string source, const std::map<std::string, Tensor>& tensors,
              std::int64_t num_symbols)
      : source_(std::move(source)), tensors_(tensors), num_symbols_(num_symbols) {}

  /// The root graph (regions inside it are read as they come).
  std::shared_ptr<GraphData> root(const Json& j, const std::vector<TensorSpec>& variable_specs) {
    variable_specs_ = &variable_specs;
    num_variables_ = variable_specs.size();
    return graph(j, "graph", 0);
  }

  std::set<std::string> used_tensors;

 private:
  std::string source_;
  const std::map<std::string, Tensor>& tensors_;
  std::int64_t num_symbols_;
  std::size_t num_variables_ = 0;
  const std::vector<TensorSpec>* variable_specs_ = nullptr;

  template <class... Args>
  [[noreturn]] void bad(const std::string& where, fmt::format_string<Args...> message,
                        Args&&... args) const {
    fail(load_op, "{}: {}: {}", source_, where, fmt::format(message, std::forward<Args>(args)...));
  }

  const Json& field(const Json& j, const char* key, const std::string& where) const {
    if (!j.is_object()) bad(where, "is not an object");
    const auto it = j.find(key);
    if (it == j.end()) bad(where, "has no \"{}\"", key);
    return *it;
  }

  std::int64_t integer(const Json& j, const std::string& where, std::int64_t low,
                       std::int64_t high) const {
    if (!j.is_number_integer()) bad(where, "must be an integer");
    if (j.is_number_unsigned() &&
        j.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      bad(where, "is out of range");
    const auto v = j.get<std::int64_t>();
    if (v < low || v > high) bad(where, "is {}, outside [{}, {}]", v, low, high);
    return v;
  }

  std::vector<std::int64_t> integers(const Json& j, const std::string& where) const {
    if (!j.is_array()) bad(where, "must be a list of integers");
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < j.size(); ++i)
      out.push_back(integer(j[i], fmt::format("{}[{}]", where, i),
                            std::numeric_limits<std::int64_t>::min(),
                            std::numeric_limits<std::int64_t>::max()));
    return out;
  }

  DType dtype(const Json& j, const std::string& where) const {
    if (!j.is_string()) bad(where, "must be a dtype name");
    const auto d = dtype_named(j.get<std::string>());
    if (!d) bad(where, "unknown dtype '{}'", j.get<std::string>());
    return *d;
  }

  /// A node shape: sizes >= 0 or the dynamic dims of this file's symbols.
  Shape shape(const Json& j, const std::string& where) const {
    const std::vector<std::int64_t> dims = integers(j, where);
    if (dims.size() > 64) bad(where, "has rank {}", dims.size());
    for (std::int64_t d : dims) {
      if (d >= 0) continue;
      const std::int64_t id = dynamic_dim_id(d);
      if (id < 0 || id >= num_symbols_) bad(where, "has the invalid dim {}", d);
    }
    return Shape(dims);
  }

  double number(const Json& j, const std::string& where) const {
    if (j.is_number()) return j.get<double>();
    if (j == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (j == "inf") return std::numeric_limits<double>::infinity();
    if (j == "-inf") return -std::numeric_limits<double>::infinity();
    bad(where, "must be a number");
  }

  Attrs attrs(const Json& j, const std::string& where) const {
    Attrs a;
    if (!j.is_object()) bad(where, "is not an object");
    for (const auto& [key, value] : j.items()) {
      const std::string at = where + "." + key;
      if (key == "axes")
        a.axes = Shape(integers(value, at));
      else if (key == "axis")
        a.axis = integer(value, at, std::numeric_limits<std::int64_t>::min(),
                         std::numeric_limits<std::int64_t>::max());
      else if (key == "keepdims" && value.is_boolean())
        a.keepdims = value.get<bool>();
      else if (key == "dtype")
        a.dtype = dtype(value, at);
      else if (key == "value")
        a.value = number(value, at);
      else if (key == "ints")
        a.ints = integers(value, at);
      else
        bad(at, "is not an attribute kiln knows");
    }
    return a;
  }

  std::shared_ptr<const FusedProgram> program(const Json& j, const Node& node,
                                              const std::string& where) const {
    auto p = std::make_shared<FusedProgram>();
    p->num_inputs = static_cast<std::size_t>(
        integer(field(j, "num_inputs", where), where + ".num_inputs", 1, max_fused_inputs));
    p->num_slots = static_cast<std::size_t>(
        integer(field(j, "num_slots", where), where + ".num_slots", 0, max_fused_slots));
    const Json& text = field(j, "text", where);
    if (!text.is_string()) bad(where + ".text", "must be a string");
    p->text = text.get<std::string>();
    if (p->num_inputs != node.inputs.size())
      bad(where, "reads {} inputs; the node has {}", p->num_inputs, node.inputs.size());
    const Json& ops = field(j, "ops", where);
    if (!ops.is_array() || ops.empty() || ops.size() > max_fused_ops)
      bad(where + ".ops", "must be a list of 1 to {} instructions", max_fused_ops);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const std::string at = fmt::format("{}.ops[{}]", where, i);
      FusedOp op;
      const Json& prim = field(ops[i], "prim", at);
      const auto p_named = prim.is_string() ? prim_named(prim.get<std::string>()) : std::nullopt;
      if (!p_named || !is_elementwise(*p_named)) bad(at, "is not an elementwise primitive");
      op.prim = *p_named;
      op.in_dtype = dtype(field(ops[i], "in_dtype", at), at + ".in_dtype");
      op.out_dtype = dtype(field(ops[i], "out_dtype", at), at + ".out_dtype");
      const std::vector<std::int64_t> operands = integers(field(ops[i], "operands", at), at);
      if (operands.size() != 3) bad(at, "needs 3 operands");
      const int arity = info(op.prim).arity;
      for (std::size_t k = 0; k < 3; ++k) {
        const std::int64_t o = operands[k];
        const bool used = static_cast<int>(k) < arity;
        if (used && (o >= static_cast<std::int64_t>(p->num_inputs) ||
                     (o < 0 && -(o + 1) >= static_cast<std::int64_t>(p->num_slots))))
          bad(at, "operand {} ({}) is neither an input nor a slot", k, o);
        op.operands[k] = static_cast<std::int16_t>(std::clamp<std::int64_t>(o, -128, 127));
      }
      const std::int64_t result = integer(field(ops[i], "result_slot", at), at + ".result_slot", 0,
                                          std::max<std::int64_t>(0, p->num_slots - 1));
      op.result_slot = static_cast<std::int16_t>(result);
      p->ops.push_back(op);
    }
    if (p->ops.back().out_dtype != node.dtype)
      bad(where, "writes {}; the node is {}", dtype_name(p->ops.back().out_dtype),
          dtype_name(node.dtype));
    resolve_fused_program(*p);  // the row kernels of this CPU; a dtype without one is an error
    return p;
  }

  /// How many results control-flow node n has (what its output nodes may read).
  static std::size_t results_of(const Node& n) {
    return n.kind == Node::Kind::while_loop ? n.regions[1]->outputs.size()
                                            : n.regions[0]->outputs.size();
  }

  void check_control_flow(const Node& n, const std::string& where) const {
    const std::size_t want_regions = n.kind == Node::Kind::scan ? 1 : 2;
    if (n.regions.size() != want_regions) bad(where, "needs {} regions", want_regions);
    const std::size_t want_ints = n.kind == Node::Kind::scan   ? 3
                                  : n.kind == Node::Kind::cond ? 3
                                                               : 4;
    if (n.attrs.ints.size() < want_ints) bad(where, "needs {} integer attributes", want_ints);
    for (std::size_t k = 0; k < want_ints; ++k)
      if (n.attrs.ints[k] < (n.kind == Node::Kind::while_loop && k == 3 ? -1 : 0))
        bad(where, "has a negative count");
    const auto count = [&](std::size_t k) { return static_cast<std::size_t>(n.attrs.ints[k]); };
    const std::size_t inputs = n.inputs.size();
    if (n.kind == Node::Kind::scan) {
      if (count(0) + count(1) > inputs) bad(where, "has fewer inputs than carries and xs");
      if (n.regions[0]->num_parameters != inputs)
        bad(where, "body takes {} parameters for {} inputs", n.regions[0]->num_parameters, inputs);
      if (n.regions[0]->outputs.size() < count(0))
        bad(where, "body returns fewer than its carries");
    } else if (n.kind == Node::Kind::while_loop) {
      if (count(0) + count(1) + count(2) != inputs) bad(where, "input counts do not add up");
      if (n.regions[0]->num_parameters != count(0) + count(1) || n.regions[0]->outputs.size() != 1)
        bad(where, "cond takes the values and its captures and returns one value");
      if (n.regions[1]->num_parameters != count(0) + count(2) ||
          n.regions[1]->outputs.size() != count(0))
        bad(where, "body takes the values and its captures and returns the values");
    } else {
      if (1 + count(0) + count(1) + count(2) != inputs) bad(where, "input counts do not add up");
      if (n.regions[0]->num_parameters != count(0) + count(1) ||
          n.regions[1]->num_parameters != count(0) + count(2) ||
          n.regions[0]->outputs.size() != n.regions[1]->outputs.size())
        bad(where, "branches take the operands and their captures and return as many values");
    }
  }

  std::shared_ptr<GraphData> graph(const Json& j, const std::string& where, int depth) {
    if (depth > max_region_depth) bad(where, "nests regions deeper than {}", max_region_depth);
    auto g = std::make_shared<GraphData>();
    g->num_parameters = static_cast<std::size_t>(
        integer(field(j, "num_parameters", where), where + ".num_parameters", 0, 1 << 20));
    const Json& nodes = field(j, "nodes", where);
    if (!nodes.is_array()) bad(where + ".nodes", "must be a list");
    std::vector<bool> parameter_seen(g->num_parameters, false);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const std::string at = fmt::format("{}.nodes[{}]", where, i);
      g->nodes.push_back(node(nodes[i], *g, i, at, depth));
      const Node& n = g->nodes.back();
      if (n.kind == Node::Kind::parameter) {
        const auto p = static_cast<std::size_t>(n.index);
        if (parameter_seen[p]) bad(at, "repeats parameter {}", p);
        parameter_seen[p] = true;
      }
    }
    if (std::find(parameter_seen.begin(), parameter_seen.end(), false) != parameter_seen.end())
      bad(where, "does not read all of its {} parameters", g->num_parameters);
    const auto node_ids = [&](const char* key) {
      std::vector<std::int32_t> out;
      for (std::int64_t id : integers(field(j, key, where), where + "." + key)) {
        if (id < 0 || id >= static_cast<std::int64_t>(g->nodes.size()))
          bad(where + "." + key, "refers to node {} of {}", id, g->nodes.size());
        out.push_back(static_cast<std::int32_t>(id));
      }
      return out;
    };
    g->outputs = node_ids("outputs");
    g->side_effects = node_ids("side_effects");
    for (std::int32_t id : g->outputs)
      if (g->nodes[static_cast<std::size_t>(id)].is_control_flow())
        bad(where + ".outputs", "names control-flow node {} (its results are read by output nodes)",
            id);
    for (std::int32_t id : g->side_effects)
      if (g->nodes[static_cast<std::size_t>(id)].kind != Node::Kind::assign &&
          g->nodes[static_cast<std::size_t>(id)].kind != Node::Kind::assign_rows)
        bad(where + ".side_effects", "names node {}, which is not an assign", id);
    return g;
  }

  Node node(const Json& j, const GraphData& g, std::size_t position, const std::string& at,
            int depth) {
    Node n;
    const Json& kind = field(j, "kind", at);
    const auto k = kind.is_string() ? kind_named(kind.get<std::string>()) : std::nullopt;
    if (!k) bad(at, "has an unknown kind");
    n.kind = *k;
    n.dtype = dtype(field(j, "dtype", at), at + ".dtype");
    n.shape = shape(field(j, "shape", at), at + ".shape");
    for (std::int64_t in : integers(field(j, "inputs", at), at + ".inputs")) {
      if (in < 0 || in >= static_cast<std::int64_t>(position))
        bad(at, "reads node {}, which does not come before it", in);
      n.inputs.push_back(static_cast<std::int32_t>(in));
    }
    if (j.contains("index"))
      n.index = static_cast<std::int32_t>(integer(j["index"], at + ".index", -1, 1 << 30));
    if (j.contains("attrs")) n.attrs = attrs(j["attrs"], at + ".attrs");
    const auto input = [&](std::size_t k) -> const Node& {
      return g.nodes[static_cast<std::size_t>(n.inputs[k])];
    };
    const auto inputs_exactly = [&](std::size_t count) {
      if (n.inputs.size() != count) bad(at, "needs {} inputs, has {}", count, n.inputs.size());
    };
    switch (n.kind) {
      case Node::Kind::parameter:
        inputs_exactly(0);
        if (n.index < 0 || static_cast<std::size_t>(n.index) >= g.num_parameters)
          bad(at, "is parameter {} of {}", n.index, g.num_parameters);
        break;
      case Node::Kind::constant: {
        inputs_exactly(0);
        const Json& key = field(j, "constant", at);
        const auto it = key.is_string() ? tensors_.find(key.get<std::string>()) : tensors_.end();
        if (it == tensors_.end() || !key.get<std::string>().starts_with("constants/"))
          bad(at, "names a constant the file does not hold");
        if (it->second.dtype() != n.dtype || it->second.shape() != n.shape)
          bad(at, "is {} {}, its constant {} {}", dtype_name(n.dtype), n.shape,
              dtype_name(it->second.dtype()), it->second.shape());
        n.constant = it->second;
        used_tensors.insert(it->first);
        break;
      }
      case Node::Kind::variable:
      case Node::Kind::assign: {
        if (depth > 0) bad(at, "is a {} node inside a region", kind_name(n.kind));
        inputs_exactly(n.kind == Node::Kind::assign ? 1 : 0);
        if (n.index < 0 || static_cast<std::size_t>(n.index) >= num_variables_)
          bad(at, "names variable {} of {}", n.index, num_variables_);
        const TensorSpec& v = (*variable_specs_)[static_cast<std::size_t>(n.index)];
        const Node& value = n.kind == Node::Kind::assign ? input(0) : n;
        if (value.dtype != v.dtype || value.shape != v.shape)
          bad(at, "is {} {}; the variable is {} {}", dtype_name(value.dtype), value.shape,
              dtype_name(v.dtype), v.shape);
        break;
      }
      case Node::Kind::assign_rows: {
        if (depth > 0) bad(at, "is a {} node inside a region", kind_name(n.kind));
        inputs_exactly(2);
        if (n.index < 0 || static_cast<std::size_t>(n.index) >= num_variables_)
          bad(at, "names variable {} of {}", n.index, num_variables_);
        const TensorSpec& v = (*variable_specs_)[static_cast<std::size_t>(n.index)];
        const Node& rows = input(0);
        const Node& values = input(1);
        const Shape expected = row_values_shape(rows.shape, v.shape);
        if ((rows.dtype != DType::i32 && rows.dtype != DType::i64) || values.dtype != v.dtype ||
            values.shape != expected || v.shape.empty() || n.attrs.ints.size() != 2 ||
            n.attrs.ints[0] < 0 || n.attrs.ints[0] > 2 || n.dtype != values.dtype ||
            n.shape != values.shape)
          bad(at, "does not fit rows {} {} and values {} {} into the variable {} {}",
              dtype_name(rows.dtype), rows.shape, dtype_name(values.dtype), values.shape,
              dtype_name(v.dtype), v.shape);
        break;
      }
      case Node::Kind::primitive: {
        const Json& prim = field(j, "prim", at);
        const auto p = prim.is_string() ? prim_named(prim.get<std::string>()) : std::nullopt;
        if (!p)
          bad(at, "uses the primitive '{}', which this kiln does not have",
              prim.is_string() ? prim.get<std::string>() : prim.dump());
        n.prim = *p;
        const int arity = info(n.prim).arity;
        if (arity >= 0) inputs_exactly(static_cast<std::size_t>(arity));
        if (arity < 0 && n.inputs.empty()) bad(at, "needs inputs");
        break;
      }
      case Node::Kind::fused:
        n.program = program(field(j, "program", at), n, at + ".program");
        break;
      case Node::Kind::scan:
      case Node::Kind::while_loop:
      case Node::Kind::cond: {
        const Json& regions = field(j, "regions", at);
        if (!regions.is_array()) bad(at + ".regions", "must be a list");
        for (std::size_t r = 0; r < regions.size(); ++r)
          n.regions.push_back(graph(regions[r], fmt::format("{}.regions[{}]", at, r), depth + 1));
        check_control_flow(n, at);
        break;
      }
      case Node::Kind::output:
        inputs_exactly(1);
        if (!input(0).is_control_flow())
          bad(at, "reads node {}, which has no results", n.inputs[0]);
        if (n.index < 0 || static_cast<std::size_t>(n.index) >= results_of(input(0)))
          bad(at, "reads result {} of {}", n.index, results_of(input(0)));
        break;
    }
    for (std::int32_t in : n.inputs)
      if (n.kind != Node::Kind::output && g.nodes[static_cast<std::size_t>(in)].is_control_flow())
        bad(at, "reads control-flow node {} directly", in);
    return n;
  }
};

TensorSpec spec_of(const Node& n) {
  Shape shape = n.shape;
  for (std::int64_t& d : shape)
    if (is_dynamic_dim(d)) d = -1;
  return TensorSpec(shape, n.dtype);
}

}  // namespace

}  // namespace detail

LoadedFunction load_function(const std::filesystem::path& path) {
  using detail::fail;
  const std::string source = path.string();
  const std::string op(detail::load_op);
  const io::SafetensorsFile file(path);  // one parse of the header for metadata and tensors
  const io::Metadata& metadata = file.metadata();
  const auto meta = [&](const char* key) -> const std::string& {
    const auto it = metadata.find(key);
    if (it == metadata.end())
      fail(op, "{}: not a kiln export file (no \"{}\" in its metadata)", source, key);
    return it->second;
  };
  if (meta(detail::format_key) != detail::function_format)
    fail(op, "{}: not a kiln export file (its format is '{}')", source, meta(detail::format_key));
  const std::string& version_text = meta(detail::version_key);
  int version = 0;
  if (version_text.empty() || version_text.size() > 6 ||
      !std::all_of(version_text.begin(), version_text.end(), ::isdigit))
    fail(op, "{}: invalid format version '{}'", source, version_text);
  version = std::stoi(version_text);
  if (version > function_format_version)
    fail(op,
         "{}: written in export format version {}, by a newer kiln; this one reads versions 1 "
         "to {}",
         source, version, function_format_version);
  if (version < 1) fail(op, "{}: invalid format version {}", source, version);
  const std::string& text = meta(detail::graph_key);
  if (detail::graph_checksum(text) != meta(detail::checksum_key))
    fail(op, "{}: the graph does not match its checksum: the file was edited or damaged", source);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(op, "{}: the graph is not valid JSON: {}", source, e.what());
  }
  if (!doc.is_object() || !doc.contains("graph") || !doc.contains("variables") ||
      !doc["variables"].is_array() || !doc.contains("symbol_sources") ||
      !doc["symbol_sources"].is_array() || !doc.contains("name") || !doc["name"].is_string())
    fail(op, "{}: the graph text lacks its name, variables, symbol_sources or graph", source);

  const std::map<std::string, Tensor> tensors = file.load_all();
  auto impl = std::make_shared<LoadedFunction::Impl>();
  impl->source = source;
  // Variables: values from the file, created once the graph has been checked.
  std::vector<TensorSpec> variable_specs;
  std::vector<std::pair<std::string, bool>> variable_info;
  std::vector<Tensor> variable_values;
  for (std::size_t i = 0; i < doc["variables"].size(); ++i) {
    const nlohmann::json& v = doc["variables"][i];
    const std::string key = fmt::format("variables/{}", i);
    const auto it = tensors.find(key);
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string() ||
        !v.contains("trainable") || !v["trainable"].is_boolean() || it == tensors.end())
      fail(op, "{}: variable {} lacks its name, trainable flag or tensor '{}'", source, i, key);
    variable_info.emplace_back(v["name"].get<std::string>(), v["trainable"].get<bool>());
    variable_specs.emplace_back(it->second.shape(), it->second.dtype());
    variable_values.push_back(it->second);
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> symbol_sources;
  for (const nlohmann::json& s : doc["symbol_sources"]) {
    if (!s.is_array() || s.size() != 2 || !s[0].is_number_unsigned() ||
        !s[1].is_number_unsigned() || s[0].get<std::uint64_t>() > (1u << 20) ||
        s[1].get<std::uint64_t>() > 64)
      fail(op, "{}: symbol_sources must be [argument, dim] pairs", source);
    symbol_sources.emplace_back(s[0].get<std::uint32_t>(), s[1].get<std::uint32_t>());
  }
  detail::GraphReader reader(source, tensors, static_cast<std::int64_t>(symbol_sources.size()));
  const std::shared_ptr<detail::GraphData> graph = reader.root(doc["graph"], variable_specs);
  // Parameters in argument order; each symbol's source must be a dynamic dim of its argument.
  std::vector<const detail::Node*> parameters(graph->num_parameters);
  for (const detail::Node& n : graph->nodes)
    if (n.kind == detail::Node::Kind::parameter) parameters[static_cast<std::size_t>(n.index)] = &n;
  for (std::size_t s = 0; s < symbol_sources.size(); ++s) {
    const auto [t, d] = symbol_sources[s];
    if (t >= parameters.size() || d >= parameters[t]->shape.size() ||
        parameters[t]->shape[d] != dynamic_dim(static_cast<std::int64_t>(s)))
      fail(op, "{}: symbol_sources[{}] does not name a dynamic dim of an argument", source, s);
  }
  for (const auto& [name, tensor] : tensors)
    if (!reader.used_tensors.contains(name) && !name.starts_with("variables/"))
      fail(op, "{}: holds the tensor '{}', which the graph does not use", source, name);

  for (const detail::Node* p : parameters) impl->inputs.push_back(detail::spec_of(*p));
  for (std::int32_t o : graph->outputs)
    impl->outputs.push_back(detail::spec_of(graph->nodes[static_cast<std::size_t>(o)]));
  for (std::size_t i = 0; i < variable_values.size(); ++i) {
    Variable v = detail::create_variable(variable_values[i], variable_info[i].first,
                                         variable_info[i].second);
    graph->variables.push_back(v.impl());
    graph->variable_names.push_back(variable_info[i].first);
    impl->variables.push_back(std::move(v));
  }
  auto cf = std::make_shared<detail::ConcreteFunctionImpl>();
  if (symbol_sources.empty()) cf->executable = detail::build_executable(*graph);
  cf->graph = graph;
  cf->symbol_sources = std::move(symbol_sources);
  cf->name = doc["name"].get<std::string>();
  for (const Variable& v : impl->variables) cf->owned_variables.push_back(v.impl());
  cf->counted_bytes = graph->bytes() + cf->executable.bytes();
  detail::count_cached_function(1, static_cast<std::int64_t>(graph->nodes.size()),
                                cf->counted_bytes);
  impl->function = std::move(cf);
  return LoadedFunction(std::move(impl));
}

std::vector<Tensor> LoadedFunction::call(const std::vector<Tensor>& args) const {
  using detail::fail;
  const Impl& impl = *impl_;
  const std::string& name = impl.function->name;
  if (detail::active_trace() != nullptr)
    fail(name, "a loaded function cannot be called while a kiln::function is being traced");
  if (detail::any_tape_recording())
    fail(name, "a loaded function has no gradient; it cannot run while a GradientTape records");
  if (args.size() != impl.inputs.size())
    fail(name, "takes {} arguments, got {}", impl.inputs.size(), args.size());
  const detail::GraphData& g = *impl.function->graph;
  std::vector<std::int64_t> symbol(impl.function->symbol_sources.size(), -1);
  for (std::size_t s = 0; s < symbol.size(); ++s) {
    const auto [t, d] = impl.function->symbol_sources[s];
    if (args[t].defined() && args[t].ndim() > static_cast<std::int64_t>(d))
      symbol[s] = args[t].shape()[d];
  }
  std::vector<const Tensor*> pointers;
  for (const detail::Node& n : g.nodes) {
    if (n.kind != detail::Node::Kind::parameter) continue;
    const std::size_t i = static_cast<std::size_t>(n.index);
    const Tensor& a = args[i];
    const TensorSpec& spec = impl.inputs[i];
    if (!a.defined()) fail(name, "argument {} is an undefined tensor", i);
    if (a.impl()->is_symbolic()) fail(name, "argument {} is a symbolic tensor", i);
    bool fits = a.dtype() == spec.dtype && a.ndim() == static_cast<std::int64_t>(n.shape.size());
    for (std::size_t d = 0; fits && d < n.shape.size(); ++d) {
      const std::int64_t want = n.shape[d];
      fits = is_dynamic_dim(want)
                 ? a.shape()[d] == symbol[static_cast<std::size_t>(dynamic_dim_id(want))]
                 : a.shape()[d] == want;
    }
    if (!fits)
      fail(name,
           "argument {} must be {} {} (-1: any size, the same where the trace shared a dim); got "
           "{} {}",
           i, dtype_name(spec.dtype), spec.shape, dtype_name(a.dtype()), a.shape());
  }
  for (const Tensor& a : args) pointers.push_back(&a);
  std::vector<Tensor> outputs;
  const detail::ConcreteFunctionImpl& cf = *impl.function;
  if (cf.symbol_sources.empty()) {
    detail::run_executable(cf.executable, g, pointers, name, outputs);
  } else {
    const auto executable = cf.executable_for(pointers);
    detail::run_executable(*executable, g, pointers, name, outputs);
  }
  return outputs;
}

const std::string& LoadedFunction::name() const { return impl_->function->name; }
const std::vector<TensorSpec>& LoadedFunction::input_signature() const { return impl_->inputs; }
const std::vector<TensorSpec>& LoadedFunction::output_signature() const { return impl_->outputs; }
const std::vector<Variable>& LoadedFunction::variables() const { return impl_->variables; }

Variable LoadedFunction::variable(const std::string& name) const {
  std::vector<std::string> names;
  for (const Variable& v : impl_->variables) {
    if (v.name() == name) return v;
    names.push_back(v.name());
  }
  detail::fail(impl_->function->name, "has no variable '{}'; its variables are {}", name,
               fmt::join(names, ", "));
}

Graph LoadedFunction::graph() const { return Graph(impl_->function->graph); }

}  // namespace kiln

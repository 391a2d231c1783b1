// Graph IR printing and the two structural passes every concrete function runs: dead-code
// elimination and common-subexpression elimination.
#include "jit/graph.hpp"

#include <fmt/format.h>

#include <map>
#include <string>
#include <tuple>

#include "core/tensor_impl.hpp"
#include "kiln/format.hpp"

namespace kiln::detail {

namespace {

std::string value_name(std::int32_t id) { return fmt::format("%{}", id); }

std::string attrs_text(const Node& n) {
  std::vector<std::string> parts;
  const Attrs& a = n.attrs;
  switch (info(n.prim).family) {
    case Family::reduce:
      parts.push_back(fmt::format("axes={}", a.axes.to_string()));
      if (a.keepdims) parts.push_back("keepdims");
      if (n.prim == Prim::layer_norm || n.prim == Prim::rms_norm) {
        parts.push_back(fmt::format("epsilon={}", a.value));
        parts.push_back(fmt::format("ints=[{}]", fmt::join(a.ints, ",")));
      }
      break;
    case Family::movement:
      if (n.prim == Prim::transpose) parts.push_back(fmt::format("perm={}", a.axes.to_string()));
      if (n.prim == Prim::concat || n.prim == Prim::gather)
        parts.push_back(fmt::format("axis={}", a.axis));
      if (!a.ints.empty()) parts.push_back(fmt::format("ints=[{}]", fmt::join(a.ints, ",")));
      if (n.prim == Prim::pad) parts.push_back(fmt::format("value={}", a.value));
      if (n.prim == Prim::bitcast) parts.push_back(fmt::format("to={}", dtype_name(a.dtype)));
      break;
    case Family::window:
      parts.push_back(fmt::format("geometry=[{}]", fmt::join(a.ints, ",")));
      break;
    case Family::indexing:
      parts.push_back(fmt::format("axis={}", a.axis));
      if (!a.ints.empty()) parts.push_back(fmt::format("ints=[{}]", fmt::join(a.ints, ",")));
      break;
    default:
      if (n.prim == Prim::cast) parts.push_back(fmt::format("to={}", dtype_name(a.dtype)));
      break;
  }
  return parts.empty() ? "" : fmt::format("[{}]", fmt::join(parts, " "));
}

const char* control_flow_name(const Node& n) {
  switch (n.kind) {
    case Node::Kind::scan:
      return "scan";
    case Node::Kind::while_loop:
      return "while_loop";
    default:
      return "cond";
  }
}

const char* region_name(const Node& n, std::size_t r) {
  if (n.kind == Node::Kind::scan) return "body";
  if (n.kind == Node::Kind::while_loop) return r == 0 ? "cond" : "body";
  return r == 0 ? "true" : "false";
}

std::string node_text(const GraphData& g, std::int32_t id) {
  const Node& n = g.nodes[static_cast<std::size_t>(id)];
  const std::string type = fmt::format("{}{}", dtype_name(n.dtype), n.shape.to_string());
  std::vector<std::string> ins;
  for (auto i : n.inputs) ins.push_back(value_name(i));
  switch (n.kind) {
    case Node::Kind::parameter:
      return fmt::format("{}:{} = parameter {}", value_name(id), type, n.index);
    case Node::Kind::constant:
      return fmt::format("{}:{} = constant", value_name(id), type);
    case Node::Kind::variable:
      return fmt::format("{}:{} = read_variable '{}'", value_name(id), type,
                         g.variable_names[static_cast<std::size_t>(n.index)]);
    case Node::Kind::assign:
      return fmt::format("{}:{} = assign '{}' {}", value_name(id), type,
                         g.variable_names[static_cast<std::size_t>(n.index)], ins.front());
    case Node::Kind::assign_rows:
      return fmt::format("{}:{} = assign_rows[{}] '{}' {}", value_name(id), type,
                         n.attrs.ints[0] == 0   ? "add"
                         : n.attrs.ints[0] == 1 ? "update"
                                                : "sub",
                         g.variable_names[static_cast<std::size_t>(n.index)], fmt::join(ins, " "));
    case Node::Kind::fused:
      return fmt::format("{}:{} = fused[{}] {}", value_name(id), type, n.program->text,
                         fmt::join(ins, " "));
    case Node::Kind::output:
      return fmt::format("{}:{} = output {} {}", value_name(id), type, n.index, ins.front());
    case Node::Kind::scan:
    case Node::Kind::while_loop:
    case Node::Kind::cond: {
      std::string text = fmt::format("{} = {}[{}] {}", value_name(id), control_flow_name(n),
                                     fmt::join(n.attrs.ints, ","), fmt::join(ins, " "));
      for (std::size_t r = 0; r < n.regions.size(); ++r) {
        std::string body = n.regions[r]->to_string();
        std::string indented;
        for (char c : body) {
          indented += c;
          if (c == '\n') indented += "      ";
        }
        while (!indented.empty() && indented.back() == ' ') indented.pop_back();
        text += fmt::format("\n    {}: {}", region_name(n, r), indented);
        if (!text.empty() && text.back() == '\n') text.pop_back();
      }
      return text;
    }
    case Node::Kind::primitive:
      break;
  }
  return fmt::format("{}:{} = {}{} {}", value_name(id), type, name(n.prim), attrs_text(n),
                     fmt::join(ins, " "));
}

}  // namespace

std::string GraphData::to_string() const {
  std::string out = "{ lambda ";
  std::vector<std::string> params;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == Node::Kind::parameter)
      params.push_back(value_name(static_cast<std::int32_t>(i)));
  out += fmt::format("{} .\n", fmt::join(params, " "));
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind == Node::Kind::parameter) continue;
    out += "  " + node_text(*this, static_cast<std::int32_t>(i)) + "\n";
  }
  std::vector<std::string> outs;
  for (auto o : outputs) outs.push_back(value_name(o));
  out += fmt::format("  in ({}) }}\n", fmt::join(outs, ", "));
  return out;
}

std::string GraphData::to_dot() const {
  std::string out = "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    std::string label;
    std::string style;
    switch (n.kind) {
      case Node::Kind::parameter:
        label = fmt::format("parameter {}", n.index);
        style = ", shape=ellipse";
        break;
      case Node::Kind::constant:
        label = "constant";
        style = ", style=dashed";
        break;
      case Node::Kind::variable:
        label = fmt::format("variable {}", variable_names[static_cast<std::size_t>(n.index)]);
        style = ", shape=ellipse, style=filled, fillcolor=lightyellow";
        break;
      case Node::Kind::assign:
      case Node::Kind::assign_rows:
        label = fmt::format("{} {}", n.kind == Node::Kind::assign ? "assign" : "assign_rows",
                            variable_names[static_cast<std::size_t>(n.index)]);
        style = ", style=filled, fillcolor=mistyrose";
        break;
      case Node::Kind::primitive:
        label = std::string(name(n.prim)) + attrs_text(n);
        break;
      case Node::Kind::fused:
        label = fmt::format("fused\\n{}", n.program->text);
        style = ", style=filled, fillcolor=lightblue";
        break;
      case Node::Kind::output:
        label = fmt::format("output {}", n.index);
        style = ", shape=ellipse";
        break;
      case Node::Kind::scan:
      case Node::Kind::while_loop:
      case Node::Kind::cond: {
        std::size_t body_nodes = 0;
        for (const auto& r : n.regions) body_nodes += r->nodes.size();
        label = fmt::format("{}\\n{} region nodes", control_flow_name(n), body_nodes);
        style = ", style=filled, fillcolor=palegreen";
        break;
      }
    }
    out += fmt::format("  n{} [label=\"%{} {}\\n{}{}\"{}];\n", i, i, label, dtype_name(n.dtype),
                       n.shape.to_string(), style);
    for (auto in : n.inputs) out += fmt::format("  n{} -> n{};\n", in, i);
  }
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    out += fmt::format("  out{} [label=\"output {}\", shape=ellipse];\n  n{} -> out{};\n", k, k,
                       outputs[k], k);
  }
  out += "}\n";
  return out;
}

std::int64_t GraphData::bytes() const {
  std::int64_t total =
      static_cast<std::int64_t>(sizeof(GraphData) + nodes.capacity() * sizeof(Node));
  for (const Node& n : nodes) {
    total += static_cast<std::int64_t>(n.inputs.capacity() * sizeof(std::int32_t) +
                                       n.attrs.ints.capacity() * sizeof(std::int64_t));
    if (n.program)
      total += static_cast<std::int64_t>(sizeof(FusedProgram) +
                                         n.program->ops.capacity() * sizeof(FusedOp) +
                                         n.program->text.capacity());
    if (n.kind == Node::Kind::constant && n.constant.defined())
      total += n.constant.size() * static_cast<std::int64_t>(dtype_size(n.constant.dtype()));
    for (const auto& r : n.regions) total += r->bytes();
  }
  return total;
}

namespace {

/// Keeps the nodes marked in `keep` (in order), renumbering inputs, outputs and side effects.
void compact(GraphData& g, const std::vector<std::int32_t>& replacement,
             const std::vector<bool>& keep) {
  std::vector<std::int32_t> new_id(g.nodes.size(), -1);
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) continue;
    new_id[i] = static_cast<std::int32_t>(kept.size());
    kept.push_back(std::move(g.nodes[i]));
  }
  auto map = [&](std::int32_t id) {
    return new_id[static_cast<std::size_t>(replacement[static_cast<std::size_t>(id)])];
  };
  for (Node& n : kept)
    for (auto& in : n.inputs) in = map(in);
  for (auto& o : g.outputs) o = map(o);
  for (auto& s : g.side_effects) s = map(s);
  g.nodes = std::move(kept);
}

std::vector<std::int32_t> identity(std::size_t n) {
  std::vector<std::int32_t> r(n);
  for (std::size_t i = 0; i < n; ++i) r[i] = static_cast<std::int32_t>(i);
  return r;
}

}  // namespace

void replace_uses(GraphData& g, const std::vector<std::int32_t>& replacement) {
  const auto resolve = [&](std::int32_t id) {
    while (replacement[static_cast<std::size_t>(id)] != id)
      id = replacement[static_cast<std::size_t>(id)];
    return id;
  };
  for (Node& n : g.nodes)
    for (auto& in : n.inputs) in = resolve(in);
  for (auto& o : g.outputs) o = resolve(o);
  for (auto& s : g.side_effects) s = resolve(s);
  eliminate_dead_code(g);
}

std::size_t eliminate_dead_code(GraphData& g) {
  std::vector<bool> live(g.nodes.size(), false);
  std::vector<std::int32_t> stack(g.outputs.begin(), g.outputs.end());
  stack.insert(stack.end(), g.side_effects.begin(), g.side_effects.end());
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == Node::Kind::parameter) live[i] = true;  // the signature stays intact
  while (!stack.empty()) {
    const auto id = static_cast<std::size_t>(stack.back());
    stack.pop_back();
    if (live[id] && g.nodes[id].kind != Node::Kind::parameter) continue;
    live[id] = true;
    for (auto in : g.nodes[id].inputs)
      if (!live[static_cast<std::size_t>(in)]) stack.push_back(in);
  }
  std::size_t removed = 0;
  for (bool l : live) removed += l ? 0 : 1;
  if (removed > 0) compact(g, identity(g.nodes.size()), live);
  return removed;
}

namespace {

/// Constants of at most this many elements are merged when their bytes are equal.
constexpr std::int64_t max_constant_merged_by_value = 16;

}  // namespace

std::size_t eliminate_common_subexpressions(GraphData& g) {
  using Key = std::tuple<int, int, std::vector<std::int32_t>, std::vector<std::int64_t>,
                         std::vector<std::int64_t>, std::int64_t, bool, int, double, int,
                         std::vector<std::int64_t>, const void*, std::string, std::int32_t>;
  std::map<Key, std::int32_t> seen;
  std::vector<std::int32_t> replacement = identity(g.nodes.size());
  std::vector<bool> keep(g.nodes.size(), true);
  std::size_t merged = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (auto& in : n.inputs) in = replacement[static_cast<std::size_t>(in)];
    if (n.kind == Node::Kind::parameter || n.kind == Node::Kind::assign ||
        n.kind == Node::Kind::assign_rows || n.kind == Node::Kind::fused || n.is_control_flow() ||
        (n.kind == Node::Kind::primitive && is_collective(n.prim)))
      continue;
    const Attrs& a = n.attrs;
    // A small constant is known by its bytes, so that each use of a literal (Adam's beta1 in
    // each variable's update) is one node; larger ones by their tensor.
    std::string small;
    if (n.kind == Node::Kind::constant && n.constant.impl()->is_contiguous() &&
        n.constant.impl()->shape.numel() <= max_constant_merged_by_value) {
      const TensorImpl& c = *n.constant.impl();
      small.assign(c.data(), static_cast<std::size_t>(c.shape.numel()) * dtype_size(c.dtype));
      small.push_back('v');  // never empty: an empty tensor's key differs from "by tensor"
    }
    Key key{static_cast<int>(n.kind),
            static_cast<int>(n.prim),
            n.inputs,
            a.axes.to_vector(),
            n.shape.to_vector(),
            a.axis,
            a.keepdims,
            static_cast<int>(a.dtype),
            a.value,
            static_cast<int>(n.dtype),
            a.ints,
            n.kind == Node::Kind::constant && small.empty() ? n.constant.impl().get() : nullptr,
            std::move(small),
            n.kind == Node::Kind::variable || n.kind == Node::Kind::output ? n.index : -1};
    auto [it, inserted] = seen.emplace(std::move(key), static_cast<std::int32_t>(i));
    if (!inserted) {
      replacement[i] = it->second;
      keep[i] = false;
      ++merged;
    }
  }
  for (auto& o : g.outputs) o = replacement[static_cast<std::size_t>(o)];
  for (auto& s : g.side_effects) s = replacement[static_cast<std::size_t>(s)];
  if (merged > 0) compact(g, identity(g.nodes.size()), keep);
  return merged;
}

}  // namespace kiln::detail

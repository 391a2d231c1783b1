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

#include <map>

#include "io/atomic_file.hpp"
#include "jit/onnx_writer.hpp"
#endif

namespace kiln {

#if KILN_HAVE_ONNX

namespace detail::onnx_writing {

/// An LSTM or GRU recurrence as an ONNX Scan whose body is the step's math (so every step's
/// state, and the saved gates where the graph has them, come out as kiln's y does).
std::string OnnxWriter::recurrence(const Node& n, const std::vector<std::string>& x,
                                   const GraphData& g) {
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
  // A recurrence with its input kernel (input 5) scans the raw inputs and projects each step.
  const bool projects = n.inputs.size() == 6;
  const bool batch_major = projects && !n.attrs.ints.empty() && n.attrs.ints[0] == 1;
  const std::int64_t step_columns =
      projects ? g.nodes[static_cast<std::size_t>(n.inputs[0])].shape[2] : gates * units;
  const std::string step_in =
      body_input(fresh(projects ? "x" : "xp"), {batch_units[0], step_columns});
  const std::string xp = projects ? body_op("MatMul", {step_in, x[5]}) : step_in;
  const auto split = [&](const std::string& v) {
    std::vector<std::string> parts;
    for (std::int64_t k = 0; k < gates; ++k) parts.push_back(fresh("gate"));
    attr(emit(body, "Split", {v, ints(std::vector<std::int64_t>(gates, units))}, parts), "axis", 1);
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
  if (batch_major) attr(scan, "scan_input_axes", std::vector<std::int64_t>{1});
  return y;
}

/// A kiln::scan as an ONNX Scan: carries are its states, xs its scan inputs (both read
/// backwards for a reversed scan, whose ys are then written backwards too, so y t still
/// belongs to x t), and captures the outer values the body reads by name. Without xs, a
/// dummy scan input of the step count drives it.
std::vector<std::string> OnnxWriter::scan(const GraphData& g, const Node& n,
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

std::string OnnxWriter::node(const GraphData& g, const Node& n) {
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
    const DType in = n.inputs.empty()        ? n.dtype
                     : n.prim == Prim::where ? g.nodes[static_cast<std::size_t>(n.inputs[1])].dtype
                                             : g.nodes[static_cast<std::size_t>(n.inputs[0])].dtype;
    return elementwise(n.prim, in, n.prim == Prim::cast ? n.attrs.dtype : n.dtype, x);
  }
  switch (p.family) {
    case detail::Family::reduce:
      if (n.prim == Prim::layer_norm || n.prim == Prim::rms_norm)
        return normalization(n, x, g.nodes[static_cast<std::size_t>(n.inputs[0])]);
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

}  // namespace detail::onnx_writing

using detail::onnx_writing::ModelState;
using detail::onnx_writing::onnx_op;
using detail::onnx_writing::OnnxWriter;

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

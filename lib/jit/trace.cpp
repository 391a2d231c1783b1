#include "jit/trace.hpp"

#include <algorithm>
#include <atomic>

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/sparse.hpp"
#include "kiln/variable.hpp"
#include "ops/rows.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

namespace {
std::atomic<std::uint64_t> next_trace_id{1};
}  // namespace

TraceScope::TraceScope(TraceContext* trace)
    : previous_(static_cast<TraceContext*>(set_active_trace(trace))) {}
TraceScope::~TraceScope() { set_active_trace(previous_); }

TraceContext::TraceContext(std::string function_name, bool allow_variable_creation)
    : id_(next_trace_id.fetch_add(1)),
      function_name_(std::move(function_name)),
      allow_variable_creation_(allow_variable_creation) {}

TraceContext::TraceContext(TraceContext& parent)
    : parent_(&parent),
      id_(next_trace_id.fetch_add(1)),
      function_name_(parent.function_name_),
      allow_variable_creation_(parent.allow_variable_creation_),
      num_symbols_(parent.num_symbols_) {}

TraceContext::~TraceContext() {
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
  for (auto it = claimed_.rbegin(); it != claimed_.rend(); ++it)
    release_provisional(**it, /*succeeded*/ false);
}

void TraceContext::commit() {
  undo_.clear();
  for (VariableImpl* v : claimed_) release_provisional(*v, /*succeeded*/ true);
  claimed_.clear();
}

void TraceContext::add_created_variable(const std::shared_ptr<VariableImpl>& v) {
  if (parent_) {
    outermost().add_created_variable(v);
    return;
  }
  mark_provisional(*v);
  owned_.push_back(v);
  claimed_.push_back(v.get());
}

std::int32_t TraceContext::add_node(Node n) {
  graph_.nodes.push_back(std::move(n));
  return static_cast<std::int32_t>(graph_.nodes.size() - 1);
}

Tensor TraceContext::symbolic(std::int32_t node) {
  const Node& n = graph_.nodes[static_cast<std::size_t>(node)];
  auto impl = std::allocate_shared<TensorImpl>(CachedAllocator<TensorImpl>{}, n.dtype, n.shape,
                                               contiguous_strides(n.shape), 0, nullptr);
  impl->trace_id = id_;
  impl->node = node;
  return Tensor(std::move(impl));
}

Tensor TraceContext::add_parameter(DType dtype, const Shape& shape, std::int32_t index) {
  Node n;
  n.kind = Node::Kind::parameter;
  n.dtype = dtype;
  n.shape = shape;
  n.index = index;
  ++graph_.num_parameters;
  return symbolic(add_node(std::move(n)));
}

std::int32_t TraceContext::capture(const Tensor& outer, const char* what) {
  const TensorImpl& impl = *outer.impl();
  if (impl.trace_id == id_) return impl.node;
  if (!impl.is_symbolic()) return node_of(outer, what);  // an eager tensor: a constant
  if (parent_ == nullptr)
    fail(function_name_,
         "{} is a symbolic tensor of another trace (a tensor from inside a traced function or a "
         "loop or branch body escaped it, e.g. into a global or a captured variable); return it "
         "from that function or body instead",
         what);
  // The parent's node for it (captured there first if it is from further out).
  const bool from_parent = impl.trace_id == parent_->id_;
  const std::int32_t in_parent = from_parent ? impl.node : parent_->capture(outer, what);
  if (auto it = captured_.find(in_parent); it != captured_.end()) return it->second;
  Node n;
  n.kind = Node::Kind::parameter;
  n.dtype = impl.dtype;
  n.shape = impl.shape;
  n.index = static_cast<std::int32_t>(graph_.num_parameters++);
  const std::int32_t id = add_node(std::move(n));
  captured_.emplace(in_parent, id);
  captures_.push_back(from_parent ? outer : parent_->symbolic(in_parent));
  return id;
}

Tensor TraceContext::captured(const Tensor& outer, const char* what) {
  const std::int32_t node = capture(outer, what);
  Tensor& t = capture_tensors_[node];
  if (!t.defined()) t = symbolic(node);
  return t;
}

std::vector<Tensor> TraceContext::add_control_flow(Node node, const std::vector<DType>& dtypes,
                                                   const std::vector<Shape>& shapes) {
  node.dtype = DType::boolean;  // a control-flow node's own type means nothing
  node.shape = Shape{};
  const std::int32_t id = add_node(std::move(node));
  std::vector<Tensor> results;
  for (std::size_t k = 0; k < dtypes.size(); ++k) {
    Node out;
    out.kind = Node::Kind::output;
    out.dtype = dtypes[k];
    out.shape = shapes[k];
    out.index = static_cast<std::int32_t>(k);
    out.inputs = {id};
    results.push_back(symbolic(add_node(std::move(out))));
  }
  return results;
}

std::int32_t TraceContext::node_of(const Tensor& t, const char* what) {
  if (t.impl()->is_slices()) return node_of(to_dense(t), what);  // a graph value is dense
  const TensorImpl& impl = *t.impl();
  if (impl.is_symbolic()) {
    if (impl.trace_id != id_ && parent_ != nullptr) return capture(t, what);
    if (impl.trace_id != id_)
      fail(function_name_,
           "{} is a symbolic tensor of another trace (a tensor from inside a traced function "
           "escaped it, e.g. into a global or a captured variable); return it from that function "
           "instead",
           what);
    return impl.node;
  }
  if (parent_ != nullptr && outermost().lift_constants_ && is_floating(impl.dtype)) {
    TraceContext& top = outermost();
    return capture(top.symbolic(top.node_of(t, what)), what);
  }
  // An eager tensor used while tracing is captured by value: a constant of the graph.
  auto it = constants_.find(&impl);
  if (it != constants_.end()) return it->second;
  Node n;
  n.kind = Node::Kind::constant;
  n.dtype = impl.dtype;
  n.shape = impl.shape;
  n.constant = t.contiguous();
  const std::int32_t id = add_node(std::move(n));
  constants_.emplace(&impl, id);
  return id;
}

Tensor TraceContext::record_op(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                               DType dtype, const Shape& shape) {
  for (auto d : shape) {
    if (d >= 0) continue;
    const std::int64_t symbol = dynamic_dim_id(d);
    if (symbol < 0 || symbol >= num_symbols_)
      fail(name(p),
           "output shape {} has a dimension computed from a dynamic dim (arithmetic on dynamic "
           "dims is not supported; use reshape with -1 or a static size)",
           shape);
  }
  Node n;
  n.kind = Node::Kind::primitive;
  n.prim = p;
  n.attrs = attrs;
  n.dtype = dtype;
  n.shape = shape;
  n.inputs.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = fmt::format("input {} of {}", i, name(p));
    n.inputs.push_back(node_of(*inputs[i], what.c_str()));
  }
  return symbolic(add_node(std::move(n)));
}

std::int32_t TraceContext::variable_slot(const std::shared_ptr<VariableImpl>& v) {
  auto it = slots_.find(v.get());
  if (it != slots_.end()) return it->second;
  // A variable another unfinished trace created: this trace's success must keep it.
  if (v->provisional.load(std::memory_order_acquire) &&
      std::find(claimed_.begin(), claimed_.end(), v.get()) == claimed_.end() &&
      claim_provisional(*v)) {
    owned_.push_back(v);
    claimed_.push_back(v.get());
  }
  const auto slot = static_cast<std::int32_t>(graph_.variables.size());
  graph_.variables.push_back(v);
  graph_.variable_names.push_back(v->name);
  current_value_.push_back(-1);
  current_tensor_.emplace_back();
  pending_rows_.emplace_back();
  slots_.emplace(v.get(), slot);
  return slot;
}

Tensor TraceContext::variable_alias(const std::shared_ptr<VariableImpl>& v) {
  Tensor alias = symbolic(node_of(read_variable(v), "a variable's value"));
  if (any_tape_recording()) tape_hooks.note_variable_read(Variable(v), alias);
  return alias;
}

TraceContext::RegionVariable& TraceContext::region_variable(
    const std::shared_ptr<VariableImpl>& v) {
  for (auto& r : region_variables_)
    if (r.variable == v) return r;
  RegionVariable r;
  r.variable = v;
  region_variables_.push_back(std::move(r));
  return region_variables_.back();
}

Tensor TraceContext::read_variable(const std::shared_ptr<VariableImpl>& v) {
  if (parent_) {
    // A parameter standing for the value on entry, bound to an alias of the enclosing trace's
    // value. Tapes see the alias as a read of v too, so a gradient with respect to v reaches
    // the control-flow node that takes it.
    RegionVariable& r = region_variable(v);
    if (r.current.defined()) return r.current;
    Tensor outer = parent_->variable_alias(v);
    Node n;
    n.kind = Node::Kind::parameter;
    n.dtype = v->dtype;
    n.shape = v->shape;
    n.index = static_cast<std::int32_t>(graph_.num_parameters++);
    r.entry = add_node(std::move(n));
    r.entry_capture = captures_.size();
    captures_.push_back(std::move(outer));
    r.current = symbolic(r.entry);
    return r.current;
  }
  const std::int32_t slot = variable_slot(v);
  auto& cur = current_value_[static_cast<std::size_t>(slot)];
  if (cur < 0) {
    Node n;
    n.kind = Node::Kind::variable;
    n.dtype = v->dtype;
    n.shape = v->shape;
    n.index = slot;
    cur = add_node(std::move(n));
  }
  Tensor& tensor = current_tensor_[static_cast<std::size_t>(slot)];
  if (!tensor.defined()) tensor = symbolic(cur);
  auto& pending = pending_rows_[static_cast<std::size_t>(slot)];
  if (!pending.empty()) {
    // The value after the row updates recorded since: a copy with those rows changed. Tapes
    // see it as a fresh read of v (gradients do not flow back through the updates).
    PauseAllTapes pause;
    Tensor updated = tensor;
    for (const RowUpdate& u : pending)
      updated =
          scatter_rows(updated, u.rows, u.values, static_cast<detail::RowUpdate>(u.mode), u.padded);
    pending.clear();
    tensor = updated;
  }
  return tensor;
}

void TraceContext::update_variable_rows(const std::shared_ptr<VariableImpl>& v, const Tensor& rows,
                                        const Tensor& values, std::int64_t mode, bool padded) {
  const auto functional = [&] {
    Tensor base;
    {
      PauseAllTapes pause;
      base = read_variable(v);
    }
    assign_variable(v,
                    scatter_rows(base, rows, values, static_cast<detail::RowUpdate>(mode), padded));
  };
  if (parent_) return functional();
  const std::int32_t slot = variable_slot(v);
  const std::int32_t cur = current_value_[static_cast<std::size_t>(slot)];
  if (cur >= 0 && graph_.nodes[static_cast<std::size_t>(cur)].kind == Node::Kind::assign)
    return functional();
  Node n;
  n.kind = Node::Kind::assign_rows;
  n.dtype = values.dtype();
  n.shape = values.shape();
  n.index = slot;
  n.attrs.ints = {mode, padded ? 1 : 0};
  n.inputs.push_back(node_of(rows, "the rows updated"));
  n.inputs.push_back(node_of(values, "the values of the rows updated"));
  graph_.side_effects.push_back(add_node(std::move(n)));
  pending_rows_[static_cast<std::size_t>(slot)].push_back(RowUpdate{rows, values, mode, padded});
}

void TraceContext::assign_variable(const std::shared_ptr<VariableImpl>& v, const Tensor& value) {
  if (parent_) {
    RegionVariable& r = region_variable(v);
    r.current = value;
    r.assigned = true;
    return;
  }
  const std::int32_t slot = variable_slot(v);
  Node n;
  n.kind = Node::Kind::assign;
  n.dtype = v->dtype;
  n.shape = v->shape;
  n.index = slot;
  n.inputs.push_back(node_of(value, "the assigned value"));
  const std::int32_t id = add_node(std::move(n));
  graph_.side_effects.push_back(id);
  current_value_[static_cast<std::size_t>(slot)] = id;
  pending_rows_[static_cast<std::size_t>(slot)].clear();
  // Reads from now on return the assigned tensor itself, as eagerly (where the variable then
  // holds that tensor): a gradient tape follows a read after an assignment back to the value.
  current_tensor_[static_cast<std::size_t>(slot)] = value;
}

}  // namespace kiln::detail

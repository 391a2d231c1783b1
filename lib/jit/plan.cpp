#include "jit/plan.hpp"

#include <algorithm>
#include <array>
#include <new>
#include <type_traits>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "jit/memory_plan.hpp"
#include "kernels/fused_loop.hpp"
#include "kernels/lowering.hpp"
#include "kernels/rows.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

namespace {

class PlanBuilder {
 public:
  PlanBuilder(const GraphData& g, const std::vector<Shape>* shapes,
              const std::vector<std::int64_t>* dim_values)
      : g_(g), shapes_(shapes), dim_values_(dim_values) {}

  Plan build() {
    plan_.values.resize(g_.nodes.size());
    copies_.assign(g_.nodes.size(), -1);
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) add_node(static_cast<std::int32_t>(i));
    mark_escapes();
    fuse_matmul_epilogues(plan_);
    fold_sgd_updates(plan_, g_);
    update_variables_in_place(plan_, g_);
    lay_out_fused_steps();
    group_elementwise_steps(plan_);
    keep_kernel_memos(plan_, g_);
    mark_escape_allocations();
    place_in_arena();
    mark_moved_outputs();
    mark_released_variables();
    return std::move(plan_);
  }

 private:
  const Shape& shape_of(std::int32_t id) const {
    return shapes_ ? (*shapes_)[static_cast<std::size_t>(id)]
                   : g_.nodes[static_cast<std::size_t>(id)].shape;
  }

  std::int32_t add_root(Plan::Root::Kind kind, std::int32_t index, DType dtype,
                        const Shape& shape) {
    plan_.roots.push_back(Plan::Root{kind, index, dtype, shape, 0, {}, 0});
    return static_cast<std::int32_t>(plan_.roots.size() - 1);
  }

  /// A value with a fresh contiguous buffer of its own (computed by a step).
  Plan::Value fresh_value(DType dtype, const Shape& shape) {
    return Plan::Value{add_root(Plan::Root::Kind::arena, -1, dtype, shape), 0, dtype, shape,
                       contiguous_strides(shape)};
  }

  ArrayRef layout(std::int32_t value) const { return plan_.layout_of(value); }

  /// The value a kernel reads for node input `id`: the value itself when contiguous, else a
  /// contiguous copy made once (by a copy step) and shared by every later reader.
  std::int32_t contiguous_input(std::int32_t id) {
    const Plan::Value& v = plan_.values[static_cast<std::size_t>(id)];
    if (is_contiguous_layout(v.shape, v.strides)) return id;
    auto& copy = copies_[static_cast<std::size_t>(id)];
    if (copy >= 0) return copy;
    plan_.values.push_back(fresh_value(v.dtype, v.shape));
    copy = static_cast<std::int32_t>(plan_.values.size() - 1);
    Plan::Step step;
    step.kind = Plan::Step::Kind::copy;
    step.node = id;
    step.values = {id, copy};
    step.refs = {layout(id), layout(copy)};
    plan_.steps.push_back(std::move(step));
    return copy;
  }

  void add_node(std::int32_t id) {
    const Node& node = g_.nodes[static_cast<std::size_t>(id)];
    const Shape& shape = shape_of(id);
    Plan::Value& value = plan_.values[static_cast<std::size_t>(id)];
    switch (node.kind) {
      case Node::Kind::parameter:
        value = Plan::Value{add_root(Plan::Root::Kind::argument, node.index, node.dtype, shape), 0,
                            node.dtype, shape, contiguous_strides(shape)};
        return;
      case Node::Kind::constant:
        value = Plan::Value{add_root(Plan::Root::Kind::constant, id, node.dtype, shape), 0,
                            node.dtype, shape, node.constant.impl()->strides};
        return;
      case Node::Kind::variable:
        value = Plan::Value{add_root(Plan::Root::Kind::variable, node.index, node.dtype, shape), 0,
                            node.dtype, shape, contiguous_strides(shape)};
        return;
      case Node::Kind::assign:
        value = plan_.values[static_cast<std::size_t>(node.inputs[0])];
        return;
      case Node::Kind::assign_rows:  // run when the call ends, from its values
        value = plan_.values[static_cast<std::size_t>(node.inputs[1])];
        plan_.updates_rows = true;
        return;
      case Node::Kind::fused:
        add_fused(id, node, shape);
        return;
      case Node::Kind::primitive:
        add_primitive(id, node, shape);
        return;
      case Node::Kind::scan:
      case Node::Kind::while_loop:
      case Node::Kind::cond:
        add_control_flow(id, node);
        return;
      case Node::Kind::output:
        add_control_flow_result(id, node, shape);
        return;
    }
  }

  /// A region step: the node's inputs now; its results are added by the output nodes.
  void add_control_flow(std::int32_t id, const Node& node) {
    Plan::Step step;
    step.kind = Plan::Step::Kind::region;
    step.node = id;
    step.values = node.inputs;
    step.num_inputs = static_cast<std::int32_t>(node.inputs.size());
    for (const auto& region : node.regions) {
      if (dim_values_ == nullptr) {
        step.region_plans.push_back(std::make_shared<const Plan>(build_plan(*region)));
      } else {
        const std::vector<Shape> shapes = bind_shapes(*region, *dim_values_);
        step.region_plans.push_back(
            std::make_shared<const Plan>(build_plan(*region, &shapes, dim_values_)));
      }
    }
    region_step_.resize(g_.nodes.size(), -1);
    region_step_[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(plan_.steps.size());
    plan_.steps.push_back(std::move(step));
  }

  /// Result `node.index` of a control-flow node: a buffer of its own that the step writes (in
  /// the arena, placed by the memory planner like any step's output, unless it escapes).
  void add_control_flow_result(std::int32_t id, const Node& node, const Shape& shape) {
    plan_.values[static_cast<std::size_t>(id)] = fresh_value(node.dtype, shape);
    Plan::Step& step = plan_.steps[static_cast<std::size_t>(
        region_step_[static_cast<std::size_t>(node.inputs[0])])];
    step.values.push_back(id);
    step.result_index.push_back(node.index);
  }

  void add_fused(std::int32_t id, const Node& node, const Shape& shape) {
    plan_.values[static_cast<std::size_t>(id)] = fresh_value(node.dtype, shape);
    Plan::Step step;
    step.kind = Plan::Step::Kind::fused;
    step.node = id;
    step.program = node.program.get();
    for (auto in : node.inputs) {
      step.values.push_back(in);
      step.refs.push_back(plan_.broadcast_layout_of(in, shape));
    }
    step.values.push_back(id);
    step.refs.push_back(layout(id));
    plan_.steps.push_back(std::move(step));
  }

  /// The plan builder as a lowering target (see kernels/lowering.hpp): each decision becomes
  /// a value layout or a step.
  class PrimitiveTarget {
   public:
    PrimitiveTarget(PlanBuilder& b, std::int32_t id, const Node& node, const Shape& shape)
        : b_(b), id_(id), node_(node), shape_(shape), inputs_(node.inputs) {}

    std::size_t num_inputs() const { return inputs_.size(); }
    InputLayout input(std::size_t i) const {
      const Plan::Value& v = b_.plan_.values[static_cast<std::size_t>(inputs_[i])];
      return InputLayout{v.dtype, &v.shape, &v.strides, v.offset};
    }
    void view(const ViewLayout& layout) {
      const Plan::Value in = b_.plan_.values[static_cast<std::size_t>(inputs_[0])];
      b_.plan_.values[static_cast<std::size_t>(id_)] =
          Plan::Value{in.root, layout.offset, node_.dtype, shape_, layout.strides};
    }
    void flat(const FlatCall& call) {
      Plan::Step step = start_step(Plan::Step::Kind::flat);
      step.flat = call;
      b_.plan_.steps.push_back(std::move(step));
    }
    void make_contiguous(std::size_t i) { inputs_[i] = b_.contiguous_input(inputs_[i]); }
    void kernel() {
      Plan::Step step = start_step(Plan::Step::Kind::kernel);
      const Prim p = node_.prim;
      step.fn = kernel_for(p);
      step.attrs = &node_.attrs;
      for (std::size_t i = 0; i < inputs_.size(); ++i)
        step.refs.push_back(kernel_input_ref(p, nullptr, input(i), shape_));
      step.refs.push_back(b_.layout(id_));
      if (p == Prim::matmul) step.matmul = plan_matmul(step.refs[0], step.refs[1], step.refs[2]);
      b_.plan_.steps.push_back(std::move(step));
    }

   private:
    /// A step writing a fresh buffer for the node from the inputs as they are now.
    Plan::Step start_step(Plan::Step::Kind kind) {
      b_.plan_.values[static_cast<std::size_t>(id_)] = b_.fresh_value(node_.dtype, shape_);
      Plan::Step step;
      step.kind = kind;
      step.prim = node_.prim;
      step.node = id_;
      step.values = inputs_;
      step.values.push_back(id_);
      return step;
    }

    PlanBuilder& b_;
    std::int32_t id_;
    const Node& node_;
    const Shape& shape_;
    std::vector<std::int32_t> inputs_;  // the value each input is read from (copies replace)
  };

  void add_primitive(std::int32_t id, const Node& node, const Shape& shape) {
    PrimitiveTarget target(*this, id, node, shape);
    lower(node.prim, node.attrs, node.dtype, shape, target);
  }

  /// Buffers behind outputs and assigned values are allocated per call, outside the arena, so
  /// what the caller (or a variable) keeps never aliases memory a later call reuses.
  void mark_escapes() {
    const auto escape = [&](std::int32_t id) {
      Plan::Root& root =
          plan_.roots[static_cast<std::size_t>(plan_.values[static_cast<std::size_t>(id)].root)];
      if (root.kind == Plan::Root::Kind::arena) root.kind = Plan::Root::Kind::escape;
    };
    for (auto o : g_.outputs) escape(o);
    // (A row update's inputs stay in the arena: place_in_arena keeps them to the end.)
    for (auto s : g_.side_effects)
      if (g_.nodes[static_cast<std::size_t>(s)].kind != Node::Kind::assign_rows) escape(s);
  }

  void mark_escape_allocations() {
    // Each escape buffer is allocated when the first step that writes it runs (a matmul
    // epilogue has several), not at the start of the call, so it does not add to the peak while
    // earlier steps run.
    std::vector<bool> allocated(plan_.roots.size(), false);
    const auto size_escape = [](Plan::Root& root) {
      root.strides = contiguous_strides(root.shape);
      root.bytes = root.shape.numel() * static_cast<std::int64_t>(dtype_size(root.dtype));
    };
    for (Plan::Step& step : plan_.steps) {
      if (step.kind == Plan::Step::Kind::region) {  // allocates its escaping results itself
        for (std::size_t i = static_cast<std::size_t>(step.num_inputs); i < step.values.size();
             ++i) {
          const std::size_t r = root_of(step.values[i]);
          if (plan_.roots[r].kind == Plan::Root::Kind::escape) size_escape(plan_.roots[r]);
          allocated[r] = true;
        }
        continue;
      }
      const std::size_t r = root_of(step.values.back());
      Plan::Root& root = plan_.roots[r];
      if (root.kind == Plan::Root::Kind::escape && !allocated[r]) {
        step.allocate_escape = static_cast<std::int32_t>(r);
        allocated[r] = true;
        size_escape(root);
      }
    }
  }

  /// An output that is a whole escape buffer, read by no later output, takes the buffer's
  /// tensor at the end of the call (a move, not a shared reference).
  void mark_moved_outputs() {
    const auto& outputs = g_.outputs;
    plan_.moved_outputs.assign(outputs.size(), 0);
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const Plan::Value& v = plan_.values[static_cast<std::size_t>(outputs[i])];
      const Plan::Root& root = plan_.roots[static_cast<std::size_t>(v.root)];
      if (root.kind != Plan::Root::Kind::escape || v.offset != 0 || v.shape != root.shape ||
          !is_contiguous_layout(v.shape, v.strides))
        continue;
      const bool read_later = std::any_of(
          outputs.begin() + static_cast<std::ptrdiff_t>(i) + 1, outputs.end(),
          [&](std::int32_t o) { return plan_.values[static_cast<std::size_t>(o)].root == v.root; });
      plan_.moved_outputs[i] = read_later ? 0 : 1;
    }
  }

  /// Arena offsets from the memory planner (jit/memory_plan.hpp): every arena root is one of
  /// its buffers, every step one of its steps, and an elementwise step lists as donors the
  /// arena inputs it could overwrite in place (in_place_donors); the planner decides from the
  /// lifetimes which one it does.
  void place_in_arena() {
    const std::size_t num_roots = plan_.roots.size();
    std::vector<std::int32_t> buffer_of(num_roots, -1);  // root -> buffer, -1 outside the arena
    std::vector<std::int64_t> buffer_bytes;
    for (std::size_t r = 0; r < num_roots; ++r) {
      const Plan::Root& root = plan_.roots[r];
      if (root.kind != Plan::Root::Kind::arena) continue;
      buffer_of[r] = static_cast<std::int32_t>(buffer_bytes.size());
      buffer_bytes.push_back(root.shape.numel() *
                             static_cast<std::int64_t>(dtype_size(root.dtype)));
    }
    std::vector<BufferStep> steps;
    steps.reserve(plan_.steps.size());
    for (std::size_t s = 0; s < plan_.steps.size(); ++s) {
      const Plan::Step& step = plan_.steps[s];
      if (step.group_size > 0) {
        // A group writes its outputs while it reads its inputs (one loop, or chunk by chunk):
        // like a region's results, each output is written by a buffer step that reads every
        // input of the group and the outputs before it, so none shares memory with another.
        const auto end = s + static_cast<std::size_t>(step.group_size);
        BufferStep reads;
        for (std::size_t m = s; m < end; ++m)
          for (std::size_t i = 0; i + 1 < plan_.steps[m].values.size(); ++i)
            reads.reads.push_back(buffer_of[root_of(plan_.steps[m].values[i])]);
        for (std::size_t m = s; m < end; ++m) {
          steps.push_back(reads);
          steps.back().writes = buffer_of[root_of(plan_.steps[m].values.back())];
          reads.reads.push_back(steps.back().writes);
        }
        s = end - 1;
        continue;
      }
      if (step.kind == Plan::Step::Kind::region) {
        // One buffer step per result, reading the inputs and the results before it: the
        // results are written while the inputs are read, so none shares memory with an input
        // or another result.
        BufferStep reads;
        for (std::int32_t i = 0; i < step.num_inputs; ++i)
          reads.reads.push_back(buffer_of[root_of(step.values[static_cast<std::size_t>(i)])]);
        if (step.values.size() == static_cast<std::size_t>(step.num_inputs)) steps.push_back(reads);
        for (std::size_t i = static_cast<std::size_t>(step.num_inputs); i < step.values.size();
             ++i) {
          steps.push_back(reads);
          steps.back().writes = buffer_of[root_of(step.values[i])];
          reads.reads.push_back(steps.back().writes);
        }
        continue;
      }
      BufferStep& buffer_step = steps.emplace_back();
      buffer_step.writes = buffer_of[root_of(step.values.back())];
      for (std::size_t i = 0; i + 1 < step.values.size(); ++i)
        buffer_step.reads.push_back(buffer_of[root_of(step.values[i])]);
      if (buffer_step.writes >= 0) buffer_step.donors = in_place_donors(step, buffer_of);
    }
    // Row updates run when every step is done, reading their rows and values from the arena.
    BufferStep side_effects;
    for (auto s : g_.side_effects) {
      const Node& n = g_.nodes[static_cast<std::size_t>(s)];
      if (n.kind == Node::Kind::assign_rows)
        for (auto in : n.inputs) side_effects.reads.push_back(buffer_of[root_of(in)]);
    }
    if (!side_effects.reads.empty()) steps.push_back(std::move(side_effects));
    const MemoryPlan memory = plan_memory(buffer_bytes, steps);
    for (std::size_t r = 0; r < num_roots; ++r)
      if (buffer_of[r] >= 0)
        plan_.roots[r].offset = memory.offsets[static_cast<std::size_t>(buffer_of[r])];
    plan_.arena_bytes = memory.arena_bytes;
  }

  /// The variable roots a call with row updates lets go of before its side effects run.
  void mark_released_variables() {
    if (!plan_.updates_rows) return;
    std::vector<bool> keep(plan_.roots.size(), false);
    for (auto o : g_.outputs) keep[plan_.root_of(o)] = true;
    for (auto s : g_.side_effects) {
      keep[plan_.root_of(s)] = true;
      for (auto in : g_.nodes[static_cast<std::size_t>(s)].inputs) keep[plan_.root_of(in)] = true;
    }
    for (std::size_t r = 0; r < plan_.roots.size(); ++r)
      if (plan_.roots[r].kind == Plan::Root::Kind::variable && !keep[r])
        plan_.released_variable_roots.push_back(static_cast<std::int32_t>(r));
  }

  /// Each fused step's walk over its (now final) layouts, so a call passes only addresses.
  void lay_out_fused_steps() {
    for (Plan::Step& step : plan_.steps) {
      if (step.kind != Plan::Step::Kind::fused) continue;
      const std::span<const ArrayRef> refs(step.refs);
      auto layout =
          std::make_shared<FusedLayout>(layout_fused(refs.first(refs.size() - 1), refs.back()));
      layout->loop = fused_loop_for(*step.program, *layout);
      // A long-row layout without a loop is walked from the step's refs at each call.
      if (layout->mode != FusedLayout::Mode::long_rows || layout->loop != nullptr)
        step.fused_layout = std::move(layout);
    }
  }

  /// The buffers (of arena roots) an elementwise step may write its output over, in input
  /// order: read only with the output's exact layout, each read needing the output's block
  /// size. Whether one dies at this step is the planner's to check.
  std::vector<std::int32_t> in_place_donors(const Plan::Step& step,
                                            const std::vector<std::int32_t>& buffer_of) const {
    std::vector<std::int32_t> donors;
    if (!is_elementwise_step(step)) return donors;
    const auto block_bytes = [](const Plan::Value& v) {
      return arena_block_bytes(v.shape.numel() * static_cast<std::int64_t>(dtype_size(v.dtype)));
    };
    const Plan::Value& out = plan_.values[static_cast<std::size_t>(step.values.back())];
    const std::int64_t bytes = block_bytes(out);
    for (std::size_t i = 0; i + 1 < step.values.size(); ++i) {
      const std::size_t r = root_of(step.values[i]);
      const std::int32_t buffer = buffer_of[r];
      if (buffer < 0 || std::find(donors.begin(), donors.end(), buffer) != donors.end() ||
          block_bytes(plan_.values[static_cast<std::size_t>(step.values[i])]) != bytes)
        continue;
      bool same_layout = true;  // every read of this root in the step is the output's layout
      for (std::size_t j = 0; j + 1 < step.values.size() && same_layout; ++j) {
        if (root_of(step.values[j]) != r) continue;
        const Plan::Value& v = plan_.values[static_cast<std::size_t>(step.values[j])];
        same_layout = v.offset == 0 && v.shape == out.shape && v.strides == out.strides &&
                      dtype_size(v.dtype) == dtype_size(out.dtype);
      }
      if (same_layout) donors.push_back(buffer);
    }
    return donors;
  }

  std::size_t root_of(std::int32_t value) const { return plan_.root_of(value); }

  const GraphData& g_;
  const std::vector<Shape>* shapes_;
  const std::vector<std::int64_t>* dim_values_;
  std::vector<std::int32_t> region_step_;  // control-flow node id -> its step
  Plan plan_;
  std::vector<std::int32_t> copies_;  // node id -> its contiguous copy's value, or -1
};

}  // namespace

std::int64_t Plan::bytes() const {
  std::int64_t total = static_cast<std::int64_t>(sizeof(Plan) + roots.capacity() * sizeof(Root) +
                                                 values.capacity() * sizeof(Value) +
                                                 steps.capacity() * sizeof(Step));
  for (const Step& s : steps)
    total += static_cast<std::int64_t>(
        s.values.capacity() * sizeof(std::int32_t) + s.refs.capacity() * sizeof(ArrayRef) +
        (s.fused_layout ? sizeof(FusedLayout) : 0) +
        (s.own_program ? sizeof(FusedProgram) + s.own_program->ops.size() * sizeof(FusedOp) : 0));
  return total;
}

Plan build_plan(const GraphData& g, const std::vector<Shape>* shapes,
                const std::vector<std::int64_t>* dim_values) {
  return PlanBuilder(g, shapes, dim_values).build();
}

void lock_variables(const GraphData& g, const std::string& function_name,
                    std::vector<std::shared_ptr<VariableImpl>>& vars) {
  for (const auto& weak : g.variables) vars.push_back(weak.lock());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i])
      fail(function_name,
           "variable '{}' used by this function was destroyed; the cached graph refers to "
           "variables by reference and does not keep them alive",
           g.variable_names[i]);
  }
}

namespace {
/// A root's tensor (for arguments, constants, variables and escapes) and address in one call.
struct RootBinding {
  Tensor held;                     // a tensor made for this call (escape, variable, copy)
  const Tensor* tensor = nullptr;  // the root's tensor (null in the arena)
  char* address = nullptr;
};
}  // namespace

void run_plan(const Plan& plan, const GraphData& g, std::span<const Tensor* const> args,
              const std::string& function_name, std::vector<Tensor>& outputs,
              std::span<const Tensor> variable_values, const RunBuffers* buffers) {
  // Per-thread scratch, one set per nesting level (a control-flow step runs its regions' plans
  // inside this one), emptied on exit so it keeps nothing alive between calls.
  struct Scratch {
    std::vector<std::shared_ptr<VariableImpl>> vars;
    std::vector<RootBinding> bindings;
  };
  __attribute__((tls_model("initial-exec"))) thread_local std::vector<std::unique_ptr<Scratch>>
      scratch_levels;
  __attribute__((tls_model("initial-exec"))) thread_local std::size_t level = 0;
  if (scratch_levels.size() <= level) scratch_levels.push_back(std::make_unique<Scratch>());
  Scratch& scratch = *scratch_levels[level];
  struct Nest {
    std::size_t& level;
    Scratch& scratch;
    explicit Nest(std::size_t& l, Scratch& s) : level(l), scratch(s) { ++level; }
    ~Nest() {
      scratch.vars.clear();
      for (RootBinding& r : scratch.bindings) r.held = Tensor();
      --level;
    }
  } nest{level, scratch};
  std::vector<std::shared_ptr<VariableImpl>>& vars = scratch.vars;
  // Bind variables first: a destroyed variable fails the call before anything runs.
  if (variable_values.empty()) lock_variables(g, function_name, vars);
  // Each root's tensor (for arguments, constants, variables and escapes) and address.
  std::vector<RootBinding>& bound = scratch.bindings;
  bound.resize(plan.roots.size());

  Tensor own_arena;
  const Tensor* arena = buffers != nullptr ? buffers->arena : nullptr;
  if (arena == nullptr && plan.arena_bytes > 0) {
    own_arena = make_arena(plan.arena_bytes);
    arena = &own_arena;
  }
  char* arena_base = arena != nullptr ? arena->impl()->data() : nullptr;
  const std::span<const Tensor> destinations =
      buffers != nullptr ? buffers->destinations : std::span<const Tensor>{};
  // The destination output `r` is computed in, if the caller gave one for an output that is
  // the whole of escape root r (a moved output), else null.
  const auto destination_of_root = [&](std::size_t r) -> const Tensor* {
    for (std::size_t i = 0; i < destinations.size() && i < g.outputs.size(); ++i)
      if (plan.moved_outputs[i] != 0 && destinations[i].defined() &&
          plan.root_of(g.outputs[i]) == r)
        return &destinations[i];
    return nullptr;
  };
  // A fresh buffer for escape root r: its destination, if it has one.
  const auto allocate_escape = [&](std::size_t r, RootBinding& b) {
    const Plan::Root& root = plan.roots[r];
    const Tensor* destination = destination_of_root(r);
    if (destination != nullptr) {
      const TensorImpl& d = *destination->impl();
      if (d.dtype != root.dtype || d.shape != root.shape || !d.is_contiguous())
        fail(function_name, "internal: output destination {} {} does not fit buffer {} {}",
             dtype_name(d.dtype), d.shape, dtype_name(root.dtype), root.shape);
      b.held = *destination;
    } else {
      b.held =
          empty_checked(root.shape, root.strides, root.dtype, static_cast<std::size_t>(root.bytes));
    }
    b.tensor = &b.held;
    b.address = b.held.impl()->data();
  };
  for (std::size_t r = 0; r < plan.roots.size(); ++r) {
    const Plan::Root& root = plan.roots[r];
    RootBinding& b = bound[r];
    const Tensor* t = nullptr;
    switch (root.kind) {
      case Plan::Root::Kind::argument:
        t = args[static_cast<std::size_t>(root.index)];
        if (!t->impl()->is_contiguous()) {
          b.held = t->contiguous();
          t = &b.held;
        }
        break;
      case Plan::Root::Kind::constant:  // from byte `offset` on (a batch split's half)
        t = &g.nodes[static_cast<std::size_t>(root.index)].constant;
        b.tensor = t;
        b.address = t->impl()->data() + root.offset;
        continue;
      case Plan::Root::Kind::variable:
        b.held = variable_values.empty() ? vars[static_cast<std::size_t>(root.index)]->read()
                                         : variable_values[static_cast<std::size_t>(root.index)];
        if (!b.held.impl()->is_contiguous()) b.held = b.held.contiguous();
        t = &b.held;
        break;
      case Plan::Root::Kind::escape:  // allocated by the step that writes it
      case Plan::Root::Kind::arena:
        b.address = arena_base + root.offset;
        b.tensor = nullptr;
        continue;
    }
    b.tensor = t;
    b.address = t->impl()->data();
  }
  const auto data_of = [&](std::int32_t value) -> char* {
    const Plan::Value& v = plan.values[static_cast<std::size_t>(value)];
    return bound[static_cast<std::size_t>(v.root)].address +
           v.offset * static_cast<std::int64_t>(dtype_size(v.dtype));
  };

  // Refs are copied from the step and completed with addresses; stack space, left uninitialized.
  constexpr std::size_t small = max_fused_inputs + 1;
  static_assert(std::is_trivially_destructible_v<ArrayRef> &&
                std::is_trivially_copy_constructible_v<ArrayRef>);
  alignas(ArrayRef) unsigned char small_refs[small * sizeof(ArrayRef)];
  std::vector<ArrayRef> many_refs;
  // Hands out a value as a tensor: its root's tensor, or a view of it (of the arena's bytes for
  // a region step's arena inputs and results; outputs and assigned values are never there).
  const auto tensor_of = [&](std::int32_t value) -> Tensor {
    const Plan::Value& v = plan.values[static_cast<std::size_t>(value)];
    const RootBinding& b = bound[static_cast<std::size_t>(v.root)];
    if (b.tensor == nullptr) {  // in the arena: a view of its bytes as the value's elements
      const Plan::Root& root = plan.roots[static_cast<std::size_t>(v.root)];
      return make_view(*arena, v.dtype, v.shape, v.strides,
                       root.offset / static_cast<std::int64_t>(dtype_size(v.dtype)) + v.offset);
    }
    const Tensor& base = *b.tensor;
    const TensorImpl& impl = *base.impl();
    if (v.offset == 0 && v.shape == impl.shape && v.strides == impl.strides) return base;
    return make_view(base, v.shape, v.strides, impl.offset + v.offset);
  };
  // A step that computes a variable's new value (update_root): its output buffer is the
  // variable's own while only the variable holds that value, and the lock returned is held
  // while the step writes it, so no other call reads it meanwhile; else a fresh buffer (the
  // lock is empty).
  const auto bind_update = [&](const Plan::Step& step) {
    const std::size_t w_root = static_cast<std::size_t>(step.update_root);
    const std::size_t out_root = plan.root_of(step.values.back());
    const RootBinding& w = bound[w_root];
    RootBinding& out = bound[out_root];
    std::unique_lock<std::mutex> sole;
    if (variable_values.empty())
      sole = vars[static_cast<std::size_t>(plan.roots[w_root].index)]->lock_sole_value(w.held);
    if (sole.owns_lock()) {
      out.held = w.held;
      out.tensor = &out.held;
      out.address = w.address;
    } else {
      allocate_escape(out_root, out);
    }
    return sole;
  };
  // A GEMM with an SGD update folded in (fold_sgd_updates): w - rate * (a b), written over w's
  // buffer, or over a fresh copy of w.
  const auto run_folded_update = [&](const Plan::Step& step) {
    const std::unique_lock<std::mutex> sole = bind_update(step);
    const RootBinding& out = bound[plan.root_of(step.values.back())];
    if (!sole.owns_lock())
      copy_strided(array_ref(bound[static_cast<std::size_t>(step.update_root)].held),
                   array_ref(out.held));
    const char* rate = data_of(step.values[2]);
    const double alpha = plan.values[static_cast<std::size_t>(step.values[2])].dtype == DType::f32
                             ? -static_cast<double>(*reinterpret_cast<const float*>(rate))
                             : -*reinterpret_cast<const double*>(rate);
    run_planned_matmul(*step.matmul, data_of(step.values[0]), data_of(step.values[1]), out.address,
                       alpha);
  };
  // A step's output buffer: over the variable's value for an elementwise update (the lock
  // returned is held while the step writes it), else a fresh escape buffer where it needs one.
  const auto bind_output = [&](const Plan::Step& step) {
    if (step.update_root >= 0) return bind_update(step);
    if (step.allocate_escape >= 0) {
      const auto r = static_cast<std::size_t>(step.allocate_escape);
      allocate_escape(r, bound[r]);
    }
    return std::unique_lock<std::mutex>();
  };
  // A group of fused steps (group_elementwise_steps): every step's buffers bound first (a
  // variable update's lock held until the group is done), then run as one loop or chunk by
  // chunk.
  const auto run_group = [&](std::size_t first) {
    const auto size = static_cast<std::size_t>(plan.steps[first].group_size);
    std::array<std::unique_lock<std::mutex>, max_fused_group_steps> updating;
    for (std::size_t m = 0; m < size; ++m) updating[m] = bind_output(plan.steps[first + m]);
    if (const FusedGroupLoop* loop = plan.steps[first].group_loop.get()) {
      std::array<const void*, max_fused_pointers> data{};
      for (std::size_t i = 0; i < loop->inputs.size(); ++i) data[i] = data_of(loop->inputs[i]);
      for (std::size_t m = 0; m + 1 < size; ++m)
        data[loop->inputs.size() + m] = data_of(plan.steps[first + m].values.back());
      run_fused(loop->program, *loop->layout, data.data(),
                data_of(plan.steps[first + size - 1].values.back()));
      return;
    }
    std::array<FusedGroupMember, max_fused_group_steps> members;  // only the chunked form's
    for (std::size_t m = 0; m < size; ++m) {
      const Plan::Step& step = plan.steps[first + m];
      members[m] = {step.program, step.fused_layout.get(), {}, data_of(step.values.back())};
      for (std::size_t i = 0; i + 1 < step.values.size(); ++i)
        members[m].inputs[i] = data_of(step.values[i]);
    }
    run_fused_group(std::span<const FusedGroupMember>(members.data(), size));
  };
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const Plan::Step& step = plan.steps[s];
    if (step.group_size > 0) {
      run_group(s);
      s += static_cast<std::size_t>(step.group_size) - 1;
      continue;
    }
    if (step.kind == Plan::Step::Kind::region) {
      std::vector<Tensor> ins;
      ins.reserve(static_cast<std::size_t>(step.num_inputs));
      for (std::int32_t k = 0; k < step.num_inputs; ++k)
        ins.push_back(tensor_of(step.values[static_cast<std::size_t>(k)]));
      // Each result read later is written straight into its buffer: arena memory, or an
      // escape buffer allocated here.
      std::vector<Tensor> results;
      for (std::size_t k = static_cast<std::size_t>(step.num_inputs); k < step.values.size(); ++k) {
        const std::size_t r = plan.root_of(step.values[k]);
        if (plan.roots[r].kind == Plan::Root::Kind::escape) allocate_escape(r, bound[r]);
        const auto index = static_cast<std::size_t>(
            step.result_index[k - static_cast<std::size_t>(step.num_inputs)]);
        if (results.size() <= index) results.resize(index + 1);
        results[index] = tensor_of(step.values[k]);
      }
      run_control_flow(g.nodes[static_cast<std::size_t>(step.node)], step.region_plans, ins,
                       results, function_name);
      continue;
    }
    if (step.update_root >= 0 && step.matmul) {
      run_folded_update(step);
      continue;
    }
    const std::unique_lock<std::mutex> updating = bind_output(step);
    const std::size_t count = step.values.size();
    if (step.kind == Plan::Step::Kind::flat) {
      std::array<const void*, 3> in{};
      for (std::size_t i = 0; i + 1 < count; ++i) in[i] = data_of(step.values[i]);
      run_flat(step.flat, in.data(), data_of(step.values.back()));
      continue;
    }
    if (step.matmul) {
      run_planned_matmul(*step.matmul, data_of(step.values[0]), data_of(step.values[1]),
                         data_of(step.values[2]));
      continue;
    }
    if (step.fused_layout) {
      std::array<const void*, max_fused_inputs> in{};
      for (std::size_t i = 0; i + 1 < count; ++i) in[i] = data_of(step.values[i]);
      run_fused(*step.program, *step.fused_layout, in.data(), data_of(step.values.back()));
      continue;
    }
    ArrayRef* refs = reinterpret_cast<ArrayRef*>(small_refs);
    if (count > small) {
      many_refs.resize(count);
      refs = many_refs.data();
    }
    for (std::size_t i = 0; i < count; ++i) {
      new (&refs[i]) ArrayRef(step.refs[i]);
      refs[i].data = data_of(step.values[i]);
    }
    const std::span<const ArrayRef> inputs(refs, count - 1);
    switch (step.kind) {
      case Plan::Step::Kind::kernel:
        if (step.memo != nullptr)
          run_with_memo(step, inputs, refs[count - 1],
                        [&](std::size_t r) { return bound[r].tensor->impl()->storage; });
        else
          step.fn(KernelCall{step.prim, inputs, refs[count - 1], *step.attrs});
        break;
      case Plan::Step::Kind::fused:
        run_fused(*step.program, inputs, refs[count - 1]);
        break;
      case Plan::Step::Kind::copy:
        copy_strided(refs[0], refs[1]);
        break;
      case Plan::Step::Kind::flat:
      case Plan::Step::Kind::region:
        break;
    }
  }

  if (plan.updates_rows) {
    // Rows are updated in place only where nothing else holds the variable's value: let go of
    // the values read that neither an output nor a side effect's input is.
    for (auto r : plan.released_variable_roots) bound[static_cast<std::size_t>(r)] = RootBinding{};
    // Every row is checked before any side effect runs, so a bad one changes no variable.
    for (auto s : g.side_effects) {
      const Node& node = g.nodes[static_cast<std::size_t>(s)];
      if (node.kind == Node::Kind::assign_rows)
        check_rows(array_ref(tensor_of(node.inputs[0])),
                   vars[static_cast<std::size_t>(node.index)]->shape[0], node.attrs.ints[1] != 0,
                   function_name.c_str());
    }
  }
  for (auto s : g.side_effects) {
    const Node& node = g.nodes[static_cast<std::size_t>(s)];
    VariableImpl& variable = *vars[static_cast<std::size_t>(node.index)];
    if (node.kind == Node::Kind::assign_rows) {
      variable.update_rows(tensor_of(node.inputs[0]), tensor_of(node.inputs[1]), node.attrs.ints[0],
                           node.attrs.ints[1] != 0, function_name.c_str());
      continue;
    }
    variable.write(tensor_of(s).contiguous());
  }
  outputs.clear();
  for (std::size_t i = 0; i < g.outputs.size(); ++i) {
    const std::int32_t o = g.outputs[i];
    RootBinding& b = bound[plan.root_of(o)];
    if (i < destinations.size() && destinations[i].defined()) {
      const Tensor& destination = destinations[i];
      if (plan.moved_outputs[i] == 0 || b.held.impl() != destination.impl())
        copy_strided(array_ref(tensor_of(o)), array_ref(destination));
      outputs.push_back(destination);
    } else if (plan.moved_outputs[i] != 0) {
      outputs.push_back(std::move(b.held));
    } else {
      outputs.push_back(tensor_of(o));
    }
  }
}

Tensor make_arena(std::int64_t arena_bytes) {
  return empty(Shape{arena_bytes}, DType::boolean, "arena");
}

}  // namespace kiln::detail

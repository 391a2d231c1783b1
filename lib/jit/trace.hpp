#pragma once
// Tracing: while a TraceContext is current on a thread, apply() records nodes instead of
// computing, and tensors are symbolic (shape and dtype, no buffer).

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>

#include "core/hooks.hpp"
#include "jit/graph.hpp"

namespace kiln::detail {

struct TensorImpl;

class TraceContext final : public TraceHooks {
 public:
  /// `allow_variable_creation`: whether variables may be created while this trace runs (only
  /// during a function's first trace). `function_name` is used in messages.
  TraceContext(std::string function_name, bool allow_variable_creation);
  /// The trace of a control-flow region (a scan, while_loop or cond body) inside `parent`:
  /// symbolic tensors of enclosing traces that the body uses become parameters of the region
  /// (captures, after its own parameters), variable reads are the parent's reads captured, and
  /// variables created or undo actions registered go to the outermost trace.
  explicit TraceContext(TraceContext& parent);
  /// Unless commit() was called: runs the on_failure actions (newest first) and ends this
  /// trace's claims on provisional variables as failed.
  ~TraceContext();
  TraceContext(const TraceContext&) = delete;
  TraceContext& operator=(const TraceContext&) = delete;

  std::uint64_t id() const { return id_; }
  GraphData& graph() { return graph_; }
  const std::string& function_name() const override { return function_name_; }
  bool allow_variable_creation() const override { return allow_variable_creation_; }
  /// Dynamic dims (symbols 0..n-1) the placeholders of this trace use.
  std::int64_t num_symbols() const override { return num_symbols_; }
  void set_num_symbols(std::int64_t n) { num_symbols_ = n; }

  /// A symbolic tensor for a new parameter node (flat argument position `index`).
  Tensor add_parameter(DType dtype, const Shape& shape, std::int32_t index);
  /// Records prim applied to inputs; returns the symbolic output.
  Tensor record_op(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs, DType dtype,
                   const Shape& shape) override;
  /// The value of a variable inside this trace (a read node, or the last value assigned). In a
  /// region trace: the value assigned in the body, or a parameter for its value on entry.
  Tensor read_variable(const std::shared_ptr<VariableImpl>& v) override;
  /// Records an assignment of `value` to v. In a region trace the body's reads see `value`
  /// from then on, and the control-flow op makes v's final value a result and assigns it in
  /// the enclosing trace (see RegionVariable).
  void assign_variable(const std::shared_ptr<VariableImpl>& v, const Tensor& value) override;
  /// Records an in-place update of rows of v: an assign_rows side effect, run when the call
  /// ends. Reads of v later in this trace see the updated value (computed as a copy). In a
  /// region trace, or after an assignment of v in this trace, it is that assignment of the
  /// updated value instead.
  void update_variable_rows(const std::shared_ptr<VariableImpl>& v, const Tensor& rows,
                            const Tensor& values, std::int64_t mode, bool padded) override;

  /// In a region trace: a variable its body read or assigned, in the order first touched.
  /// Reading gives the region a parameter for the variable's value on entry: a capture of its
  /// own (never shared with other captures of the same value, so it can become a loop carry).
  struct RegionVariable {
    std::shared_ptr<VariableImpl> variable;
    std::int32_t entry = -1;        // parameter node of the value on entry, or -1
    std::size_t entry_capture = 0;  // its position in captures()
    Tensor current;                 // what reads in the body return now
    bool assigned = false;
  };
  const std::vector<RegionVariable>& region_variables() const { return region_variables_; }
  /// A new symbolic tensor (an alias the tape tells apart from other reads) of v's value in
  /// this trace now, noted on recording tapes as a read of v.
  Tensor variable_alias(const std::shared_ptr<VariableImpl>& v);
  /// Variables this trace created, and provisional ones of other unfinished traces that it
  /// used: the concrete function keeps them alive (released if the trace fails).
  std::vector<std::shared_ptr<VariableImpl>>& owned_variables() { return owned_; }
  /// Records a variable this trace has just created: provisional, with this trace's claim.
  void add_created_variable(const std::shared_ptr<VariableImpl>& v) override;
  /// Registers `undo` to run if this trace fails (ends without commit()): it reverts
  /// bookkeeping done while tracing, such as a module or variable store recording a variable
  /// the trace created, so that a failed trace leaves no trace. `undo` must not throw.
  void on_failure(std::function<void()> undo) override {
    if (parent_)
      outermost().on_failure(std::move(undo));
    else
      undo_.push_back(std::move(undo));
  }
  /// The trace succeeded: its on_failure actions are dropped, and the provisional variables it
  /// created or used are kept.
  void commit();
  /// With on, floating eager tensors that control-flow bodies in this (outermost) trace use
  /// become constants of this trace, captured into the regions, instead of constants of the
  /// regions: kiln::checkpoint then finds them all at the top and can bind them when it replays.
  void set_lift_constants(bool on) { lift_constants_ = on; }
  /// Marks t (an output of the traced function) and returns its node.
  std::int32_t node_of(const Tensor& t, const char* what);

  /// A region trace's captures: the enclosing trace's tensors its parameters after the first
  /// ones stand for, in parameter order.
  const std::vector<Tensor>& captures() const { return captures_; }
  /// In a region trace: the one symbolic tensor standing for `outer` (a tensor of an enclosing
  /// trace), capturing it on first use. Variable reads in the region return these too, so a
  /// gradient tape sees every use of a capture as one tensor.
  Tensor captured(const Tensor& outer, const char* what);
  /// Adds a control-flow node (kind scan, while_loop or cond, with its regions) and an output
  /// node per result of the given types; returns the results as symbolic tensors.
  std::vector<Tensor> add_control_flow(Node node, const std::vector<DType>& dtypes,
                                       const std::vector<Shape>& shapes);

 private:
  std::int32_t add_node(Node n);
  Tensor symbolic(std::int32_t node);
  /// The node standing for `outer`, a symbolic tensor of this trace or an enclosing one
  /// (captured into this region, and into every region between, on first use).
  std::int32_t capture(const Tensor& outer, const char* what);
  TraceContext& outermost() { return parent_ ? parent_->outermost() : *this; }
  std::int32_t variable_slot(const std::shared_ptr<VariableImpl>& v);

  TraceContext* parent_ = nullptr;  // region traces: the trace the region is in
  std::vector<Tensor> captures_;    // region traces: see captures()
  std::unordered_map<std::int32_t, std::int32_t> captured_;   // parent's node -> parameter
  std::unordered_map<std::int32_t, Tensor> capture_tensors_;  // parameter -> its tensor
  std::uint64_t id_;
  std::string function_name_;
  bool allow_variable_creation_;
  bool lift_constants_ = false;
  std::int64_t num_symbols_ = 0;
  GraphData graph_;
  std::unordered_map<const TensorImpl*, std::int32_t> constants_;
  std::unordered_map<const VariableImpl*, std::int32_t> slots_;
  std::vector<std::int32_t> current_value_;  // per variable slot: node of its current value
  // Per variable slot: the symbolic tensor reads return until the next assignment (one tensor,
  // so gradient tapes see every read of the same value as the same tensor).
  std::vector<Tensor> current_tensor_;
  // Per variable slot: row updates recorded since reads last saw its value (read_variable
  // applies them to a copy).
  struct RowUpdate {
    Tensor rows, values;
    std::int64_t mode;
    bool padded;
  };
  std::vector<std::vector<RowUpdate>> pending_rows_;
  std::vector<std::shared_ptr<VariableImpl>> owned_;
  std::vector<VariableImpl*> claimed_;  // provisional variables this trace holds a claim on
  std::vector<std::function<void()>> undo_;
  std::vector<RegionVariable> region_variables_;  // region traces: see region_variables()
  RegionVariable& region_variable(const std::shared_ptr<VariableImpl>& v);
};

/// The trace being recorded on this thread, or null (every TraceHooks is a TraceContext).
inline TraceContext* current_trace() { return static_cast<TraceContext*>(active_trace()); }

/// Makes `trace` current on this thread for its lifetime (null suspends tracing).
class TraceScope {
 public:
  explicit TraceScope(TraceContext* trace);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceContext* previous_;
};

}  // namespace kiln::detail

#pragma once
// Hooks: how the layers above take part in what the layers below do, without the layers below
// including them. A trace in progress (jit/) records ops and variable use instead of running
// them; recording tapes (autodiff/) see every op applied. Each is one thread-local pointer or
// counter, checked where an op is applied or a variable touched, so the eager path pays a load
// and a branch.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {
class Variable;
}

namespace kiln::detail {

enum class Prim : std::uint16_t;
struct Attrs;
struct VariableImpl;

/// The trace recording on this thread, as the layers below jit/ use it: ops are recorded as
/// nodes, variable reads and assignments become graph inputs and side effects, and variables
/// created meanwhile are registered with it. jit's TraceContext implements it.
class TraceHooks {
 public:
  /// Records p applied to inputs; returns the symbolic output.
  virtual Tensor record_op(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                           DType dtype, const Shape& shape) = 0;
  /// Dynamic dims (symbols 0..n-1) this trace's placeholders use.
  virtual std::int64_t num_symbols() const = 0;
  /// The value of a variable inside this trace (a read node, or the last value assigned).
  virtual Tensor read_variable(const std::shared_ptr<VariableImpl>& v) = 0;
  /// Records an assignment of `value` to v.
  virtual void assign_variable(const std::shared_ptr<VariableImpl>& v, const Tensor& value) = 0;
  /// Records an in-place update of rows of v (Variable::scatter_add and kin): `mode` is a
  /// kernels RowUpdate, `padded` whether -1 rows are unused entries.
  virtual void update_variable_rows(const std::shared_ptr<VariableImpl>& v, const Tensor& rows,
                                    const Tensor& values, std::int64_t mode, bool padded) = 0;
  /// A variable this trace has just created (provisional until the trace ends).
  virtual void add_created_variable(const std::shared_ptr<VariableImpl>& v) = 0;
  /// Whether variables may be created while this trace runs (only in a first trace).
  virtual bool allow_variable_creation() const = 0;
  /// The traced function's name, for messages.
  virtual const std::string& function_name() const = 0;
  /// Registers `undo` to run if this trace fails. `undo` must not throw.
  virtual void on_failure(std::function<void()> undo) = 0;

 protected:
  ~TraceHooks() = default;
};

/// The trace recording on this thread, or null.
TraceHooks* active_trace();
/// Makes `trace` the one recording on this thread (null suspends tracing); returns the previous.
TraceHooks* set_active_trace(TraceHooks* trace);

/// Suspends the trace recording on this thread while it lives (initial values and other work
/// that must run eagerly even inside a traced function).
class TraceSuspension {
 public:
  TraceSuspension() : previous_(set_active_trace(nullptr)) {}
  ~TraceSuspension() { set_active_trace(previous_); }
  TraceSuspension(const TraceSuspension&) = delete;
  TraceSuspension& operator=(const TraceSuspension&) = delete;

 private:
  TraceHooks* previous_;
};

/// While one is alive, scans traced on this thread keep their per-step work inside the loop: the
/// optimizer's loop hoisting (jit/loop_hoisting.cpp) moves only invariant work out of them, never
/// a value per step stacked over all steps. For scans whose point is to hold little per step: a
/// gradient's backward scan and a checkpointed scan's segments.
class StepWorkStaysInside {
 public:
  StepWorkStaysInside() { ++depth(); }
  ~StepWorkStaysInside() { --depth(); }
  StepWorkStaysInside(const StepWorkStaysInside&) = delete;
  StepWorkStaysInside& operator=(const StepWorkStaysInside&) = delete;
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
};

/// Number of gradient tapes recording on this thread (autodiff/ keeps it).
extern __attribute__((tls_model("initial-exec"))) thread_local int recording_tapes;
inline bool any_tape_recording() { return recording_tapes > 0; }

/// What recording tapes do with an applied op and a variable read; autodiff/ installs them when
/// the library loads. Called only while any_tape_recording().
struct TapeHooks {
  void (*record_op)(Prim p, std::span<const Tensor> inputs, const Attrs& attrs,
                    const Tensor& output) = nullptr;
  void (*note_variable_read)(const Variable& v, const Tensor& value) = nullptr;
};
extern TapeHooks tape_hooks;

/// The dense tensor of an indexed-slices value (installed by ops/, which computes it), for the
/// layers below that read a tensor's elements: Tensor::contiguous, to_vector, printing.
extern Tensor (*densify_slices)(const Tensor& slices);

}  // namespace kiln::detail

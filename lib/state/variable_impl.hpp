#pragma once
// The state behind kiln::Variable.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kiln/variable.hpp"

namespace kiln::detail {

struct ProvisionalRecord;

struct VariableImpl {
  VariableImpl() = default;
  /// Leaves the registry of live variables (see register_variable).
  ~VariableImpl();
  VariableImpl(const VariableImpl&) = delete;
  VariableImpl& operator=(const VariableImpl&) = delete;

  std::uint64_t id = 0;
  std::string name;  // changed only by rename_variable
  DType dtype = DType::f32;
  Shape shape;
  std::atomic<bool> trainable{true};
  mutable std::mutex mutex;  // guards value
  Tensor value;
  /// Whether `pending` is set: the variable was created by a trace that has not finished (see
  /// claim_provisional). Read without a lock on every use; `pending` only under its mutex.
  std::atomic<bool> provisional{false};
  std::shared_ptr<ProvisionalRecord> pending;

  /// The variable's value; inside a VariableSnapshot on this thread, the value this thread
  /// first read or last wrote while the snapshot lives.
  Tensor read() const;
  void write(Tensor t);
  /// Updates rows of the value (kernels' update_rows_in_place: `mode` a RowUpdate, rows and
  /// values checked by the caller's front end): in place when nothing else shares the value's
  /// buffer and no snapshot is active, else on a fresh copy that is then written. `op` names
  /// the op in errors.
  void update_rows(const Tensor& rows, const Tensor& values, std::int64_t mode, bool padded,
                   const char* op);
  /// A lock on the variable, under which the caller may overwrite `reading` (what read()
  /// returned to it) in place as the variable's next value: held only when `reading` is still
  /// the value, nothing but the variable and `reading` holds its buffer, the value is
  /// contiguous and no snapshot is active on this thread. Else an empty lock: the caller writes
  /// a copy instead. Other threads' reads wait while it is held.
  std::unique_lock<std::mutex> lock_sole_value(const Tensor& reading);
};

/// Creates a variable named exactly `name` (no name scope applied), registered in the
/// collections. Inside a trace this is allowed only during a function's first trace.
Variable create_variable(const Tensor& initial, std::string name, bool trainable);

// Variables created by traces that have not finished. Such a variable is provisional: the
// creating trace and every other unfinished trace that uses it hold a claim. When the last
// claim ends, the variable is rolled back (the undo actions registered for it run: a module or
// store forgets it) only if none of those traces succeeded and no eager code used it; else it
// is kept for good. So a failed trace rolls back only what nothing else has used.

/// Marks a variable that the current (unfinished) trace has just created as provisional, with
/// that trace's claim on it.
void mark_provisional(VariableImpl& v);
/// An unfinished trace uses v: takes a claim and returns true if v is provisional.
bool claim_provisional(VariableImpl& v);
/// Ends a claim; `succeeded` keeps v for good. The last claim of a failed, unused variable runs
/// its undo actions (outside any lock). Must not throw.
void release_provisional(VariableImpl& v, bool succeeded) noexcept;
/// Keeps provisional v for good (see note_eager_use).
void keep_provisional(VariableImpl& v);
/// Eager code read or assigned v: a provisional v is kept for good.
inline void note_eager_use(VariableImpl& v) {
  if (v.provisional.load(std::memory_order_acquire)) keep_provisional(v);
}
/// Registers `undo` to run if provisional v is rolled back (it must not throw). Returns false,
/// registering nothing, if v is not provisional.
bool on_rollback(VariableImpl& v, std::function<void()> undo);

/// Throws the "tried to create variable ... while retracing" error when a trace that may not
/// create variables is recording on this thread. Callers that compute an initial value check
/// this first so no work is wasted.
void check_variable_creation_allowed(std::string_view name);

/// Gives a live variable a new name (a module registered under a new parent renames the
/// variables of its subtree). Synchronized with the collections.
void rename_variable(VariableImpl& v, std::string name);

/// Checks that t may be assigned to v (defined, same dtype and shape) for op `op`.
void check_assignable(const VariableImpl& v, const Tensor& t, const char* op);

}  // namespace kiln::detail

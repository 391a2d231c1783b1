#pragma once
// The state behind kiln::Variable.

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>

#include "kiln/variable.hpp"

namespace kiln::detail {

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

  Tensor read() const {
    std::lock_guard lock(mutex);
    return value;
  }
  void write(Tensor t) {
    std::lock_guard lock(mutex);
    value = std::move(t);
  }
};

/// Creates a variable named exactly `name` (no name scope applied), registered in the
/// collections. Inside a trace this is allowed only during a function's first trace.
Variable create_variable(const Tensor& initial, std::string name, bool trainable);

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

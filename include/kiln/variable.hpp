#pragma once
/// @file variable.hpp
/// kiln::Variable: a named, mutable slot holding a tensor value, and the collections of all
/// live variables.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
struct VariableImpl;
}

/// A handle to a mutable, named tensor slot. Copies refer to the same variable; `id()` is its
/// unique identity, which kiln::function's cache keys on. Assignments must keep the dtype and
/// shape. Inside a traced function, reading a variable is bound at call time (by reference),
/// and assign* become ordered side effects of the compiled graph.
///
/// A variable always holds a value (it is created from one), so it cannot be read
/// uninitialized. It lives while any handle to it lives (a kiln::Module, the variable store
/// and a concrete function that created it hold handles); the collections below only observe.
class Variable {
 public:
  /// An empty handle (no variable); most methods throw on it.
  Variable() = default;
  /// A new variable holding `initial` (which must be defined and concrete). Its name is
  /// `name` prefixed with the current kiln::NameScope ("layer1/w"); without a name it gets an
  /// automatic one, unique in the scope: "Variable", "Variable_1", ... (see unique_name).
  /// Inside a kiln::function, variables may be created only during its first trace.
  explicit Variable(const Tensor& initial, std::string name = {}, bool trainable = true);

  bool defined() const { return impl_ != nullptr; }
  /// The current value (a symbolic read while tracing).
  Tensor value() const;
  void assign(const Tensor& value) const;
  void assign_add(const Tensor& delta) const;
  void assign_sub(const Tensor& delta) const;
  /// Adds values[i...] to row indices[i...] of the variable (along its first dim), in place:
  /// nothing is copied when no other tensor shares the variable's buffer (else the variable
  /// gets a fresh copy first, so tensors read earlier never change). indices: i32 or i64, any
  /// shape, each in [0, rows); values: indices' shape followed by the variable's dims after
  /// the first. Rows named twice add up. Inside a kiln::function, an ordered side effect that
  /// runs in place when the call ends. TensorFlow's Variable.scatter_add.
  void scatter_add(const Tensor& indices, const Tensor& values) const;
  /// Subtracts values[i...] from row indices[i...] (see scatter_add).
  void scatter_sub(const Tensor& indices, const Tensor& values) const;
  /// Sets row indices[i...] to values[i...] (see scatter_add; of rows named twice, the last
  /// entry wins).
  void scatter_update(const Tensor& indices, const Tensor& values) const;
  /// scatter_add / scatter_sub of an indexed-slices value of the variable's shape
  /// (kiln/sparse.hpp): what sparse optimizers apply.
  void scatter_add(const Tensor& slices) const;
  void scatter_sub(const Tensor& slices) const;
  /// scatter_update of an indexed-slices value: its rows set to its values.
  void scatter_update(const Tensor& slices) const;

  /// The full name, e.g. "net/l1/kernel". Stable unless the variable belongs to a
  /// kiln::Module that is registered under a new parent (its path changes, and so its name).
  const std::string& name() const;
  /// Whether optimizers should update it. Module::freeze() clears it for a subtree.
  bool trainable() const;
  /// Sets the flag. For a variable created by a kiln::Module, the module recomputes the flag
  /// (from the trainability given to add_variable and whether a containing module is frozen)
  /// on freeze(), unfreeze() and registration; use those for module variables.
  void set_trainable(bool trainable) const;
  DType dtype() const;
  const Shape& shape() const;
  /// Unique for the life of the process (never reused).
  std::uint64_t id() const;

  /// Internal: the shared state.
  const std::shared_ptr<detail::VariableImpl>& impl() const { return impl_; }
  explicit Variable(std::shared_ptr<detail::VariableImpl> impl) : impl_(std::move(impl)) {}

  friend bool operator==(const Variable& a, const Variable& b) { return a.impl_ == b.impl_; }

 private:
  std::shared_ptr<detail::VariableImpl> impl_;
};

/// Every live variable, in creation order, whose name lies under `scope_prefix` by whole path
/// components: "layer1" selects "layer1/w" and "layer1/sub/b" but not "layer10/w"; "" selects
/// all. The registry behind this holds weak references: a destroyed variable leaves it, and
/// the registry never keeps a variable (or its memory) alive. The returned handles are a
/// snapshot and do keep their variables alive while you hold them.
std::vector<Variable> global_variables(std::string_view scope_prefix = "");
/// Like global_variables, keeping only variables whose trainable() is true.
std::vector<Variable> trainable_variables(std::string_view scope_prefix = "");

namespace detail {
/// Internal. While a VariableSnapshot lives, every read of a variable on its thread returns one
/// value: the one the first read returned, or the one this thread assigned since. An eagerly run
/// call of a kiln::function holds one, so it sees one consistent value of each variable it reads,
/// as a compiled plan does. Snapshots nest: an inner one shares the outer one's values.
class VariableSnapshot {
 public:
  VariableSnapshot();
  ~VariableSnapshot();
  VariableSnapshot(const VariableSnapshot&) = delete;
  VariableSnapshot& operator=(const VariableSnapshot&) = delete;

 private:
  bool outermost_;
};
}  // namespace detail

}  // namespace kiln

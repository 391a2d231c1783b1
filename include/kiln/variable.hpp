#pragma once
/// @file variable.hpp
/// kiln::Variable: a named, mutable slot holding a tensor value.

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
struct VariableImpl;
}

/// A handle to a mutable, named tensor slot. Copies refer to the same variable; `id()` is its
/// unique identity, which kiln::function's cache keys on. Assignments must keep the dtype and
/// shape. Inside a traced function, reading a variable is bound at call time (by reference),
/// and assign* become ordered side effects of the compiled graph.
class Variable {
 public:
  /// An empty handle (no variable); most methods throw on it.
  Variable() = default;
  /// A new variable holding `initial` (which must be defined).
  explicit Variable(const Tensor& initial, std::string name = "Variable", bool trainable = true);

  bool defined() const { return impl_ != nullptr; }
  /// The current value (a symbolic read while tracing).
  Tensor value() const;
  void assign(const Tensor& value) const;
  void assign_add(const Tensor& delta) const;
  void assign_sub(const Tensor& delta) const;

  const std::string& name() const;
  bool trainable() const;
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

}  // namespace kiln

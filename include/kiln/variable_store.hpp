#pragma once
/// @file variable_store.hpp
/// get_variable with explicit reuse rules, on a variable store (TF1's variable_scope semantics
/// made strict: a variable is created once and found again by its scoped name).

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/init.hpp"
#include "kiln/shape.hpp"
#include "kiln/variable.hpp"

namespace kiln {

namespace detail {
struct VariableStoreState;
}

/// What get_variable does when a variable of that name exists (or not).
enum class Reuse {
  No,   ///< Create it; throw if it already exists.
  Yes,  ///< Return the existing one; throw if it does not exist.
  Auto  ///< Create it the first time, return the same variable afterwards.
};

/// Variables by full name. The store holds strong references: a variable made by
/// get_variable lives as long as the store (or until clear()), which is what lets a later
/// Reuse::Yes / Reuse::Auto call find it. Thread-safe.
class VariableStore {
 public:
  VariableStore();
  ~VariableStore();
  VariableStore(const VariableStore&) = delete;
  VariableStore& operator=(const VariableStore&) = delete;

  /// The variable named scoped_name(name) (the current kiln::NameScope + "/" + name),
  /// created from `initializer(shape, dtype)` or found, according to `reuse`. Errors:
  /// - Reuse::No and it exists: "[get_variable] variable layer1/weights already exists ...";
  /// - Reuse::Yes and it does not: "[get_variable] variable layer1/weights does not exist ...";
  /// - it exists with another shape or dtype: the message names both.
  /// `trainable` applies only when the variable is created. The initializer defaults to
  /// glorot_uniform (unseeded: the global stream), as TensorFlow's get_variable. Inside a
  /// kiln::function, creation is allowed only during the first trace (finding an existing
  /// variable always is); a variable created by a trace that then fails is removed from the
  /// store again.
  Variable get_variable(std::string_view name, const Shape& shape,
                        const init::Initializer& initializer = init::glorot_uniform(),
                        Reuse reuse = Reuse::No, DType dtype = f32, bool trainable = true);
  /// The existing variable scoped_name(name), whatever its shape and dtype: `reuse` must be
  /// Reuse::Yes (creating needs a shape). "[get_variable] variable layer1/w does not exist ..."
  /// when there is none.
  Variable get_variable(std::string_view name, Reuse reuse);

  /// The variable with exactly this full name (no scope applied), or an empty handle.
  Variable find(std::string_view full_name) const;
  /// Every variable of the store, in creation order.
  std::vector<Variable> variables() const;
  std::size_t size() const;
  /// Drops the store's references (the variables die unless held elsewhere).
  void clear();

 private:
  std::shared_ptr<detail::VariableStoreState> state_;
};

/// The store kiln::get_variable uses. kiln::clear_session() clears it.
VariableStore& default_variable_store();

/// default_variable_store().get_variable(...): see VariableStore::get_variable.
Variable get_variable(std::string_view name, const Shape& shape,
                      const init::Initializer& initializer = init::glorot_uniform(),
                      Reuse reuse = Reuse::No, DType dtype = f32, bool trainable = true);
/// default_variable_store().get_variable(name, Reuse::Yes): the existing variable, any shape.
Variable get_variable(std::string_view name, Reuse reuse);

/// The live variable with exactly this full name (no scope applied): the default store's if
/// it has one, else the one variable of that name anywhere (a module's, a bare Variable's).
/// An empty handle when there is none; a kiln::Error when several live variables share the
/// name (two root modules with the same name), listing how many.
Variable find_variable(std::string_view full_name);

/// Adds `variable` to the named collection (TensorFlow's tf.add_to_collection, e.g.
/// "model_variables"); adding it twice keeps one entry. Collections hold weak references: a
/// destroyed variable leaves them, and they keep nothing alive. kiln::clear_session() empties
/// them.
void add_to_collection(std::string_view collection, const Variable& variable);
/// The live variables of the collection, in the order they were added, whose names lie under
/// `scope_prefix` by whole path components ("" selects all); empty for an unknown collection.
std::vector<Variable> get_collection(std::string_view collection,
                                     std::string_view scope_prefix = "");

}  // namespace kiln

#include "kiln/variable_store.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/fail.hpp"
#include "kiln/name_scope.hpp"
#include "state/names.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

struct VariableStoreState {
  mutable std::mutex mutex;
  std::unordered_map<std::string, Variable> variables;
};

}  // namespace detail

namespace {

constexpr std::string_view op = "get_variable";

const char* reuse_name(Reuse reuse) {
  switch (reuse) {
    case Reuse::No:
      return "Reuse::No";
    case Reuse::Yes:
      return "Reuse::Yes";
    case Reuse::Auto:
      return "Reuse::Auto";
  }
  return "Reuse(?)";
}

// The existing variable `v` answers a request with `reuse`, `shape` and `dtype`.
Variable reuse_existing(const Variable& v, Reuse reuse, const Shape& shape, DType dtype) {
  if (reuse == Reuse::No)
    detail::fail(op,
                 "variable {} already exists ({} {}); pass Reuse::Yes or Reuse::Auto to share "
                 "it, or choose another name",
                 v.name(), v.dtype(), v.shape());
  if (v.shape() != shape || v.dtype() != dtype)
    detail::fail(op, "variable {} exists as {} {}; {} requested {} {}", v.name(), v.dtype(),
                 v.shape(), reuse_name(reuse), dtype, shape);
  return v;
}

}  // namespace

VariableStore::VariableStore() : state_(std::make_shared<detail::VariableStoreState>()) {}
VariableStore::~VariableStore() = default;

Variable VariableStore::get_variable(std::string_view name, const Shape& shape,
                                     const init::Initializer& initializer, Reuse reuse, DType dtype,
                                     bool trainable) {
  detail::check_name(op, "variable name", name, /*allow_slash*/ true);
  std::string full = scoped_name(name);
  auto& st = *state_;
  {
    std::lock_guard lock(st.mutex);
    auto it = st.variables.find(full);
    if (it != st.variables.end()) return reuse_existing(it->second, reuse, shape, dtype);
  }
  if (reuse == Reuse::Yes)
    detail::fail(op,
                 "variable {} does not exist; Reuse::Yes only returns existing variables (create "
                 "it first, or use Reuse::Auto)",
                 full);
  detail::check_variable_creation_allowed(full);
  Tensor initial = initializer(shape, dtype);  // outside the lock: it may be slow

  std::lock_guard lock(st.mutex);
  auto it = st.variables.find(full);
  if (it != st.variables.end()) return reuse_existing(it->second, reuse, shape, dtype);
  Variable v = detail::create_variable(initial, full, trainable);
  st.variables.emplace(full, v);
  // A trace that fails after this point must not leave the variable in the store, unless
  // another trace that succeeded or eager code used it meanwhile.
  detail::on_rollback(*v.impl(), [weak = std::weak_ptr(state_), full, id = v.id()]() noexcept {
    auto state = weak.lock();
    if (!state) return;
    Variable removed;  // released after the lock
    std::lock_guard undo_lock(state->mutex);
    auto found = state->variables.find(full);
    if (found == state->variables.end() || found->second.id() != id) return;
    removed = std::move(found->second);
    state->variables.erase(found);
  });
  return v;
}

Variable VariableStore::get_variable(std::string_view name, Reuse reuse) {
  detail::check_name(op, "variable name", name, /*allow_slash*/ true);
  const std::string full = scoped_name(name);
  if (reuse != Reuse::Yes)
    detail::fail(op,
                 "variable {}: {} needs a shape and an initializer to create it; without a "
                 "shape only Reuse::Yes (find the existing variable) is possible",
                 full, reuse_name(reuse));
  Variable v = find(full);
  if (!v.defined())
    detail::fail(op,
                 "variable {} does not exist; Reuse::Yes only returns existing variables (create "
                 "it first, or use Reuse::Auto with a shape)",
                 full);
  return v;
}

Variable VariableStore::find(std::string_view full_name) const {
  std::lock_guard lock(state_->mutex);
  auto it = state_->variables.find(std::string(full_name));
  return it == state_->variables.end() ? Variable() : it->second;
}

std::vector<Variable> VariableStore::variables() const {
  std::vector<Variable> out;
  {
    std::lock_guard lock(state_->mutex);
    out.reserve(state_->variables.size());
    for (const auto& [name, v] : state_->variables) out.push_back(v);
  }
  std::sort(out.begin(), out.end(),
            [](const Variable& a, const Variable& b) { return a.id() < b.id(); });
  return out;
}

std::size_t VariableStore::size() const {
  std::lock_guard lock(state_->mutex);
  return state_->variables.size();
}

void VariableStore::clear() {
  std::unordered_map<std::string, Variable> dropped;  // released after the lock
  std::lock_guard lock(state_->mutex);
  dropped.swap(state_->variables);
}

VariableStore& default_variable_store() {
  static auto* store = new VariableStore;
  return *store;
}

Variable get_variable(std::string_view name, const Shape& shape,
                      const init::Initializer& initializer, Reuse reuse, DType dtype,
                      bool trainable) {
  return default_variable_store().get_variable(name, shape, initializer, reuse, dtype, trainable);
}

Variable get_variable(std::string_view name, Reuse reuse) {
  return default_variable_store().get_variable(name, reuse);
}

Variable find_variable(std::string_view full_name) {
  if (Variable v = default_variable_store().find(full_name); v.defined()) return v;
  Variable found;
  std::size_t count = 0;
  for (Variable& v : global_variables(full_name))
    if (v.name() == full_name) {
      found = std::move(v);
      ++count;
    }
  if (count > 1)
    detail::fail("find_variable",
                 "{} live variables are named {} (two root modules of one name?); look it up "
                 "from its module instead (Module::variable)",
                 count, full_name);
  return found;
}

}  // namespace kiln

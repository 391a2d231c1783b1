#include "kiln/module.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/name_scope.hpp"
#include "state/deferred_restore.hpp"
#include "state/names.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

struct ModuleVariable {
  std::string name;  // local: "kernel" (may contain '/')
  Variable variable;
  bool trainable;  // as declared; frozen modules override it
};

struct ModuleChild {
  std::string name;
  ModuleState* state;
  std::shared_ptr<Module> owned;  // null when registered by reference
};

struct ModuleState {
  Module* owner = nullptr;
  std::string name;
  std::string scope;  // the NameScope active at construction (used while the module is a root)
  bool automatic_name = false;
  bool frozen = false;
  std::vector<ModuleVariable> variables;
  std::vector<ModuleChild> children;
  std::vector<ModuleState*> parents;     // every module this one is registered in
  ModuleState* naming_parent = nullptr;  // the one its path comes from (the first)
  std::string name_in_parent;
  std::uint64_t restore_owner = 0;  // values load_weights queued before it was built (if any)
};

}  // namespace detail

namespace {

using detail::ModuleState;

// One lock for every module: the tree links modules to each other, so a per-module lock would
// need a lock order across the tree. Recursive because destroying a module may destroy owned
// children, and an initializer may build other modules.
std::recursive_mutex& tree_mutex() {
  static auto* m = new std::recursive_mutex;
  return *m;
}
using TreeLock = std::lock_guard<std::recursive_mutex>;

std::string state_path(const ModuleState& s) {
  if (s.naming_parent != nullptr)
    return detail::join_path(state_path(*s.naming_parent), s.name_in_parent);
  return detail::join_path(s.scope, s.name);
}

bool effectively_frozen(const ModuleState& s) {
  if (s.frozen) return true;
  return std::any_of(s.parents.begin(), s.parents.end(),
                     [](const ModuleState* p) { return effectively_frozen(*p); });
}

// Applies each variable's declared trainability and the frozen state of its modules to the
// variables of s's subtree.
void sync_trainable(const ModuleState& s, std::unordered_set<const ModuleState*>& seen) {
  if (!seen.insert(&s).second) return;
  const bool frozen = effectively_frozen(s);
  for (const auto& v : s.variables) v.variable.set_trainable(v.trainable && !frozen);
  for (const auto& c : s.children) sync_trainable(*c.state, seen);
}
void sync_trainable(const ModuleState& s) {
  std::unordered_set<const ModuleState*> seen;
  sync_trainable(s, seen);
}

// Renames the variables of s's subtree after its path changed.
void refresh_names(const ModuleState& s) {
  const std::string path = state_path(s);
  for (const auto& v : s.variables) {
    std::string name = detail::join_path(path, v.name);
    if (name != v.variable.name()) detail::rename_variable(*v.variable.impl(), std::move(name));
  }
  for (const auto& c : s.children)
    if (c.state->naming_parent == &s) refresh_names(*c.state);
}

bool reaches(const ModuleState& from, const ModuleState* target) {
  if (&from == target) return true;
  return std::any_of(from.children.begin(), from.children.end(),
                     [&](const detail::ModuleChild& c) { return reaches(*c.state, target); });
}

std::string_view first_component(std::string_view path) { return path.substr(0, path.find('/')); }

const detail::ModuleVariable* find_own(const ModuleState& s, std::string_view name) {
  for (const auto& v : s.variables)
    if (v.name == name) return &v;
  return nullptr;
}

const detail::ModuleChild* find_child(const ModuleState& s, std::string_view name) {
  for (const auto& c : s.children)
    if (c.name == name) return &c;
  return nullptr;
}

const Variable* resolve(const ModuleState& s, std::string_view path) {
  if (const auto* v = find_own(s, path)) return &v->variable;
  const auto slash = path.find('/');
  if (slash == std::string_view::npos) return nullptr;
  const auto* child = find_child(s, path.substr(0, slash));
  return child == nullptr ? nullptr : resolve(*child->state, path.substr(slash + 1));
}

const Variable* resolve_relative_or_rooted(const ModuleState& s, std::string_view path) {
  if (const Variable* v = resolve(s, path)) return v;
  if (path.size() > s.name.size() && path.starts_with(s.name) && path[s.name.size()] == '/')
    return resolve(s, path.substr(s.name.size() + 1));
  return nullptr;
}

// Depth-first walk: own variables, then children; each variable and module once.
template <class Visit>
void walk(const ModuleState& s, const std::string& prefix,
          std::unordered_set<const ModuleState*>& seen_modules,
          std::unordered_set<std::uint64_t>& seen_variables, const Visit& visit) {
  if (!seen_modules.insert(&s).second) return;
  for (const auto& v : s.variables)
    if (seen_variables.insert(v.variable.id()).second)
      visit(detail::join_path(prefix, v.name), v.variable);
  for (const auto& c : s.children)
    walk(*c.state, detail::join_path(prefix, c.name), seen_modules, seen_variables, visit);
}

template <class Visit>
void walk(const ModuleState& s, const Visit& visit) {
  std::unordered_set<const ModuleState*> seen_modules;
  std::unordered_set<std::uint64_t> seen_variables;
  walk(s, s.name, seen_modules, seen_variables, visit);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "closest: l1/kernel, l1/bias, l2/kernel" (relative paths, by edit distance).
std::string closest_paths(const ModuleState& s, std::string_view wanted) {
  std::vector<std::pair<std::size_t, std::string>> candidates;
  walk(s, [&](const std::string& path, const Variable&) {
    std::string relative = path.substr(s.name.size() + 1);
    candidates.emplace_back(edit_distance(relative, wanted), std::move(relative));
  });
  if (candidates.empty())
    return "it has no variables yet (layers create theirs on their first call)";
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out = "closest: ";
  for (std::size_t i = 0; i < std::min<std::size_t>(3, candidates.size()); ++i)
    out += (i ? ", " : "") + candidates[i].second;
  if (candidates.size() > 3) out += fmt::format(" ({} variables in all)", candidates.size());
  return out;
}

// Removes `parent` from c's parents (after the parent dropped or lost its entry for c): another
// parent, if any, now gives c its path; names and trainability follow.
void forget_parent(ModuleState& c, const ModuleState* parent) {
  std::erase(c.parents, parent);
  if (c.naming_parent == parent) {
    c.naming_parent = nullptr;
    c.name_in_parent.clear();
    for (ModuleState* p : c.parents) {
      if (auto entry = std::find_if(p->children.begin(), p->children.end(),
                                    [&](const detail::ModuleChild& e) { return e.state == &c; });
          entry != p->children.end()) {
        c.naming_parent = p;
        c.name_in_parent = entry->name;
        break;
      }
    }
    refresh_names(c);
  }
  sync_trainable(c);
}

}  // namespace

Module::Module(std::string name) : state_(std::make_shared<ModuleState>()) {
  detail::check_name("Module", "module name", name, /*allow_slash*/ false);
  state_->owner = this;
  state_->name = std::move(name);
  state_->scope = current_name_scope();
}

Module::Module(AutomaticName name) : Module(std::string(name.base)) {
  state_->automatic_name = true;
}

Module::Module() : Module(AutomaticName{"module"}) {}

Module::~Module() { release(); }

Module::Module(Module&& other) noexcept {
  TreeLock lock(tree_mutex());
  state_ = std::move(other.state_);
  if (state_) state_->owner = this;
}

// Unlinks this module from its parents and children, then drops its state (its variables die
// unless held elsewhere; owned children are destroyed).
void Module::release() noexcept {
  TreeLock lock(tree_mutex());
  if (!state_) return;
  ModuleState* self = state_.get();
  for (ModuleState* parent : self->parents)
    std::erase_if(parent->children, [&](const detail::ModuleChild& c) { return c.state == self; });
  std::vector<detail::ModuleChild> children = std::move(self->children);
  self->children.clear();
  for (auto& child : children) forget_parent(*child.state, self);
  if (self->restore_owner != 0) detail::drop_deferred_restores(self->restore_owner);
  std::shared_ptr<ModuleState> dropped = std::move(state_);
  children.clear();  // destroys owned children (they no longer list this module as a parent)
}

std::uint64_t detail::deferred_restore_owner(Module& module) {
  TreeLock lock(tree_mutex());
  if (!module.state_) detail::fail("Module", "this module was moved from");
  if (module.state_->restore_owner == 0) module.state_->restore_owner = new_restore_owner();
  return module.state_->restore_owner;
}

const std::string& Module::name() const {
  if (!state_) detail::fail("Module", "this module was moved from");
  return state_->name;
}

bool Module::has_automatic_name() const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.has_automatic_name", "this module was moved from");
  return state_->automatic_name;
}

std::string Module::path() const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.path", "this module was moved from");
  return state_path(*state_);
}

Variable Module::add_variable(std::string_view name, const Shape& shape,
                              const init::Initializer& initializer, bool trainable, DType dtype) {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.add_variable", "this module was moved from");
  ModuleState& s = *state_;
  detail::check_name("Module.add_variable", "variable name", name, /*allow_slash*/ true);
  if (const auto* existing = find_own(s, name)) {
    const Variable& v = existing->variable;
    if (v.shape() != shape || v.dtype() != dtype)
      detail::fail("Module.add_variable", "variable {} exists as {} {}; requested {} {}", v.name(),
                   v.dtype(), v.shape(), dtype, shape);
    return v;
  }
  if (find_child(s, first_component(name)) != nullptr)
    detail::fail("Module.add_variable",
                 "{} cannot add variable '{}': '{}' is the name of a child module", state_path(s),
                 name, first_component(name));
  std::string full = detail::join_path(state_path(s), name);
  detail::check_variable_creation_allowed(full);
  Tensor initial = initializer(shape, dtype);
  Variable v =
      detail::create_variable(initial, std::move(full), trainable && !effectively_frozen(s));
  s.variables.push_back({std::string(name), v, trainable});
  // If the trace that created it fails and nothing else used it, the module forgets the
  // variable (a failed trace leaves no trace), and the retry creates it again.
  detail::on_rollback(*v.impl(), [weak = std::weak_ptr(state_), id = v.id()]() noexcept {
    TreeLock undo_lock(tree_mutex());
    if (auto state = weak.lock())
      std::erase_if(state->variables,
                    [&](const detail::ModuleVariable& e) { return e.variable.id() == id; });
  });
  return v;
}

bool Module::remove_variable(std::string_view name) {
  Variable removed;  // released after the lock
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.remove_variable", "this module was moved from");
  auto& vars = state_->variables;
  auto it = std::find_if(vars.begin(), vars.end(),
                         [&](const detail::ModuleVariable& v) { return v.name == name; });
  if (it == vars.end()) return false;
  removed = std::move(it->variable);
  vars.erase(it);
  return true;
}

Module& Module::add_module(std::string_view name, Module& child) {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.add_module", "this module was moved from");
  if (!child.state_) detail::fail("Module.add_module", "the child '{}' was moved from", name);
  ModuleState& s = *state_;
  ModuleState& c = *child.state_;
  detail::check_name("Module.add_module", "child name", name, /*allow_slash*/ false);
  const std::string parent_path = state_path(s);
  const auto taken = [&](std::string_view candidate) {
    if (find_child(s, candidate) != nullptr) return true;
    return std::any_of(s.variables.begin(), s.variables.end(),
                       [&](const auto& v) { return first_component(v.name) == candidate; });
  };
  std::string unique;  // an automatic name made unique among the siblings
  if (c.automatic_name && name == c.name && taken(name) &&
      std::find(c.parents.begin(), c.parents.end(), &s) == c.parents.end()) {
    for (long k = 1; unique.empty() || taken(unique); ++k) unique = fmt::format("{}_{}", name, k);
    name = unique;
    if (c.naming_parent == nullptr) c.name = unique;
  }
  if (const auto* existing = find_child(s, name))
    detail::fail("Module.add_module", "{} already has a child named '{}' (module '{}')",
                 parent_path, name, existing->state->name);
  if (std::find(c.parents.begin(), c.parents.end(), &s) != c.parents.end())
    detail::fail("Module.add_module", "module '{}' is already a child of {}", c.name, parent_path);
  for (const auto& v : s.variables)
    if (first_component(v.name) == name)
      detail::fail("Module.add_module", "{} cannot add child '{}': it has a variable '{}'",
                   parent_path, name, v.name);
  if (reaches(c, &s))
    detail::fail("Module.add_module", "adding '{}' to {} would make a cycle ({} is inside '{}')",
                 name, parent_path, parent_path, c.name);
  s.children.push_back({std::string(name), &c, nullptr});
  c.parents.push_back(&s);
  if (c.naming_parent == nullptr) {
    c.naming_parent = &s;
    c.name_in_parent = std::string(name);
    refresh_names(c);
  }
  sync_trainable(c);
  if (detail::TraceHooks* trace = detail::active_trace()) {
    // A failed trace also undoes registrations it made (a layer adding a child lazily).
    trace->on_failure(
        [parent = std::weak_ptr(state_), child_state = std::weak_ptr(child.state_)]() noexcept {
          TreeLock undo_lock(tree_mutex());
          auto p = parent.lock();
          auto c = child_state.lock();
          if (!p || !c) return;
          std::shared_ptr<Module> owned;  // released after the links are consistent
          auto it = std::find_if(p->children.begin(), p->children.end(),
                                 [&](const detail::ModuleChild& e) { return e.state == c.get(); });
          if (it == p->children.end()) return;
          owned = std::move(it->owned);
          p->children.erase(it);
          forget_parent(*c, p.get());
        });
  }
  return child;
}

void Module::add_owned_module(std::string_view name, std::shared_ptr<Module> child) {
  if (!child) detail::fail("Module.add_module", "the child '{}' is a null pointer", name);
  TreeLock lock(tree_mutex());
  add_module(name, *child);
  state_->children.back().owned = std::move(child);
}

std::vector<Variable> Module::variables() const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.variables", "this module was moved from");
  std::vector<Variable> out;
  walk(*state_, [&](const std::string&, const Variable& v) { out.push_back(v); });
  return out;
}

std::vector<Variable> Module::trainable_variables() const {
  auto all = variables();
  std::erase_if(all, [](const Variable& v) { return !v.trainable(); });
  return all;
}

std::vector<Variable> Module::non_trainable_variables() const {
  auto all = variables();
  std::erase_if(all, [](const Variable& v) { return v.trainable(); });
  return all;
}

std::vector<std::pair<std::string, Variable>> Module::named_variables() const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.named_variables", "this module was moved from");
  std::vector<std::pair<std::string, Variable>> out;
  walk(*state_, [&](const std::string& path, const Variable& v) { out.emplace_back(path, v); });
  return out;
}

Variable Module::variable(std::string_view path) const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.variable", "this module was moved from");
  if (const Variable* v = resolve_relative_or_rooted(*state_, path)) return *v;
  detail::fail("Module.variable", "{} has no variable '{}'; {}", state_path(*state_), path,
               closest_paths(*state_, path));
}

bool Module::has_variable(std::string_view path) const {
  TreeLock lock(tree_mutex());
  return state_ && resolve_relative_or_rooted(*state_, path) != nullptr;
}

std::vector<std::pair<std::string, Module*>> Module::children() const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.children", "this module was moved from");
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& c : state_->children) out.emplace_back(c.name, c.state->owner);
  return out;
}

std::vector<Tensor> Module::get_weights() const {
  std::vector<Tensor> out;
  for (const Variable& v : variables()) out.push_back(v.value());
  return out;
}

void Module::set_weights(const std::vector<Tensor>& weights) {
  TreeLock lock(tree_mutex());
  const auto vars = variables();
  const std::string path = state_path(*state_);
  if (vars.empty() && !weights.empty())
    detail::fail("Module.set_weights",
                 "{} has no variables yet, so it cannot take {} values: it is not built (layers "
                 "create their variables on their first call; call the model once on an input "
                 "of the right shape first)",
                 path, weights.size());
  if (weights.size() != vars.size())
    detail::fail("Module.set_weights", "{} has {} variables; got {} values", path, vars.size(),
                 weights.size());
  const bool tracing = detail::active_trace() != nullptr;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const Tensor& w = weights[i];
    const Variable& v = vars[i];
    if (!w.defined())
      detail::fail("Module.set_weights", "value {} (for {}) is an undefined tensor", i, v.name());
    if (w.dtype() != v.dtype() || w.shape() != v.shape())
      detail::fail("Module.set_weights", "value {} is {} {}, but variable {} is {} {}", i,
                   w.dtype(), w.shape(), v.name(), v.dtype(), v.shape());
    if (!tracing && w.impl()->is_symbolic())
      detail::fail("Module.set_weights",
                   "value {} (for {}) is a symbolic tensor of a traced function", i, v.name());
  }
  for (std::size_t i = 0; i < vars.size(); ++i) vars[i].assign(weights[i]);
}

void Module::freeze() {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.freeze", "this module was moved from");
  state_->frozen = true;
  sync_trainable(*state_);
}

void Module::unfreeze() {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.unfreeze", "this module was moved from");
  state_->frozen = false;
  sync_trainable(*state_);
}

bool Module::frozen() const {
  TreeLock lock(tree_mutex());
  if (!state_) detail::fail("Module.frozen", "this module was moved from");
  return state_->frozen;
}

}  // namespace kiln

#pragma once
/// @file module.hpp
/// kiln::Module: a named node of a model tree that owns variables and registers child modules,
/// so every parameter has a stable path ("net/l1/kernel") and is created exactly once.

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/init.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln {

class Module;
namespace detail {
struct ModuleState;
/// The owner id under which values loaded into `module` before it was built wait for its
/// variables (made on first use; the queue is dropped with the module). Internal.
std::uint64_t deferred_restore_owner(Module& module);
}  // namespace detail

/// Base class of layers and models. A module has a name, variables it created with
/// add_variable, and child modules registered with add_module. Subclass it:
///
/// ```cpp
/// struct Net : kiln::Module {
///   MyLayer l1, l2;
///   Net() : Module("net") { add_module("l1", l1); add_module("l2", l2); }
/// };
/// ```
///
/// **Paths and names.** A module's path is its parent's path + "/" + the name it was
/// registered under, or, for a module with no parent, the kiln::NameScope active when it was
/// constructed + "/" + its name. A variable's name is the owning module's path + "/" + its
/// local name: "net/l1/kernel". When a module is registered under a parent, the variables of
/// its subtree are renamed to match (so creating variables before registration is fine).
/// A module registered in several parents (a shared layer) takes its path from the first.
///
/// **Created once.** add_variable creates a variable on its first call and returns the same
/// variable on every later call with that name; layers call it lazily on their first call,
/// when input sizes are known. Inside a kiln::function this happens during the first trace,
/// and a later trace finds the variables instead of creating them (creating a new one then is
/// a clear error). If the first trace fails, the variables it added are removed again.
///
/// **Lifetime.** Registration by reference (add_module(name, Module&)) does not own the child:
/// typically the child is a member of the parent. Either side may be destroyed first; a
/// destroyed child leaves its parents and a destroyed parent leaves its children (which then
/// become roots and are renamed accordingly). add_module(name, std::shared_ptr<M>) owns the
/// child. Modules cannot be copied (whether a copy would share or clone the variables is
/// ambiguous); they can be moved: the moved-to module takes over the name, variables, children
/// and registrations in parents, and the moved-from module must not be used again (anything but
/// destruction throws). Moving a model with members registered by reference keeps it
/// consistent, because each member's move re-points its registration too. Modules are not
/// assignable (a registered module would change under its parents); to rebuild a model, make
/// a new object (e.g. std::optional<Net>::emplace()).
///
/// **Threads.** Every method is synchronized by one process-wide lock, so modules may be built
/// and read from several threads; do not hold a module across a fork.
class Module {
 public:
  /// The name of a module constructed without one: `base` itself ("dense", "module"), made
  /// unique among its siblings when the module is registered under it (see add_module). Two
  /// instances of one architecture therefore have the same paths, whatever else the process
  /// built before; kiln::unique_name gives process-wide counters where those are wanted.
  struct AutomaticName {
    std::string_view base;
  };

  /// A root module named `name` (one path component, no '/'); the name is used as given.
  explicit Module(std::string name);
  /// A root module with the automatic name `name.base`.
  explicit Module(AutomaticName name);
  /// A root module with the automatic name "module".
  Module();
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&& other) noexcept;
  Module& operator=(Module&&) = delete;

  const std::string& name() const;
  /// Whether the name is automatic (constructed from an AutomaticName): add_module may then
  /// change it to stay unique among the siblings.
  bool has_automatic_name() const;
  /// The full path: "outer_scope/net/l1" (see the class comment).
  std::string path() const;

  /// The variable `name` of this module, created from `initializer(shape, dtype)` the first
  /// time and returned as is afterwards. `name` may contain '/' (e.g. optimizer slots
  /// "net/l1/kernel/m"); its first component must not be the name of a child module. A later
  /// call with another shape or dtype throws, naming both. `trainable` is the variable's
  /// declared trainability (freeze() may turn it off while the module is frozen).
  Variable add_variable(std::string_view name, const Shape& shape,
                        const init::Initializer& initializer, bool trainable = true,
                        DType dtype = f32);

  /// Removes this module's own variable `name` (the local name given to add_variable), so a
  /// later add_variable with that name creates a new one. Returns whether it existed. The
  /// variable lives on while other handles hold it. For modules whose set of variables follows
  /// something else, e.g. an optimizer dropping the slots of a variable that was destroyed.
  bool remove_variable(std::string_view name);

  /// Registers `child` under `name` (one path component, unique among this module's children
  /// and variables) without owning it, and returns it. Throws for a duplicate name, a child
  /// already registered here, or a registration that would make a cycle. A child with an
  /// automatic name registered under that name takes the first free one of name, name_1,
  /// name_2, ... here instead (and, if this parent gives it its path, as its name): so
  /// nn::Sequential{Dense(8), Dense(1)} holds "dense" and "dense_1".
  Module& add_module(std::string_view name, Module& child);
  /// Registers and owns `child` (kept alive as long as this module); returns it.
  template <class M>
  requires std::derived_from<M, Module> M& add_module(std::string_view name,
                                                      std::shared_ptr<M> child) {
    M* raw = child.get();
    add_owned_module(name, std::shared_ptr<Module>(std::move(child)));  // throws if null
    return *raw;
  }

  /// Every variable of the subtree, each once: this module's own in creation order, then each
  /// child's (depth-first, in registration order). This order is stable and is the order of
  /// get_weights/set_weights.
  std::vector<Variable> variables() const;
  /// variables() whose trainable() is true (frozen modules contribute none).
  std::vector<Variable> trainable_variables() const;
  /// variables() whose trainable() is false.
  std::vector<Variable> non_trainable_variables() const;
  /// variables() with their paths from this module, rooted at its name: "net/l1/kernel".
  std::vector<std::pair<std::string, Variable>> named_variables() const;
  /// The variable at `path`, relative to this module ("l1/kernel") or rooted at its name
  /// ("net/l1/kernel"). Throws a kiln::Error listing the closest existing paths when missing.
  Variable variable(std::string_view path) const;
  /// Whether variable(path) would find a variable.
  bool has_variable(std::string_view path) const;
  /// The direct children with the names they were registered under, in registration order.
  std::vector<std::pair<std::string, Module*>> children() const;

  /// The current values of variables(), in that order.
  std::vector<Tensor> get_weights() const;
  /// Assigns `weights` to variables(), in that order. Every value is checked first (count,
  /// dtype, shape); if any is wrong nothing is assigned and the error names the variable.
  void set_weights(const std::vector<Tensor>& weights);

  /// Makes every variable of the subtree non-trainable (children included, shared ones too).
  void freeze();
  /// Undoes freeze(): each variable's trainability returns to the one it was created with,
  /// unless another module that contains it is still frozen.
  void unfreeze();
  /// Whether freeze() was called on this module (and not undone).
  bool frozen() const;

 private:
  friend std::uint64_t detail::deferred_restore_owner(Module& module);
  void add_owned_module(std::string_view name, std::shared_ptr<Module> child);
  void release() noexcept;

  std::shared_ptr<detail::ModuleState> state_;
};

}  // namespace kiln

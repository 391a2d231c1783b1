#pragma once
/// @file name_scope.hpp
/// Hierarchical names: kiln::NameScope prefixes the names of variables created inside it, and
/// kiln::unique_name hands out automatic names ("dense", "dense_1", ...).

#include <string>
#include <string_view>

namespace kiln {

/// RAII: while alive, names of variables created on this thread (kiln::Variable,
/// kiln::get_variable) are prefixed with the scope: inside `NameScope a("layer1")` the
/// variable "weights" is named "layer1/weights". Scopes nest ("outer/inner/weights") and are
/// per thread. Unlike TF1's name_scope, a scope name is used as given (never uniquified), so
/// re-entering a scope finds the same variables with Reuse::Yes / Reuse::Auto.
///
/// `name` is one or more path components separated by '/' ("block/attention"); empty
/// components are an error. A NameScope must be destroyed on the thread that created it, in
/// reverse order of creation (which RAII gives).
class NameScope {
 public:
  explicit NameScope(std::string_view name);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;

  /// The full prefix this scope established, e.g. "outer/inner".
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string previous_;
};

/// The current scope prefix on this thread ("" outside any NameScope).
std::string current_name_scope();

/// `name` prefixed with the current scope: "layer1/weights" (just `name` at top level).
std::string scoped_name(std::string_view name);

/// An automatic name: `base` the first time it is requested in the current scope, then
/// "base_1", "base_2", ... (Keras's convention). The counters are per scope (the same base in
/// scopes "a" and "b" starts at "base" in each) and process-wide; kiln::clear_session()
/// resets them. Explicit names given by users are never changed. A Variable without a name
/// takes its name from here; modules and layers without a name do not (they are unique among
/// their siblings instead, see kiln::Module::AutomaticName): pass
/// `kiln::unique_name("dense")` as a layer's name to number it process-wide, as Keras does.
std::string unique_name(std::string_view base);

}  // namespace kiln

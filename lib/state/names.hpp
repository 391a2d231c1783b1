#pragma once
// Name checks and path helpers shared by NameScope, the variable store and Module.

#include <string>
#include <string_view>

namespace kiln::detail {

/// Throws "[op] invalid <what> '<name>': ..." unless `name` is a valid path: non-empty
/// components separated by single '/' (or a single component when `allow_slash` is false).
void check_name(std::string_view op, std::string_view what, std::string_view name,
                bool allow_slash);

/// "a/b" from prefix "a" and name "b"; just `name` when the prefix is empty.
std::string join_path(std::string_view prefix, std::string_view name);

/// Whether `path` lies under `prefix` by whole components: "layer1" matches "layer1" and
/// "layer1/w" but not "layer10/w". An empty prefix matches everything; a trailing '/' on the
/// prefix is ignored.
bool path_has_prefix(std::string_view path, std::string_view prefix);

/// Restarts every unique_name counter (part of kiln::clear_session()).
void reset_unique_names();
/// Empties every named collection (part of kiln::clear_session()).
void clear_collections();

}  // namespace kiln::detail

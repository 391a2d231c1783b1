#include "kiln/name_scope.hpp"

#include <mutex>
#include <unordered_map>

#include "core/fail.hpp"
#include "state/names.hpp"

namespace kiln {

namespace detail {

namespace {

thread_local std::string current_scope;

std::mutex counters_mutex;
std::unordered_map<std::string, long>& counters() {
  static auto* map = new std::unordered_map<std::string, long>;
  return *map;
}

}  // namespace

void check_name(std::string_view op, std::string_view what, std::string_view name,
                bool allow_slash) {
  if (name.empty()) fail(op, "invalid {} '': names must not be empty", what);
  if (!allow_slash && name.find('/') != std::string_view::npos)
    fail(op,
         "invalid {} '{}': it must not contain '/' (use a NameScope or a child module for "
         "hierarchy)",
         what, name);
  if (name.front() == '/' || name.back() == '/' || name.find("//") != std::string_view::npos)
    fail(op, "invalid {} '{}': path components must not be empty", what, name);
}

std::string join_path(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  std::string out;
  out.reserve(prefix.size() + 1 + name.size());
  out.append(prefix).append("/").append(name);
  return out;
}

bool path_has_prefix(std::string_view path, std::string_view prefix) {
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix.empty()) return true;
  if (!path.starts_with(prefix)) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

void reset_unique_names() {
  std::lock_guard lock(counters_mutex);
  counters().clear();
}

}  // namespace detail

NameScope::NameScope(std::string_view name) {
  detail::check_name("NameScope", "scope name", name, /*allow_slash*/ true);
  path_ = detail::join_path(detail::current_scope, name);
  previous_ = std::move(detail::current_scope);
  detail::current_scope = path_;
}

NameScope::~NameScope() { detail::current_scope = std::move(previous_); }

std::string current_name_scope() { return detail::current_scope; }

std::string scoped_name(std::string_view name) {
  return detail::join_path(detail::current_scope, name);
}

std::string unique_name(std::string_view base) {
  detail::check_name("unique_name", "base name", base, /*allow_slash*/ false);
  long index = 0;
  {
    std::lock_guard lock(detail::counters_mutex);
    index = detail::counters()[detail::join_path(detail::current_scope, base)]++;
  }
  return index == 0 ? std::string(base) : fmt::format("{}_{}", base, index);
}

}  // namespace kiln

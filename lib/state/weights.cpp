// save_weights / load_weights: a module's variables by path, assigned in place, all or nothing.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "io/elements.hpp"
#include "io/weights_file.hpp"
#include "kiln/checkpoint.hpp"
#include "state/deferred_restore.hpp"
#include "state/names.hpp"
#include "state/weights.hpp"

namespace kiln {

namespace detail {

void refuse_while_tracing(const char* op) {
  if (active_trace() != nullptr)
    fail(op,
         "cannot run while a function is being traced: loading assigns variables in place and "
         "belongs outside the traced function (the cached graph reads the new values)");
}

std::string describe(DType dtype, const Shape& shape) {
  return fmt::format("{} {}", dtype_name(dtype), shape.to_string());
}

std::vector<std::pair<std::string, Variable>> relative_variables(const Module& module) {
  std::vector<std::pair<std::string, Variable>> out = module.named_variables();
  const std::size_t root = module.name().size() + 1;  // "sequential/"
  for (auto& [name, variable] : out) name.erase(0, root);
  return out;
}

}  // namespace detail

namespace {

using detail::relative_variables;

/// Files written before keys were relative rooted every key at the saving module's name
/// ("sequential_1/dense/kernel"). When every key of `file` starts with one component that is
/// not a top-level component of the module's own paths, that is such a root: returns it with
/// its '/', else "".
std::string legacy_root(const std::map<std::string, Tensor>& file,
                        const std::map<std::string, Variable>& variables) {
  if (file.empty()) return {};
  const std::string& first_key = file.begin()->first;
  const std::size_t slash = first_key.find('/');
  if (slash == std::string::npos) return {};
  const std::string root = first_key.substr(0, slash + 1);
  for (const auto& [key, value] : file)
    if (!key.starts_with(root)) return {};
  for (const auto& [name, variable] : variables)
    if (name.starts_with(root)) return {};
  return root;
}

}  // namespace

std::filesystem::path detail::checkpoint_file(const std::filesystem::path& path, const char* op) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return path;
  std::filesystem::path latest = Checkpoint::latest(path);
  if (latest.empty())
    fail(op, "no checkpoint '{}' and no files '{}-<n>.safetensors'", path.string(), path.string());
  return latest;
}

std::vector<io::TensorInfo> list_variables(const std::filesystem::path& path) {
  return io::inspect(detail::checkpoint_file(path, "list_variables"));
}

Tensor load_variable(const std::filesystem::path& path, const std::string& name) {
  constexpr const char* op = "load_variable";
  const std::filesystem::path file = detail::checkpoint_file(path, op);
  bool present = false;
  for (const io::TensorInfo& info : io::inspect(file)) present = present || info.name == name;
  if (!present)
    detail::fail(op, "{} holds no tensor '{}' (list_variables shows what it holds)", file.string(),
                 io::detail::printable(name));
  switch (io::detect_format(file)) {
    case io::FileFormat::safetensors:
      return io::load_safetensors(file, {name}).at(name);
    case io::FileFormat::npz:
      return io::load_npz(file, {name}).at(name);
    case io::FileFormat::npy:
      break;
  }
  return io::load_npy(file);
}

void save_weights(const Module& module, const std::filesystem::path& path,
                  const io::Metadata& metadata) {
  detail::refuse_while_tracing("save_weights");
  std::map<std::string, Tensor> values;
  for (const auto& [name, variable] : relative_variables(module)) values[name] = variable.value();
  io::detail::write_weights_file(path, values, metadata, "save_weights");
}

LoadWeightsResult load_weights(Module& module, const std::filesystem::path& path,
                               const LoadWeightsOptions& options) {
  constexpr const char* op = "load_weights";
  detail::refuse_while_tracing(op);
  const std::map<std::string, Tensor> file = io::detail::read_weights_file(path, op);
  std::map<std::string, Variable> variables;
  for (auto& [name, variable] : relative_variables(module)) variables.emplace(name, variable);
  const std::string legacy = options.key_map ? std::string() : legacy_root(file, variables);
  const std::string rooted = module.name() + "/";
  // A target is a path relative to the module; one rooted at the module's name (a key map
  // written for older files) is found too.
  const auto find_target = [&](const std::string& target) {
    auto found = variables.find(target);
    if (found == variables.end() && target.starts_with(rooted))
      found = variables.find(target.substr(rooted.size()));
    return found;
  };

  LoadWeightsResult result;
  if (variables.empty() && !file.empty()) {
    // Not built: every value waits, under the full name its variable will have, and becomes
    // that variable's initial value when the layer creates it (as Checkpoint::restore defers).
    // A later load replaces the queue; it is dropped with the module.
    const std::uint64_t owner = detail::deferred_restore_owner(module);
    detail::drop_deferred_restores(owner);
    const std::string prefix = module.path();
    for (const auto& [key, stored] : file) {
      const std::string target = options.key_map ? options.key_map(key) : key;
      if (target.empty()) continue;
      const Tensor value = options.transform ? options.transform(key, stored) : stored;
      if (!value.defined())
        detail::fail(op, "{}: the transform returned an undefined tensor for '{}'", path.string(),
                     io::detail::printable(key));
      const std::string relative =
          target.starts_with(prefix + "/") ? target.substr(prefix.size() + 1) : target;
      detail::defer_restore(owner, detail::join_path(prefix, relative), relative, value);
      result.deferred.push_back(relative);
    }
    return result;
  }
  struct Assignment {
    std::string path;
    Variable variable;
    Tensor value;
  };
  std::vector<Assignment> assignments;
  std::set<std::string> provided;
  for (const auto& [key, stored] : file) {
    const std::string target = options.key_map ? options.key_map(key) : key.substr(legacy.size());
    if (target.empty()) continue;  // skipped by the key map
    const Tensor value = options.transform ? options.transform(key, stored) : stored;
    if (!value.defined())
      detail::fail(op, "{}: the transform returned an undefined tensor for '{}'", path.string(),
                   io::detail::printable(key));
    auto found = find_target(target);
    if (found == variables.end()) {
      result.unexpected.push_back(target == key ? key : fmt::format("{} (from {})", target, key));
      continue;
    }
    if (!provided.insert(found->first).second)
      detail::fail(op, "{}: two keys map to the variable '{}'; nothing was assigned", path.string(),
                   io::detail::printable(found->first));
    const Variable& v = found->second;
    if (value.dtype() != v.dtype() || value.shape() != v.shape()) {
      result.mismatched.push_back(fmt::format("{}: file {}, variable {}", target,
                                              detail::describe(value.dtype(), value.shape()),
                                              detail::describe(v.dtype(), v.shape())));
      continue;
    }
    assignments.push_back({found->first, v, value});
  }
  for (const auto& [name, v] : variables)
    if (provided.count(name) == 0) result.missing.push_back(name);

  const bool clean =
      result.missing.empty() && result.unexpected.empty() && result.mismatched.empty();
  if (options.strict && !clean) {
    std::string problems;
    // Keys come from the file: each is quoted escaped and cut short.
    const auto list = [&](const char* what, const std::vector<std::string>& items) {
      if (items.empty()) return;
      std::vector<std::string> shown;
      for (const auto& item : items) shown.push_back(io::detail::printable(item));
      problems += fmt::format("\n  {} ({}): {}", what, items.size(), fmt::join(shown, ", "));
    };
    list("missing from the file", result.missing);
    list("unexpected in the file", result.unexpected);
    list("dtype or shape differs", result.mismatched);
    detail::fail(op,
                 "{} does not match module '{}'; nothing was assigned (pass strict = false to "
                 "load what matches, or a key_map to rename keys):{}",
                 path.string(), module.name(), problems);
  }
  // Everything is validated: the assignments below cannot fail.
  for (const Assignment& a : assignments) {
    a.variable.assign(a.value);
    result.loaded.push_back(a.path);
  }
  return result;
}

}  // namespace kiln

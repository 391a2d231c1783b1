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

}  // namespace detail

void save_weights(const Module& module, const std::filesystem::path& path,
                  const io::Metadata& metadata) {
  detail::refuse_while_tracing("save_weights");
  std::map<std::string, Tensor> values;
  for (const auto& [name, variable] : module.named_variables()) values[name] = variable.value();
  io::detail::write_weights_file(path, values, metadata, "save_weights");
}

LoadWeightsResult load_weights(Module& module, const std::filesystem::path& path,
                               const LoadWeightsOptions& options) {
  constexpr const char* op = "load_weights";
  detail::refuse_while_tracing(op);
  const std::map<std::string, Tensor> file = io::detail::read_weights_file(path, op);
  std::map<std::string, Variable> variables;
  for (auto& [name, variable] : module.named_variables()) variables.emplace(name, variable);

  LoadWeightsResult result;
  struct Assignment {
    std::string path;
    Variable variable;
    Tensor value;
  };
  std::vector<Assignment> assignments;
  std::set<std::string> provided;
  for (const auto& [key, stored] : file) {
    const std::string target = options.key_map ? options.key_map(key) : key;
    if (target.empty()) continue;  // skipped by the key map
    const Tensor value = options.transform ? options.transform(key, stored) : stored;
    if (!value.defined())
      detail::fail(op, "{}: the transform returned an undefined tensor for '{}'", path.string(),
                   io::detail::printable(key));
    auto found = variables.find(target);
    if (found == variables.end()) {
      result.unexpected.push_back(target == key ? key : fmt::format("{} (from {})", target, key));
      continue;
    }
    if (!provided.insert(target).second)
      detail::fail(op, "{}: two keys map to the variable '{}'", path.string(),
                   io::detail::printable(target));
    const Variable& v = found->second;
    if (value.dtype() != v.dtype() || value.shape() != v.shape()) {
      result.mismatched.push_back(fmt::format("{}: file {}, variable {}", target,
                                              detail::describe(value.dtype(), value.shape()),
                                              detail::describe(v.dtype(), v.shape())));
      continue;
    }
    assignments.push_back({target, v, value});
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

// save_weights / load_weights: a module's variables by path, assigned in place, all or nothing.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/fail.hpp"
#include "jit/trace.hpp"
#include "kiln/checkpoint.hpp"

namespace kiln {

namespace detail {

/// The values of a weights file by key, whatever its format.
std::map<std::string, Tensor> read_weights_file(const std::filesystem::path& path) {
  switch (io::detect_format(path)) {
    case io::FileFormat::safetensors:
      return io::load_safetensors(path);
    case io::FileFormat::npz:
      return io::load_npz(path);
    case io::FileFormat::npy:
      return {{path.stem().string(), io::load_npy(path)}};
  }
  fail("load_weights", "{}: unknown file format", path.string());
}

void write_weights_file(const std::filesystem::path& path,
                        const std::map<std::string, Tensor>& values, const io::Metadata& metadata,
                        const char* op) {
  if (path.extension() == ".npz") {
    if (!metadata.empty())
      fail(op, "{}: .npz files have no metadata; save as .safetensors to keep it", path.string());
    io::save_npz(path, values);
  } else {
    io::save_safetensors(path, values, metadata);
  }
}

void refuse_while_tracing(const char* op) {
  if (current_trace() != nullptr)
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
  detail::write_weights_file(path, values, metadata, "save_weights");
}

LoadWeightsResult load_weights(Module& module, const std::filesystem::path& path,
                               const LoadWeightsOptions& options) {
  constexpr const char* op = "load_weights";
  detail::refuse_while_tracing(op);
  const std::map<std::string, Tensor> file = detail::read_weights_file(path);
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
                   key);
    auto found = variables.find(target);
    if (found == variables.end()) {
      result.unexpected.push_back(target == key ? key : fmt::format("{} (from {})", target, key));
      continue;
    }
    if (!provided.insert(target).second)
      detail::fail(op, "{}: two keys map to the variable '{}'", path.string(), target);
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
    const auto list = [&](const char* what, const std::vector<std::string>& items) {
      if (!items.empty())
        problems += fmt::format("\n  {} ({}): {}", what, items.size(), fmt::join(items, ", "));
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

#pragma once
// Shared by load_weights/save_weights and Checkpoint.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kiln/module.hpp"

namespace kiln::detail {

/// `path` itself when it is a regular file, else the newest checkpoint file of the prefix
/// `path` (Checkpoint::latest); "[op] no checkpoint '<path>' and no files '<path>-<n>.safetensors'"
/// when there is neither.
std::filesystem::path checkpoint_file(const std::filesystem::path& path, const char* op);

/// The module's variables by their paths relative to it ("dense/kernel"): the keys of its
/// weights files and of a Checkpoint(module), whatever the module itself is called (like a
/// PyTorch state_dict).
std::vector<std::pair<std::string, Variable>> relative_variables(const Module& module);
/// Throws "[op] cannot run while a function is being traced ..." inside a trace: loading and
/// saving assign and read variables in place and belong outside traced functions.
void refuse_while_tracing(const char* op);

}  // namespace kiln::detail

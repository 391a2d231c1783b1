#pragma once
// Weights files whatever their format (safetensors, .npz, .npy): what load_weights, save_weights
// and Checkpoint read and write.

#include <filesystem>
#include <map>
#include <string>

#include "kiln/io.hpp"

namespace kiln::io::detail {

/// The values of a weights file by key, whatever its format; errors name `op`. The file is
/// opened once: its format is read from the same bytes that are then parsed.
std::map<std::string, Tensor> read_weights_file(const std::filesystem::path& path,
                                                const std::string& op);

/// Writes `values` atomically: .npz for a path ending in .npz (which has no metadata: an error
/// naming `op` if any is given), else safetensors.
void write_weights_file(const std::filesystem::path& path,
                        const std::map<std::string, Tensor>& values, const Metadata& metadata,
                        const char* op);

}  // namespace kiln::io::detail

#pragma once
// NumPy .npz archives (zip files of .npy members) from a byte span, through libzip.

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io.hpp"

namespace kiln::io::detail {

/// True for archive member names that are safe relative paths: non-empty '/'-separated
/// parts that are not "." or "..", no leading '/', no '\\', no NUL, no drive letter.
bool is_safe_member_name(std::string_view name);

/// Reads the arrays of the .npz archive held in `file`; all of them when `names` is null,
/// else exactly those (missing ones are an error). Checks every member's CRC.
std::map<std::string, Tensor> read_npz(std::span<const std::byte> file,
                                       const std::vector<std::string>* names, const std::string& op,
                                       const std::string& source);

/// Describes the arrays of the archive from each member's .npy header.
std::vector<TensorInfo> inspect_npz(std::span<const std::byte> file, const std::string& op,
                                    const std::string& source);

}  // namespace kiln::io::detail

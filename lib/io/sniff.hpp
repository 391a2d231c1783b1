#pragma once
// Which of kiln's formats a file is, from its first bytes.

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "kiln/io.hpp"

namespace kiln::io::detail {

/// The format whose signature starts `bytes`: the NumPy magic, a zip local header or
/// end-of-central-directory signature, or a safetensors header length within the file
/// followed by '{'; nullopt for none of them.
std::optional<FileFormat> sniff_format(std::span<const std::byte> bytes);

/// The same, throwing "[op] source: ..." when `bytes` are none of the formats.
FileFormat checked_format(std::span<const std::byte> bytes, const std::string& op,
                          const std::string& source);

}  // namespace kiln::io::detail

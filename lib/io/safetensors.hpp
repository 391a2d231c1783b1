#pragma once
// safetensors parsing from a byte span (what the file functions and the fuzzer call).

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/elements.hpp"
#include "kiln/io.hpp"

namespace kiln::io::detail {

/// Where one tensor's bytes are, relative to the start of the data section.
struct SafetensorsLocation {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::optional<StoredType> stored;  // nullopt: an element type kiln cannot load
};

/// A parsed and validated safetensors header.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;             // in data-offset order
  std::vector<SafetensorsLocation> locations;  // parallel to tensors
  std::map<std::string, std::size_t> index;    // name -> position in tensors
  Metadata metadata;
  std::uint64_t data_start = 0;  // 8 + header length
};

/// The largest header accepted (the reference implementation's limit).
inline constexpr std::uint64_t max_safetensors_header = 100'000'000;
/// The deepest nesting of JSON arrays and objects accepted in a header (a valid header needs
/// 3: the header object, a tensor's object, its shape list).
inline constexpr std::size_t max_safetensors_nesting = 64;

/// Parses and validates the header of the safetensors file whose bytes are `file`: length
/// within the file, UTF-8 JSON object nested at most max_safetensors_nesting deep, without
/// duplicate keys, known dtypes, shapes whose
/// byte size matches data_offsets, offsets that tile the data section exactly. Throws
/// kiln::Error "[op] source: ...".
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& op,
                                    const std::string& source);

/// Copies tensor `i` of `header` out of `file` into a new tensor (decoding F16/BF16).
Tensor read_safetensors_tensor(const SafetensorsHeader& header, std::size_t i,
                               std::span<const std::byte> file, const std::string& op,
                               const std::string& source);

class MappedFile;

/// Tensors `selected` (positions in header.tensors) of the parsed file `file`, all checked to
/// have an element type kiln can load before any is read; the kernel is told which pages
/// each needs.
std::map<std::string, Tensor> read_selected(const MappedFile& file, const SafetensorsHeader& header,
                                            const std::vector<std::size_t>& selected,
                                            const std::string& op, const std::string& source);

/// Parses `file` and reads every tensor kiln can load (the fuzzer's entry point).
std::map<std::string, Tensor> read_safetensors(std::span<const std::byte> file,
                                               const std::string& op, const std::string& source);

}  // namespace kiln::io::detail

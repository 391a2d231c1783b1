#pragma once
// NumPy .npy parsing from a byte span (what the file functions, .npz and the fuzzer call).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/elements.hpp"
#include "kiln/io.hpp"

namespace kiln::io::detail {

/// A parsed .npy header.
struct NpyHeader {
  int major_version = 1;
  std::string descr;  // e.g. "<f4"
  StoredType stored;
  bool fortran_order = false;
  Shape shape;
  std::uint64_t header_bytes = 0;  // magic, version, length field and header: the data offset
  std::uint64_t data_bytes = 0;    // shape.numel() * element size
};

/// Bytes that must be available to call npy_header_size (magic, version, length field).
inline constexpr std::size_t npy_prefix_bytes = 12;
/// The largest header accepted (a valid kiln header needs under 200 bytes).
inline constexpr std::uint64_t max_npy_header = std::uint64_t{1} << 20;

/// The total header size (the data offset) declared by the first bytes of a .npy file, after
/// checking the magic string and the version. `prefix` may be shorter than
/// npy_prefix_bytes only if that is the whole file (then it is truncated: error).
std::uint64_t npy_header_size(std::span<const std::byte> prefix, const std::string& op,
                              const std::string& source);

/// Parses the header at the start of `bytes` (which holds at least npy_header_size bytes):
/// the Python dict literal must have exactly the keys 'descr', 'fortran_order' and 'shape'.
NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& op,
                           const std::string& source);

/// Parses a whole .npy file held in `file` into a tensor (the fuzzer's entry point).
Tensor read_npy(std::span<const std::byte> file, const std::string& op, const std::string& source);

/// The TensorInfo of a parsed header.
TensorInfo npy_tensor_info(const NpyHeader& header, std::string name);

/// The header (magic through the newline) of a little-endian C-order .npy file for `dtype`
/// and `shape`, padded so that the data starts at a multiple of 64 bytes. `op` and `source`
/// name the error for a dtype .npy cannot say (the 8-, 4- and 2-bit dtypes).
std::vector<std::byte> encode_npy_header(DType dtype, const Shape& shape, const std::string& op,
                                         const std::string& source);

}  // namespace kiln::io::detail

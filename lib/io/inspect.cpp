#include <cstring>

#include "core/fail.hpp"
#include "io/elements.hpp"
#include "io/mapped_file.hpp"
#include "io/npy.hpp"
#include "io/npz.hpp"
#include "io/safetensors.hpp"
#include "io/sniff.hpp"
#include "kiln/io.hpp"

namespace kiln::io {

namespace detail {

std::optional<FileFormat> sniff_format(std::span<const std::byte> bytes) {
  const auto starts_with = [&](std::string_view magic) {
    return bytes.size() >= magic.size() &&
           std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
  };
  if (starts_with("\x93NUMPY")) return FileFormat::npy;
  // A local file header, or the end-of-central-directory record of an empty archive.
  if (starts_with("PK\x03\x04") || starts_with("PK\x05\x06")) return FileFormat::npz;
  if (bytes.size() >= 9 && bytes[8] == std::byte{'{'} &&
      detail::load_le64(bytes.data()) <= bytes.size() - 8)
    return FileFormat::safetensors;
  return std::nullopt;
}

FileFormat checked_format(std::span<const std::byte> bytes, const std::string& op,
                          const std::string& source) {
  if (bytes.empty())
    kiln::detail::fail(op, "{}: empty file (0 bytes), not safetensors, .npy or .npz", source);
  const auto format = sniff_format(bytes);
  if (!format)
    kiln::detail::fail(op, "{}: unknown file format (not safetensors, .npy or .npz)", source);
  return *format;
}

}  // namespace detail

FileFormat detect_format(const std::filesystem::path& path) {
  const std::string op = "detect_format";
  return detail::checked_format(detail::MappedFile(path, op, 0).bytes(), op, path.string());
}

std::vector<TensorInfo> inspect(const std::filesystem::path& path) {
  const std::string op = "inspect";
  const std::string source = path.string();
  // Mapped whatever the size: only the pages holding headers are read.
  detail::MappedFile file(path, op, 0);
  switch (detail::checked_format(file.bytes(), op, source)) {
    case FileFormat::npy: {
      const auto header = detail::parse_npy_header(file.bytes(), op, source);
      const std::uint64_t available = file.bytes().size() - header.header_bytes;
      if (available != header.data_bytes)
        kiln::detail::fail(op, "{}: .npy data is {} bytes, but '{}' {} needs {} bytes", source,
                           available, detail::printable(header.descr), header.shape,
                           header.data_bytes);
      return {detail::npy_tensor_info(header, path.stem().string())};
    }
    case FileFormat::npz:
      return detail::inspect_npz(file.bytes(), op, source);
    case FileFormat::safetensors:
      return detail::parse_safetensors(file.bytes(), op, source).tensors;
  }
  return {};
}

}  // namespace kiln::io

#pragma once
// The bytes of a file, read-only: memory-mapped when large, read into memory when small.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace kiln::io::detail {

/// A whole file as a byte span. Files of at least `map_threshold` bytes are mapped
/// (mmap, PROT_READ, MAP_PRIVATE): only the pages a reader touches are read from disk, so
/// copying one tensor out of a 10 GB file costs that tensor's bytes. Smaller files are read
/// with read(2). Errors throw kiln::Error "[op] <path>: ...".
///
/// As with any mapping, a file truncated by another process while it is mapped makes reads
/// past the new end fault (SIGBUS); kiln does not write files in place, so this needs an
/// outside writer.
class MappedFile {
 public:
  static constexpr std::uint64_t default_map_threshold = std::uint64_t{1} << 20;

  MappedFile(const std::filesystem::path& path, const std::string& op,
             std::uint64_t map_threshold = default_map_threshold);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  bool is_mapped() const { return mapped_; }
  const std::filesystem::path& path() const { return path_; }

  /// Tells the kernel that [offset, offset + length) will be read soon (mapped files only).
  void will_need(std::uint64_t offset, std::uint64_t length) const;

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
  std::vector<std::byte> contents_;
};

}  // namespace kiln::io::detail

#pragma once
// Writing a file so that readers see either the old contents or the complete new ones.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::io::detail {

/// A file written under a temporary name in the target's folder and renamed over the
/// target by commit(): write, flush, fsync the file, rename, fsync the folder. A process
/// that dies before commit() leaves the target as it was (and a stale temporary file
/// `.<name>.tmp-<8 lowercase hex digits>` next to it, which the next AtomicFile created in
/// that folder removes). The writer holds flock(LOCK_EX) on its temporary file from creation
/// until it is renamed or removed; that lock is what tells a live writer's file from a stale
/// one. Destroying an uncommitted AtomicFile removes the temporary file. Errors throw
/// kiln::Error "[op] <target>: ...".
class AtomicFile {
 public:
  AtomicFile(std::filesystem::path target, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes (buffered; large writes go straight to the file).
  void write(const void* data, std::size_t bytes);
  void write(std::span<const std::byte> bytes) { write(bytes.data(), bytes.size()); }
  /// Makes the written bytes the target's contents, durably. Call once.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }
  /// Bytes written so far (buffered ones included).
  std::uint64_t bytes_written() const { return written_; }

  /// Test seam: called after every chunk that reaches the temporary file, with the file and
  /// the number of bytes in it. Lets a test stop a process in the middle of a save.
  using WriteObserver = std::function<void(const AtomicFile&, std::uint64_t)>;
  static void set_write_observer(WriteObserver observer);

 private:
  void flush_buffer();
  void write_fully(const void* data, std::size_t bytes);
  [[noreturn]] void fail_errno(const char* what) const;

  std::filesystem::path target_;
  std::filesystem::path temp_;
  std::string op_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint64_t written_ = 0;
  std::uint64_t on_disk_ = 0;
  std::vector<std::byte> buffer_;
};

/// Whether `name` (a file name, no folder) has the form of AtomicFile's temporary files:
/// `.<name>.tmp-<8 lowercase hex digits>`.
bool is_temporary_name(std::string_view name);

/// Removes the stale temporary files of `folder`: regular files with a temporary name on which
/// flock(LOCK_EX | LOCK_NB) succeeds (no AtomicFile holds them), still under that name once
/// locked. Best effort: files it cannot open, lock or unlink stay. Every AtomicFile calls it
/// for its folder before it creates its own temporary file.
void remove_stale_temporary_files(const std::filesystem::path& folder);

/// Writes `bytes` to `path` atomically (an AtomicFile written and committed at once).
void write_file_atomically(const std::filesystem::path& path, const std::string& op,
                           std::span<const std::byte> bytes);

}  // namespace kiln::io::detail

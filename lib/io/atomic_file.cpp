#include "io/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string_view>

#include "core/fail.hpp"

namespace kiln::io::detail {

namespace {

constexpr std::size_t buffer_capacity = std::size_t{1} << 20;

AtomicFile::WriteObserver& write_observer() {
  static AtomicFile::WriteObserver observer;
  return observer;
}

std::string random_suffix() {
  std::random_device device;
  const auto value = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                     static_cast<std::uint64_t>(::getpid());
  return fmt::format("{:08x}", value & 0xffffffffu);
}

constexpr std::string_view temp_marker = ".tmp-";
constexpr std::size_t temp_suffix_size = 8;

std::filesystem::path folder_of(const std::filesystem::path& target) {
  return target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
}

/// Whether `st` describes the same file as `fd`, which has not been unlinked.
bool still_named(int fd, const struct stat& st) {
  struct stat open_file {};
  return ::fstat(fd, &open_file) == 0 && open_file.st_nlink > 0 && open_file.st_dev == st.st_dev &&
         open_file.st_ino == st.st_ino;
}

/// Removes the temporary file `name` of the folder `dir` if it is stale: a regular file that
/// no AtomicFile holds. A writer holds flock(LOCK_EX) on its temporary file from before it
/// writes until after it has renamed or removed it, so getting the lock means that nobody
/// writes it any more; the lock also keeps two cleaners from racing. After the lock, the name
/// must still be the file that was locked: a writer may have renamed it into place meanwhile,
/// and then the name is gone (or, in theory, a new writer's file), which is left alone.
void remove_if_stale(int dir, const char* name) {
  const int fd = ::openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return;  // gone, a symlink, or not ours to read
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    struct stat now {};
    if (::fstatat(dir, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && still_named(fd, now))
      ::unlinkat(dir, name, 0);
  }
  ::close(fd);  // releases the lock
}

}  // namespace

bool is_temporary_name(std::string_view name) {
  const std::size_t tail = temp_marker.size() + temp_suffix_size;
  if (name.size() < 2 + tail || name.front() != '.') return false;
  const std::string_view marker = name.substr(name.size() - tail, temp_marker.size());
  const std::string_view suffix = name.substr(name.size() - temp_suffix_size);
  return marker == temp_marker && std::all_of(suffix.begin(), suffix.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void remove_stale_temporary_files(const std::filesystem::path& folder) {
  DIR* stream = ::opendir(folder.c_str());
  if (stream == nullptr) return;
  std::vector<std::string> names;  // collected first: removing while reading may skip entries
  while (const dirent* entry = ::readdir(stream))
    if (is_temporary_name(entry->d_name)) names.emplace_back(entry->d_name);
  const int dir = ::dirfd(stream);
  for (const std::string& name : names) remove_if_stale(dir, name.c_str());
  ::closedir(stream);
}

AtomicFile::AtomicFile(std::filesystem::path target, std::string op)
    : target_(std::move(target)), op_(std::move(op)) {
  if (target_.filename().empty())
    kiln::detail::fail(op_, "{}: the path names a folder, not a file", target_.string());
  const auto folder = folder_of(target_);
  remove_stale_temporary_files(folder);
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ =
        folder / fmt::format(".{}{}{}", target_.filename().string(), temp_marker, random_suffix());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      if (errno != EEXIST) fail_errno("cannot create a temporary file in its folder");
      continue;
    }
    // Held until the file is renamed or removed: it marks the file as being written.
    int locked = 0;
    do locked = ::flock(fd_, LOCK_EX);
    while (locked != 0 && errno == EINTR);
    // Where locks are not supported, cleaners cannot lock the file either and leave it alone.
    if (locked != 0) return;
    // A cleaner may have taken the name away between open and flock (it saw an unlocked file).
    struct stat st {};
    if (::lstat(temp_.c_str(), &st) == 0 && still_named(fd_, st)) return;
    ::close(fd_);
    fd_ = -1;
  }
  temp_.clear();
  kiln::detail::fail(op_, "{}: cannot find a free temporary file name", target_.string());
}

AtomicFile::~AtomicFile() {
  // Unlinked before the lock is released, so a cleaner never sees this file unlocked.
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

void AtomicFile::fail_errno(const char* what) const {
  const int error = errno;
  kiln::detail::fail(op_, "{}: {} ({})", target_.string(), what, std::strerror(error));
}

void AtomicFile::set_write_observer(WriteObserver observer) {
  write_observer() = std::move(observer);
}

void AtomicFile::write_fully(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  on_disk_ += bytes;
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("write failed");
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  if (write_observer()) write_observer()(*this, on_disk_);
}

void AtomicFile::flush_buffer() {
  if (buffer_.empty()) return;
  write_fully(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (committed_ || fd_ < 0)
    kiln::detail::fail(op_, "{}: write after the file was committed", target_.string());
  if (bytes == 0) return;
  written_ += bytes;
  if (buffer_.size() + bytes <= buffer_capacity) {
    const auto* p = static_cast<const std::byte*>(data);
    buffer_.insert(buffer_.end(), p, p + bytes);
    if (buffer_.size() == buffer_capacity) flush_buffer();
    return;
  }
  flush_buffer();
  write_fully(data, bytes);
}

void AtomicFile::commit() {
  if (committed_ || fd_ < 0)
    kiln::detail::fail(op_, "{}: the file was already committed", target_.string());
  flush_buffer();
  if (::fsync(fd_) != 0) fail_errno("fsync of the temporary file failed");
  // Renamed while the lock is held, so no cleaner takes the file in between.
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    fail_errno("cannot rename the temporary file over the target");
  // The contents are on disk (fsync) and in place; closing only releases the lock.
  ::close(fd_);
  fd_ = -1;
  committed_ = true;
  const auto folder = folder_of(target_);
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail_errno("saved, but the folder cannot be opened to sync it");
  const int status = ::fsync(dir);
  const int error = errno;
  ::close(dir);
  // Some file systems cannot sync a folder (EINVAL); the rename itself has happened.
  if (status != 0 && error != EINVAL) {
    errno = error;
    fail_errno("saved, but syncing the folder failed");
  }
}

void write_file_atomically(const std::filesystem::path& path, const std::string& op,
                           std::span<const std::byte> bytes) {
  AtomicFile file(path, op);
  file.write(bytes);
  file.commit();
}

}  // namespace kiln::io::detail

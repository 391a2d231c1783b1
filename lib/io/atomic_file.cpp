#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

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

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target, std::string op)
    : target_(std::move(target)), op_(std::move(op)) {
  if (target_.filename().empty())
    kiln::detail::fail(op_, "{}: the path names a folder, not a file", target_.string());
  const auto folder =
      target_.parent_path().empty() ? std::filesystem::path(".") : target_.parent_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = folder / fmt::format(".{}.tmp-{}", target_.filename().string(), random_suffix());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) fail_errno("cannot create a temporary file in its folder");
  }
  kiln::detail::fail(op_, "{}: cannot find a free temporary file name", target_.string());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
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
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_errno("closing the temporary file failed");
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    fail_errno("cannot rename the temporary file over the target");
  committed_ = true;
  const auto folder =
      target_.parent_path().empty() ? std::filesystem::path(".") : target_.parent_path();
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

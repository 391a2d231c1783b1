#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/fail.hpp"

namespace kiln::io::detail {

namespace {

/// Closes a file descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// What a file that is not a regular file is, for the error message.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unknown file type";
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, const std::string& op,
                       std::uint64_t map_threshold)
    : path_(path) {
  const auto fail_errno = [&](const char* what) {
    const int error = errno;
    kiln::detail::fail(op, "{}: {} ({})", path.string(), what, std::strerror(error));
  };
  const auto fail_kind = [&](mode_t mode) {
    kiln::detail::fail(op, "{}: not a regular file ({})", path.string(), file_kind(mode));
  };
  // A FIFO blocks open(2) until a writer appears and a device may do anything when opened:
  // look before opening, open without blocking, and look again at what was opened (the path
  // may have been replaced in between).
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) fail_errno("cannot open the file");
  if (!S_ISREG(info.st_mode)) fail_kind(info.st_mode);
  FdCloser file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (file.fd < 0) fail_errno("cannot open the file");
  if (::fstat(file.fd, &info) != 0) fail_errno("cannot stat the file");
  if (!S_ISREG(info.st_mode)) fail_kind(info.st_mode);
  const int flags = ::fcntl(file.fd, F_GETFL);
  if (flags < 0 || ::fcntl(file.fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    fail_errno("cannot set up the file descriptor");
  const auto size = static_cast<std::uint64_t>(info.st_size);
  if (size > 0 && size >= map_threshold) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (p == MAP_FAILED) fail_errno("cannot map the file");
    data_ = static_cast<const std::byte*>(p);
    size_ = size;
    mapped_ = true;
    return;
  }
  contents_.resize(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(file.fd, contents_.data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("read failed");
    }
    if (n == 0) break;  // the file shrank meanwhile: the parsers see a truncated file
    done += static_cast<std::size_t>(n);
  }
  contents_.resize(done);
  data_ = contents_.data();
  size_ = done;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
}

void MappedFile::will_need(std::uint64_t offset, std::uint64_t length) const {
  if (!mapped_ || length == 0 || offset >= size_) return;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t begin = offset / page * page;
  const std::uint64_t end = std::min<std::uint64_t>(offset + length, size_);
  ::madvise(const_cast<std::byte*>(data_) + begin, end - begin, MADV_WILLNEED);
}

}  // namespace kiln::io::detail

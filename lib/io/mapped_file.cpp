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

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, const std::string& op,
                       std::uint64_t map_threshold)
    : path_(path) {
  const auto fail_errno = [&](const char* what) {
    const int error = errno;
    kiln::detail::fail(op, "{}: {} ({})", path.string(), what, std::strerror(error));
  };
  FdCloser file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail_errno("cannot open the file");
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) fail_errno("cannot stat the file");
  if (!S_ISREG(info.st_mode)) kiln::detail::fail(op, "{}: not a regular file", path.string());
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

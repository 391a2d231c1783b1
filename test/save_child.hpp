#pragma once
// A save interrupted on purpose: a forked child starts a save and stops once its temporary
// file holds data, so that the test can kill it there (test_io.cpp, test_atomic_save.cpp).
#include <unistd.h>

#include <catch2/catch.hpp>

#include <functional>

#include "io/atomic_file.hpp"

namespace io_test {

/// Forks a child that runs `save` and stops (until killed) once the first chunk of its
/// temporary file is written; returns its pid after that point. The child only saves.
inline pid_t start_save_and_stop(const std::function<void()>& save) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    kiln::io::detail::AtomicFile::set_write_observer(
        [&](const kiln::io::detail::AtomicFile&, std::uint64_t) {
          const char c = 'x';
          (void)!::write(fds[1], &c, 1);
          for (;;) ::pause();
        });
    try {
      save();
    } catch (...) {
    }
    ::_exit(0);  // not reached when the observer runs
  }
  ::close(fds[1]);
  char c = 0;
  const auto n = ::read(fds[0], &c, 1);
  ::close(fds[0]);
  REQUIRE(n == 1);
  return pid;
}

}  // namespace io_test

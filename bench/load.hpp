#pragma once
// Benchmarks under a controlled load (Linux): pinning threads to CPUs, a busy loop that keeps
// one CPU occupied, and a child process (this program again, with other arguments and
// environment) that answers one line per request, for figures that need a setting kiln reads
// once per process (KILN_NUM_THREADS).

#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::bench {

/// The CPUs this process may run on.
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

/// Pins the calling thread to one CPU for its lifetime, then restores the thread's mask.
class PinThread {
 public:
  explicit PinThread(int cpu) {
    CPU_ZERO(&saved_);
    pinned_ = pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) == 0 && pin(cpu);
  }
  ~PinThread() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  PinThread(const PinThread&) = delete;
  PinThread& operator=(const PinThread&) = delete;

  bool pinned() const { return pinned_; }

  static bool pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
};

/// A thread pinned to `cpu` that computes without pause until destroyed, as a compute-bound
/// process on that core would.
class BusyLoop {
 public:
  explicit BusyLoop(int cpu)
      : thread_([this, cpu] {
          pinned_.store(PinThread::pin(cpu) ? 1 : -1, std::memory_order_release);
          double x = 1;
          while (!stop_.load(std::memory_order_relaxed))
            for (int i = 0; i < 1000; ++i) x = x * 0.999999 + 1e-6;
          sink_ = x;
        }) {
    while (pinned_.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  }
  ~BusyLoop() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  BusyLoop(const BusyLoop&) = delete;
  BusyLoop& operator=(const BusyLoop&) = delete;

  bool pinned() const { return pinned_.load(std::memory_order_acquire) == 1; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> pinned_{0};  // 1: pinned, -1: could not pin
  double sink_ = 0;
  std::thread thread_;
};

/// This program run again as a child with `args` and the environment changed by `set_env`
/// ("NAME=value" entries replace NAME), talking over pipes: request() writes one line to its
/// standard input and reads one line of its standard output. The child inherits the calling
/// thread's CPU mask. Destroying the object closes the child's input and waits for it.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, const std::vector<std::string>& set_env) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0) {
      fail("pipe");
      return;
    }
    if (pipe(from_child) != 0) {
      fail("pipe");
      close(to_child[0]);
      close(to_child[1]);
      return;
    }
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry = *e;
      bool replaced = false;
      for (const std::string& s : set_env)
        replaced = replaced || entry.substr(0, entry.find('=') + 1) == s.substr(0, s.find('=') + 1);
      if (!replaced) env.emplace_back(entry);
    }
    env.insert(env.end(), set_env.begin(), set_env.end());
    std::string exe = "/proc/self/exe";
    std::vector<char*> argv = {exe.data()}, envp;
    std::vector<std::string> arg_copies = args;
    for (std::string& a : arg_copies) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]})
      posix_spawn_file_actions_addclose(&actions, fd);
    const int status = posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (status != 0) {
      close(to_child[1]);
      close(from_child[0]);
      pid_ = -1;
      errno = status;
      fail("posix_spawn");
      return;
    }
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    if (in_ == nullptr || out_ == nullptr) fail("fdopen");
  }

  ~ChildProcess() {
    if (in_ != nullptr) std::fclose(in_);
    if (out_ != nullptr) std::fclose(out_);
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Empty when the child runs, else what failed.
  const std::string& error() const { return error_; }

  /// Sends `line` (a newline is added) and returns the child's answer without its newline, or
  /// nullopt (and error() set) when the child does not answer.
  std::optional<std::string> request(std::string_view line) {
    if (!error_.empty()) return std::nullopt;
    if (std::fprintf(in_, "%.*s\n", static_cast<int>(line.size()), line.data()) < 0 ||
        std::fflush(in_) != 0) {
      fail("writing to the child");
      return std::nullopt;
    }
    return read_line();
  }

  /// The child's next line (e.g. a greeting it writes unasked).
  std::optional<std::string> read_line() {
    if (!error_.empty()) return std::nullopt;
    std::string answer;
    for (int ch = std::fgetc(out_); ch != '\n'; ch = std::fgetc(out_)) {
      if (ch == EOF) {
        error_ = "the child process ended without an answer";
        return std::nullopt;
      }
      answer += static_cast<char>(ch);
    }
    return answer;
  }

 private:
  void fail(const char* what) { error_ = std::string(what) + ": " + std::strerror(errno); }

  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
  std::string error_;
};

}  // namespace kiln::bench

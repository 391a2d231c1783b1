#include "kernels/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::detail {

namespace {

constexpr int max_threads = 256;

int threads_from_environment() {
  if (const char* text = std::getenv("KILN_NUM_THREADS")) {
    char* end = nullptr;
    const long requested = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && requested > 0)
      return static_cast<int>(std::min<long>(requested, max_threads));
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(std::min<unsigned>(hardware, max_threads));
}

/// True on pool threads, and on a caller thread while it runs its share of a job.
thread_local bool inside_parallel_region = false;

/// Workers wait for a job; the job's chunks are handed out under one mutex (there are at
/// most a few, one per thread), so a late worker can never pick up a finished job.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) : worker_count_(threads - 1) {}

  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_ready_.notify_all();
    for (auto& worker : workers_) worker.join();
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Runs the job, or returns false at once when another thread is using the pool.
  bool try_run(std::int64_t n, std::int64_t chunks, RangeFnRef fn) {
    std::unique_lock busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    start_workers();
    {
      std::lock_guard lock(mutex_);
      job_.emplace(fn);
      range_ = n;
      chunk_count_ = chunks;
      next_chunk_ = 0;
      unfinished_ = chunks;
      error_ = nullptr;
    }
    work_ready_.notify_all();
    inside_parallel_region = true;
    std::unique_lock lock(mutex_);
    run_chunks(lock);
    job_done_.wait(lock, [&] { return unfinished_ == 0; });
    inside_parallel_region = false;
    job_.reset();
    std::exception_ptr error = std::exchange(error_, nullptr);
    lock.unlock();
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  /// Starts the workers once. If the system refuses a thread, the pool keeps the ones it
  /// got (chunks are claimed dynamically, so the caller covers for missing workers).
  void start_workers() {
    if (workers_started_) return;
    workers_started_ = true;
    try {
      workers_.reserve(static_cast<std::size_t>(worker_count_));
      for (int i = 0; i < worker_count_; ++i) workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::exception&) {
      return;
    }
  }

  void worker_loop() {
    inside_parallel_region = true;
    std::unique_lock lock(mutex_);
    while (true) {
      work_ready_.wait(lock, [&] { return stop_ || next_chunk_ < chunk_count_; });
      if (stop_) return;
      run_chunks(lock);
    }
  }

  /// Claims and runs chunks of the current job until none is left; `lock` holds mutex_
  /// on entry and exit.
  void run_chunks(std::unique_lock<std::mutex>& lock) {
    while (next_chunk_ < chunk_count_) {
      const std::int64_t chunk = next_chunk_++;
      const RangeFnRef fn = *job_;
      const std::int64_t begin = range_ * chunk / chunk_count_;
      const std::int64_t end = range_ * (chunk + 1) / chunk_count_;
      lock.unlock();
      std::exception_ptr error;
      try {
        fn(begin, end);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !error_) error_ = error;
      if (--unfinished_ == 0) job_done_.notify_all();
    }
  }

  const int worker_count_;
  bool workers_started_ = false;
  std::mutex busy_;   // held by the thread whose job is running
  std::mutex mutex_;  // guards everything below
  std::condition_variable work_ready_;
  std::condition_variable job_done_;
  std::vector<std::thread> workers_;
  std::optional<RangeFnRef> job_;
  std::int64_t range_ = 0;
  std::int64_t chunk_count_ = 0;
  std::int64_t next_chunk_ = 0;
  std::int64_t unfinished_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

ThreadPool& thread_pool() {
  static ThreadPool pool(num_threads());
  return pool;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// One helper thread for parallel_pair. Jobs are numbered: the caller publishes job n by
/// storing posted_ = n, the helper stores done_ = n when it has finished. After a job the
/// helper spins on posted_ for spin_time before it sleeps on the condition variable, so a
/// caller that comes back within that time hands over without a system call on either side.
class PairHelper {
 public:
  /// Runs `job` on the helper while the caller runs `own`, or returns false at once when
  /// another thread is using the helper (or it could not be started).
  bool try_run(RangeFnRef own, RangeFnRef job, std::exception_ptr& own_error,
               std::exception_ptr& job_error) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    if (!start()) {
      busy_.store(false, std::memory_order_release);
      return false;
    }
    job_.emplace(job);
    error_ = nullptr;
    const std::uint64_t n = posted_.load(std::memory_order_relaxed) + 1;
    posted_.store(n, std::memory_order_release);
    {
      std::lock_guard lock(mutex_);
      if (sleeping_) wake_.notify_one();
    }
    try {
      own(0, 1);
    } catch (...) {
      own_error = std::current_exception();
    }
    // The helper's half takes about as long as ours: spin, then yield if it was descheduled.
    for (int spins = 0; done_.load(std::memory_order_acquire) != n; ++spins) {
      if (spins < 1 << 16)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    job_error = std::exchange(error_, nullptr);
    job_.reset();
    busy_.store(false, std::memory_order_release);
    return true;
  }

 private:
  static constexpr auto spin_time = std::chrono::microseconds(200);

  bool start() {
    if (started_) return true;
    try {
      // Never joined: the helper lives as long as the process (the object is never destroyed).
      std::thread([this] { loop(); }).detach();
    } catch (const std::exception&) {
      return false;
    }
    started_ = true;
    return true;
  }

  void loop() {
    inside_parallel_region = true;
    std::uint64_t seen = 0;
    while (true) {
      const auto spin_until = std::chrono::steady_clock::now() + spin_time;
      for (int spins = 0; posted_.load(std::memory_order_acquire) == seen; ++spins) {
        cpu_relax();
        if ((spins & 255) == 255 && std::chrono::steady_clock::now() > spin_until) {
          std::unique_lock lock(mutex_);
          sleeping_ = true;
          wake_.wait(lock, [&] { return posted_.load(std::memory_order_acquire) != seen; });
          sleeping_ = false;
        }
      }
      seen = posted_.load(std::memory_order_acquire);
      try {
        (*job_)(1, 2);
      } catch (...) {
        error_ = std::current_exception();
      }
      done_.store(seen, std::memory_order_release);
    }
  }

  std::atomic<bool> busy_{false};  // held by the calling thread for one job
  bool started_ = false;           // guarded by busy_
  std::optional<RangeFnRef> job_;  // written before posted_, read after it
  std::exception_ptr error_;       // written before done_, read after it
  std::atomic<std::uint64_t> posted_{0};
  std::atomic<std::uint64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool sleeping_ = false;  // guarded by mutex_
};

PairHelper& pair_helper() {
  static auto* helper = new PairHelper;  // never destroyed: its thread may still be waiting
  return *helper;
}

}  // namespace

int num_threads() {
  static const int threads = threads_from_environment();
  return threads;
}

void parallel_pair(RangeFnRef first, RangeFnRef second) {
  std::exception_ptr first_error, second_error;
  bool ran = false;
  if (num_threads() > 1 && !inside_parallel_region) {
    inside_parallel_region = true;  // kernels inside either half stay on their own thread
    ran = pair_helper().try_run(first, second, first_error, second_error);
    inside_parallel_region = false;
  }
  if (!ran) {  // both parts run, as on two threads, even when the first throws
    try {
      first(0, 1);
    } catch (...) {
      first_error = std::current_exception();
    }
    try {
      second(1, 2);
    } catch (...) {
      second_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
}

void parallel_for(std::int64_t n, std::int64_t grain, RangeFnRef fn) {
  if (n <= 0) return;
  const std::int64_t chunks =
      std::min<std::int64_t>(num_threads(), n / std::max<std::int64_t>(grain, 1));
  if (chunks <= 1 || inside_parallel_region || !thread_pool().try_run(n, chunks, fn)) fn(0, n);
}

}  // namespace kiln::detail

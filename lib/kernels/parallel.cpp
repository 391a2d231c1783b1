// The thread count and the thread pool behind parallel_for; parallel_pair's helper thread is in
// parallel_pair.cpp.
#include "kernels/parallel.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

thread_local bool inside_parallel_region = false;

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

/// How long a worker looks for the next job, and the caller for the workers' last chunks,
/// before sleeping on a condition variable. Kernels come in runs (a plan's steps, a model's
/// eager ops), and on a VM a futex wake-up costs tens of microseconds: an eager [64,1024] x
/// [1024,256] product in two tiles took 230 us with a wake-up per call against 165 us with
/// the worker already awake. A bounded spin costs at most this much of a core after each job.
constexpr auto spin_before_sleep = std::chrono::microseconds(100);

/// Spins (with a pause per poll) until done() or spin_before_sleep has passed; returns done().
template <class Done>
bool spin_until(Done&& done) {
  const auto until = std::chrono::steady_clock::now() + spin_before_sleep;
  for (int polls = 0;; ++polls) {
    if (done()) return true;
#if defined(__SSE2__)
    _mm_pause();
#endif
    if (polls % 64 == 63 && std::chrono::steady_clock::now() >= until) return done();
  }
}

/// Workers wait for a job; the job's chunks are handed out under one mutex (there are at
/// most a few, one per thread), so a late worker can never pick up a finished job. The caller
/// claims chunks too, until none is left: a worker that gets no core (another process keeps
/// it off) leaves its chunk to the caller rather than delaying the job. Workers look for the
/// next job, and the caller for the chunks workers have claimed to finish, for a bounded time
/// (spin_before_sleep) before waiting on a condition variable.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) : worker_count_(threads - 1) {}

  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      posted_.fetch_add(1, std::memory_order_release);
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
      unfinished_.store(chunks, std::memory_order_relaxed);
      error_ = nullptr;
      posted_.fetch_add(1, std::memory_order_release);
    }
    work_ready_.notify_all();  // no system call when every worker is spinning
    inside_parallel_region = true;
    std::unique_lock lock(mutex_);
    run_chunks(lock);
    if (unfinished_.load(std::memory_order_relaxed) != 0) {
      lock.unlock();
      spin_until([&] { return unfinished_.load(std::memory_order_acquire) == 0; });
      lock.lock();
    }
    job_done_.wait(lock, [&] { return unfinished_.load(std::memory_order_relaxed) == 0; });
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
      const auto ready = [&] { return stop_ || next_chunk_ < chunk_count_; };
      if (!ready()) {
        const std::uint64_t seen = posted_.load(std::memory_order_relaxed);
        lock.unlock();
        const bool posted =
            spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
        lock.lock();
        // A job came and its chunks were all claimed before this worker got here: jobs are
        // coming, so look for the next one again rather than sleep.
        if (posted && !ready()) continue;
      }
      work_ready_.wait(lock, ready);
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
      if (unfinished_.fetch_sub(1, std::memory_order_release) == 1) job_done_.notify_all();
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
  // Written under mutex_; read without it by a spinning caller (unfinished_) or worker (posted_:
  // how many jobs, and the stop, were posted).
  std::atomic<std::int64_t> unfinished_{0};
  std::atomic<std::uint64_t> posted_{0};
  std::exception_ptr error_;
  bool stop_ = false;
};

ThreadPool& thread_pool() {
  static ThreadPool pool(num_threads());
  return pool;
}

}  // namespace

int num_threads() {
  static const int threads = threads_from_environment();
  return threads;
}

namespace {

void run_in_chunks(std::int64_t n, std::int64_t grain, std::int64_t max_chunks, RangeFnRef fn) {
  if (n <= 0) return;
  const std::int64_t chunks =
      std::min<std::int64_t>(max_chunks, n / std::max<std::int64_t>(grain, 1));
  if (chunks <= 1 || inside_parallel_region || !thread_pool().try_run(n, chunks, fn)) fn(0, n);
}

}  // namespace

void parallel_for(std::int64_t n, std::int64_t grain, RangeFnRef fn) {
  run_in_chunks(n, grain, num_threads(), fn);
}

void parallel_for_balanced(std::int64_t n, std::int64_t grain, RangeFnRef fn) {
  run_in_chunks(n, grain, num_threads() == 1 ? 1 : std::int64_t{4} * num_threads(), fn);
}

}  // namespace kiln::detail

// parallel_pair's helper thread (see parallel.hpp): the hand-over by atomics, the caller's
// take-back of a part the helper has not picked up, how each side waits, and the prediction
// (pair_helper_ready) that keeps short work whole while the helper has no core.
#include "kernels/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

namespace kiln::detail {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// The CPU the calling thread runs on, or -1 where that cannot be read.
int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

/// Moves the calling thread off `cpu` to another CPU it may run on (its mask is restored at
/// once, so the scheduler may move it back later); false when there is none or it cannot.
bool move_off(int cpu) {
#if defined(__linux__)
  cpu_set_t allowed;
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
      !CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2)
    return false;
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0) return false;
  sched_setaffinity(0, sizeof allowed, &allowed);
  return true;
#else
  (void)cpu;
  return false;
#endif
}

using Clock = std::chrono::steady_clock;

std::int64_t ticks(Clock::time_point t) { return t.time_since_epoch().count(); }

template <class Duration>
constexpr std::int64_t ticks_of(Duration d) {
  return std::chrono::duration_cast<Clock::duration>(d).count();
}

/// One helper thread for parallel_pair.
///
/// Hand-over: jobs are numbered; the caller publishes job n by storing posted_ = n. Whoever
/// moves claimed_ from n - 1 to n (one compare-exchange) runs the second part: the helper as
/// soon as it sees the job, or the caller when the helper has not taken it within pickup_bound
/// of the post, so a helper without a core costs the caller at most that bound (nothing, when
/// its own part takes longer). A helper that wakes late finds the job claimed and leaves it.
/// When the helper has it, done_ = n says it has finished.
///
/// Waiting never holds a core the other thread of the pair needs: each side yields when it finds
/// itself on the other's CPU, and the helper moves off the caller's CPU (move_off). The caller
/// spins for the helper's part about as long as its own took, then sleeps. The helper spins for
/// the next job while jobs or ready() questions keep coming, and sleeps spin_time after the
/// last. Sleeps are on condition variables; the flags helper_sleeping_ and caller_waiting_ tell
/// the other side to notify.
///
/// Prediction (ready()): while it waits for a job the helper stores the time (heartbeat_) every
/// half microsecond or so, so a caller can tell a helper that has a core right now from one that
/// does not (descheduled, asleep, on the caller's CPU) before it splits work. A helper that lost
/// its core for long (the caller waited long for its part, or its own spin stopped for long:
/// another thread shares its CPU) is not trusted for a back-off time, which doubles while that
/// keeps happening (see lost_core).
class PairHelper {
 public:
  /// Runs `own` on the caller and `job` on the helper (or on the caller, see above), or returns
  /// false at once when another thread is using the helper (or it could not be started).
  bool try_run(RangeFnRef own, RangeFnRef job, std::exception_ptr& own_error,
               std::exception_ptr& job_error) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    if (!start()) {
      unavailable_.store(true, std::memory_order_relaxed);
      busy_.store(false, std::memory_order_release);
      return false;
    }
    job_.emplace(job);
    const std::uint64_t n = posted_.load(std::memory_order_relaxed) + 1;
    const int cpu = current_cpu();
    caller_cpu_.store(cpu, std::memory_order_relaxed);
    const Clock::time_point posted_at = Clock::now();
    posted_.store(n, std::memory_order_seq_cst);  // ordered before the load of helper_sleeping_
    const bool was_sleeping = helper_sleeping_.load(std::memory_order_seq_cst);
    if (was_sleeping) wake();
    try {
      own(0, 1);
    } catch (...) {
      own_error = std::current_exception();
    }
    const Clock::time_point own_done = Clock::now();
    bool helper_has_it = claimed_.load(std::memory_order_acquire) == n;
    if (!helper_has_it) {
      // A helper that was asleep, or runs on this CPU, will not take the job in time.
      const bool wait_for_pickup =
          !was_sleeping && (cpu < 0 || helper_cpu_.load(std::memory_order_relaxed) != cpu);
      while (wait_for_pickup && claimed_.load(std::memory_order_acquire) != n &&
             Clock::now() - posted_at < pickup_bound)
        cpu_relax();
      std::uint64_t expected = n - 1;
      helper_has_it = !claimed_.compare_exchange_strong(expected, n, std::memory_order_acq_rel,
                                                        std::memory_order_acquire);
    }
    if (helper_has_it) {
      wait_for_helper(n, cpu, own_done, own_done - posted_at);
      job_error = std::exchange(error_, nullptr);
      counts_.on_helper.fetch_add(1, std::memory_order_relaxed);
    } else {
      try {
        job(1, 2);
      } catch (...) {
        job_error = std::current_exception();
      }
      counts_.taken_back.fetch_add(1, std::memory_order_relaxed);
    }
    job_.reset();
    busy_.store(false, std::memory_order_release);
    return true;
  }

  /// Whether try_run, called now for two parts of about part_ns each, would have the helper run
  /// one: it is free, trusted (no back-off running) and, for short parts, has a core (it spun
  /// within the last `freshness`, not on this CPU). Long parts (long_part and up) outlast a
  /// wake-up, so they need no awake helper. Also tells the helper which CPU to keep off, and
  /// wakes a sleeping helper when short calls come in a burst (the previous question less than
  /// spin_time ago; at most once per wake_interval), for the next calls.
  bool ready(std::int64_t part_ns) {
    const std::int64_t beat = heartbeat_.load(std::memory_order_relaxed);
    if (beat == 0)  // not started yet: the first try_run starts it
      return !unavailable_.load(std::memory_order_relaxed);
    const int cpu = current_cpu();
    // Stored only when it changes: the helper's spin reads this cache line.
    if (caller_cpu_.load(std::memory_order_relaxed) != cpu)
      caller_cpu_.store(cpu, std::memory_order_relaxed);
    const std::int64_t now = ticks(Clock::now());
    const std::int64_t last = last_asked_.exchange(now, std::memory_order_relaxed);
    const bool trusted = now >= distrusted_until_.load(std::memory_order_relaxed);
    if (trusted && !busy_.load(std::memory_order_relaxed)) {
      if (part_ns >= std::chrono::nanoseconds(long_part).count()) return true;
      if (now - beat < ticks_of(freshness) &&
          (cpu < 0 || cpu != helper_cpu_.load(std::memory_order_relaxed)))
        return true;
    }
    counts_.not_ready.fetch_add(1, std::memory_order_relaxed);
    if (trusted && helper_sleeping_.load(std::memory_order_relaxed) &&
        now - last < ticks_of(spin_time) &&
        now - last_wake_.load(std::memory_order_relaxed) >= ticks_of(wake_interval)) {
      last_wake_.store(now, std::memory_order_relaxed);
      wake();
    }
    return false;
  }

  PairCounts counts() const {
    PairCounts c;
    c.on_helper = counts_.on_helper.load(std::memory_order_relaxed);
    c.taken_back = counts_.taken_back.load(std::memory_order_relaxed);
    c.not_ready = counts_.not_ready.load(std::memory_order_relaxed);
    c.lost_core = counts_.lost_core.load(std::memory_order_relaxed);
    c.woken = counts_.woken.load(std::memory_order_relaxed);
    return c;
  }

  void hold(bool held) { held_.store(held, std::memory_order_seq_cst); }

 private:
  /// How long after the post the caller leaves the second part to the helper. A spinning helper
  /// took a job 0.07 us after the post (median; 0.1-0.14 us at the 99th percentile, 0.25-1.3 us
  /// at the 99.9th, on the 2-core VM of docs/performance.md); past 2 us it is not running.
  static constexpr auto pickup_bound = std::chrono::microseconds(2);
  /// How long the helper waits for the next job (or ready() question) before it sleeps.
  static constexpr auto spin_time = std::chrono::microseconds(200);
  /// The caller spins for the helper's part as long as its own part took, within these bounds,
  /// then sleeps: a part that takes much longer than its twin is not running.
  static constexpr auto min_join_spin = std::chrono::microseconds(5);
  static constexpr auto max_join_spin = std::chrono::microseconds(50);
  /// A heartbeat older than this means the helper is not running (it beats every ~0.5 us).
  static constexpr auto freshness = std::chrono::microseconds(10);
  /// Parts this long are worth the helper's wake-up (tens of microseconds on this VM).
  static constexpr auto long_part = std::chrono::microseconds(100);
  /// How often at most ready() wakes a sleeping helper.
  static constexpr auto wake_interval = std::chrono::milliseconds(1);
  /// How often at most the helper moves off the caller's CPU (each move costs a few us there).
  static constexpr auto hop_interval = std::chrono::milliseconds(1);
  /// A helper that lost its core for longer than this, beyond what its part needed, shares its
  /// CPU with a thread that wants it as much: another thread's time slice is milliseconds (the
  /// waits measured behind a busy loop were 3-10 ms), while the hiccups of an idle machine stay
  /// below ~1 ms.
  static constexpr auto lost_core_after = std::chrono::milliseconds(2);
  /// Back-off times for a helper that lost its core: the first (each next is 4 times longer),
  /// the longest, and how long without a loss after a back-off resets it to the first.
  static constexpr auto min_backoff = std::chrono::milliseconds(50);
  static constexpr auto max_backoff = std::chrono::seconds(1);
  static constexpr auto forgive_after = std::chrono::seconds(1);

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

  /// Wakes a sleeping helper (it then spins for spin_time).
  void wake() {
    counts_.woken.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    wake_requested_ = true;
    wake_.notify_one();
  }

  /// The helper lost its core for long at `now` (seen by either side): distrust it for a back-off
  /// time, 4 times the last one when that ended less than forgive_after ago. Under a thread that
  /// keeps the helper's CPU busy, at most one split per back-off time (soon max_backoff) waits
  /// for the helper; the others run whole.
  void lost_core(Clock::time_point now) {
    const std::int64_t t = ticks(now);
    const std::int64_t previous = backoff_.load(std::memory_order_relaxed);
    const bool again = previous > 0 && t - distrusted_until_.load(std::memory_order_relaxed) <
                                           ticks_of(forgive_after);
    const std::int64_t backoff =
        again ? std::min(4 * previous, ticks_of(max_backoff)) : ticks_of(min_backoff);
    backoff_.store(backoff, std::memory_order_relaxed);
    distrusted_until_.store(t + backoff, std::memory_order_relaxed);
    counts_.lost_core.fetch_add(1, std::memory_order_relaxed);
  }

  /// The caller's wait for job n, which the helper has claimed: spin while the helper's part
  /// may still be about as long as ours was (own_time), yielding instead when the helper shares
  /// this CPU; then sleep until the helper is done. A wait far longer than our part means the
  /// helper lost its core.
  void wait_for_helper(std::uint64_t n, int cpu, Clock::time_point own_done,
                       Clock::duration own_time) {
    const auto spin_until =
        own_done + std::clamp<Clock::duration>(own_time, min_join_spin, max_join_spin);
    for (int spins = 1; done_.load(std::memory_order_acquire) != n; ++spins) {
      const bool beside = cpu >= 0 && helper_cpu_.load(std::memory_order_relaxed) == cpu;
      if (beside)
        std::this_thread::yield();  // the helper needs this core to finish
      else
        cpu_relax();
      if ((!beside && (spins & 15) != 0) || Clock::now() < spin_until) continue;
      {
        std::unique_lock lock(mutex_);
        caller_waiting_.store(true, std::memory_order_seq_cst);  // before the load of done_
        done_wake_.wait(lock, [&] { return done_.load(std::memory_order_seq_cst) == n; });
        caller_waiting_.store(false, std::memory_order_relaxed);
      }
      const Clock::time_point now = Clock::now();
      if (now - own_done > own_time + lost_core_after) lost_core(now);
      return;
    }
  }

  /// The helper's wait for a job after `seen`; returns the job's number. It spins while jobs or
  /// ready() questions came within the last spin_time (and it is trusted), then sleeps.
  std::uint64_t next_job(std::uint64_t seen) {
    Clock::time_point last_hop{};
    while (true) {
      Clock::time_point now = Clock::now();
      heartbeat_.store(ticks(now), std::memory_order_relaxed);
      auto spin_until = now + spin_time;
      for (int spins = 1;; ++spins) {
        const std::uint64_t n = posted_.load(std::memory_order_acquire);
        if (n != seen) return n;
        cpu_relax();
        if ((spins & 15) != 0) continue;
        const Clock::time_point before = now;
        now = Clock::now();
        heartbeat_.store(ticks(now), std::memory_order_relaxed);
        const int cpu = current_cpu();
        const bool beside = cpu >= 0 && cpu == caller_cpu_.load(std::memory_order_relaxed);
        // Off for long between two looks, on a CPU of its own: another thread runs there.
        if (!beside && now - before > lost_core_after) lost_core(now);
        if (now >= spin_until) {
          const Clock::time_point asked{
              Clock::duration(last_asked_.load(std::memory_order_relaxed))};
          if (now - asked >= spin_time ||
              ticks(now) < distrusted_until_.load(std::memory_order_relaxed))
            break;
          spin_until = asked + spin_time;  // callers are still asking: stay ready
        }
        if (beside) {
          // On the caller's CPU the helper can only run when the caller does not: move to
          // another CPU (at most once per hop_interval), else give the caller the core.
          if (now - last_hop >= hop_interval && move_off(cpu)) {
            last_hop = now;
            helper_cpu_.store(current_cpu(), std::memory_order_relaxed);
            continue;
          }
          std::this_thread::yield();
        }
        helper_cpu_.store(cpu, std::memory_order_relaxed);
      }
      std::unique_lock lock(mutex_);
      helper_sleeping_.store(true, std::memory_order_seq_cst);  // before the load of posted_
      wake_.wait(
          lock, [&] { return posted_.load(std::memory_order_seq_cst) != seen || wake_requested_; });
      wake_requested_ = false;
      helper_sleeping_.store(false, std::memory_order_relaxed);
      const std::uint64_t n = posted_.load(std::memory_order_acquire);
      if (n != seen) return n;
    }
  }

  void loop() {
    inside_parallel_region = true;
    std::uint64_t seen = 0;
    while (true) {
      const std::uint64_t n = next_job(seen);
      seen = n;
      while (held_.load(std::memory_order_acquire))
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      std::uint64_t expected = n - 1;
      if (!claimed_.compare_exchange_strong(expected, n, std::memory_order_acq_rel,
                                            std::memory_order_relaxed))
        continue;  // the caller ran it (or job n is long gone)
      helper_cpu_.store(current_cpu(), std::memory_order_relaxed);
      try {
        (*job_)(1, 2);
      } catch (...) {
        error_ = std::current_exception();
      }
      done_.store(n, std::memory_order_seq_cst);  // before the load of caller_waiting_
      if (caller_waiting_.load(std::memory_order_seq_cst)) {
        std::lock_guard lock(mutex_);
        done_wake_.notify_one();
      }
    }
  }

  std::atomic<bool> busy_{false};  // held by the calling thread for one job
  bool started_ = false;           // guarded by busy_
  std::optional<RangeFnRef> job_;  // written before posted_, read by the helper after its claim
  std::exception_ptr error_;       // written by the helper before done_, read after it
  // Written by the caller, read by the helper's spin.
  alignas(64) std::atomic<std::uint64_t> posted_{0};
  std::atomic<int> caller_cpu_{-1};  // where a caller last asked or posted
  // Written by the helper, read by the caller.
  alignas(64) std::atomic<std::uint64_t> claimed_{0};
  std::atomic<std::uint64_t> done_{0};
  std::atomic<int> helper_cpu_{-1};         // where the helper last looked
  std::atomic<std::int64_t> heartbeat_{0};  // when the helper last looked (Clock ticks)
  // Written by the callers of ready(), and by lost_core.
  alignas(64) std::atomic<std::int64_t> last_asked_{0};  // when ready() was last called
  std::atomic<std::int64_t> last_wake_{0};               // when ready() last woke the helper
  std::atomic<std::int64_t> distrusted_until_{0};        // the back-off's end (Clock ticks)
  std::atomic<std::int64_t> backoff_{0};                 // the last back-off time (Clock ticks)
  std::atomic<bool> helper_sleeping_{false};
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> held_{false};         // test hook: the helper takes no job
  std::atomic<bool> unavailable_{false};  // the helper thread could not be started
  std::mutex mutex_;                      // for the two condition variables and wake_requested_
  std::condition_variable wake_;          // the helper's sleep
  std::condition_variable done_wake_;     // the caller's sleep
  bool wake_requested_ = false;           // a wake without a job (ready()), guarded by mutex_
  struct alignas(64) Counts {
    std::atomic<std::int64_t> on_helper{0}, taken_back{0}, not_ready{0}, lost_core{0}, woken{0};
  } counts_;
};

/// parallel_pair calls that ran both parts inline.
std::atomic<std::int64_t> inline_pairs{0};

PairHelper& pair_helper() {
  static auto* helper = new PairHelper;  // never destroyed: its thread may still be waiting
  return *helper;
}

}  // namespace

void parallel_pair(RangeFnRef first, RangeFnRef second) {
  std::exception_ptr first_error, second_error;
  bool ran = false;
  if (num_threads() > 1 && !inside_parallel_region) {
    inside_parallel_region = true;  // kernels inside either half stay on their own thread
    ran = pair_helper().try_run(first, second, first_error, second_error);
    inside_parallel_region = false;
  }
  if (!ran) {  // both parts run, as on two threads, even when the first throws
    inline_pairs.fetch_add(1, std::memory_order_relaxed);
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

PairCounts pair_counts() {
  PairCounts counts = pair_helper().counts();
  counts.inline_both = inline_pairs.load(std::memory_order_relaxed);
  return counts;
}

bool pair_helper_ready(std::int64_t part_ns) {
  return num_threads() > 1 && !inside_parallel_region && pair_helper().ready(part_ns);
}

void hold_pair_helper(bool held) { pair_helper().hold(held); }

}  // namespace kiln::detail

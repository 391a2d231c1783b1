#pragma once
// A small persistent thread pool that splits a range of work across the cores (parallel_for;
// kernels call it only for large inputs, small ones never touch the pool), and one helper
// thread that runs the second of two parts of a call of a few microseconds (parallel_pair, for
// the batch split).

#include <cstdint>
#include <type_traits>

namespace kiln::detail {

/// A non-owning reference to a callable `void(std::int64_t begin, std::int64_t end)`; two
/// pointers, no allocation. The callable must outlive every call through the reference.
class RangeFnRef {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFnRef>)
      RangeFnRef(F& fn)  // NOLINT(google-explicit-constructor): used like std::function_ref
      : object_(&fn), call_([](void* object, std::int64_t begin, std::int64_t end) {
          (*static_cast<F*>(object))(begin, end);
        }) {}

  void operator()(std::int64_t begin, std::int64_t end) const { call_(object_, begin, end); }

 private:
  void* object_;
  void (*call_)(void*, std::int64_t, std::int64_t);
};

/// True on the pool's threads and the pair helper, and on a caller thread while it runs its
/// share of a parallel_for or parallel_pair: work started there stays on its thread.
extern thread_local bool inside_parallel_region;

/// Threads parallel_for uses, the caller included: KILN_NUM_THREADS when it is set to a
/// positive integer, else std::thread::hardware_concurrency(). Read once.
int num_threads();

/// Calls fn(begin, end) on disjoint chunks that cover [0, n), each about n / chunks long
/// and at least `grain` long, where chunks <= num_threads(). The calling thread runs
/// chunks too and returns when all are done. Runs fn(0, n) inline when there is a single
/// chunk, when called from inside another parallel_for (nested), or when another thread
/// is using the pool. The pool threads start on first use and are joined at exit. An
/// exception thrown by fn is rethrown in the caller (after all chunks have finished).
void parallel_for(std::int64_t n, std::int64_t grain, RangeFnRef fn);

/// parallel_for in up to 4 * num_threads() chunks (of at least `grain`), which the threads claim
/// one after another: when a thread gets its core late (other processes on the machine), the
/// others take over its share chunk by chunk instead of one waiting for the other's whole half.
/// For long memory-bound kernels (fused elementwise, softmax, reductions), where a few more
/// claims per call cost nothing. fn must not assume one chunk per thread.
void parallel_for_balanced(std::int64_t n, std::int64_t grain, RangeFnRef fn);

/// Runs first(0, 1) on the calling thread and second(1, 2) on a helper thread at the same time,
/// for splits of work too small for the pool's wake-up (a call of a few microseconds): the
/// helper spins for a while after each job, so back-to-back calls hand over in well under a
/// microsecond. A split is never much slower than running both parts on the caller: when the
/// helper has not picked second up within a bound of about two microseconds (it has no core,
/// e.g. another process keeps it busy), the caller runs second itself after first, and a late
/// helper finds nothing to do. Runs both inline, one after the other, when there is one thread,
/// when called from inside a parallel region, or when another thread is using the helper.
/// Returns when both are done; both run even when one throws; rethrows first's exception, else
/// second's.
void parallel_pair(RangeFnRef first, RangeFnRef second);

/// Whether a parallel_pair call made now, for parts of about part_ns nanoseconds each (0:
/// unknown), would likely run its second part on the helper: there are two threads, this thread
/// is not inside a parallel region, the helper is free, it has not lately been kept off its core
/// for milliseconds (another thread busy on its CPU), and, unless the parts are long (100 us and
/// up, which outlast a wake-up), it is awake and running (it spun within the last few
/// microseconds, on another CPU than this thread's). Callers that have an unsplit way to do the
/// same work run that when this is false: two parts run one after the other on the caller cost
/// more than the unsplit work. A helper asleep is woken when short calls come in a burst, so
/// that it is ready for the next ones.
bool pair_helper_ready(std::int64_t part_ns);

/// How parallel_pair and pair_helper_ready calls went since the process started (for tests and
/// benchmarks).
struct PairCounts {
  std::int64_t on_helper = 0;    // second ran on the helper
  std::int64_t taken_back = 0;   // the helper was too late: the caller ran second after first
  std::int64_t inline_both = 0;  // no helper used (one thread, nested, or the helper was busy)
  std::int64_t not_ready = 0;    // pair_helper_ready() answered false because of the helper
  std::int64_t lost_core = 0;    // the helper was off its core for long: a back-off began
  std::int64_t woken = 0;        // a sleeping helper was woken
};
PairCounts pair_counts();

/// Test hook: while held, the helper takes no job, as if it never got a core; parallel_pair
/// calls then run both parts on the caller (counted as taken_back).
void hold_pair_helper(bool held);

template <class F>
requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFnRef>) void parallel_for(std::int64_t n,
                                                                                std::int64_t grain,
                                                                                F&& fn) {
  parallel_for(n, grain, RangeFnRef(fn));
}
template <class F>
requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFnRef>) void parallel_for_balanced(
    std::int64_t n, std::int64_t grain, F&& fn) {
  parallel_for_balanced(n, grain, RangeFnRef(fn));
}

}  // namespace kiln::detail

#pragma once
// A small persistent thread pool that splits a range of work across the cores. Kernels
// call parallel_for only for large inputs; small ones never touch the pool.

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

/// Runs first(0, 1) on the calling thread and second(1, 2) on a helper thread at the same time,
/// for splits of work too small for the pool's wake-up (a call of a few microseconds): the
/// helper spins for a while after each job, so back-to-back calls hand over in well under a
/// microsecond. Runs both inline, one after the other, when there is one thread, when called
/// from inside a parallel region, or when another thread is using the helper. Returns when both
/// are done; rethrows first's exception, else second's.
void parallel_pair(RangeFnRef first, RangeFnRef second);

template <class F>
requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFnRef>) void parallel_for(std::int64_t n,
                                                                                std::int64_t grain,
                                                                                F&& fn) {
  parallel_for(n, grain, RangeFnRef(fn));
}

}  // namespace kiln::detail

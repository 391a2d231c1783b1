// kiln::distributed (kiln/distributed.hpp) on Open MPI. This translation unit alone sees MPI's
// headers (meson builds it into its own static library with the MPI dependency); without MPI
// every function throws a kiln::Error that says so.
#include "kiln/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/collective.hpp"
#include "kiln/ops.hpp"

#if KILN_HAVE_MPI
#include "distributed/replicas.hpp"  // and mpi.h
#endif

namespace kiln::distributed {

namespace {

using detail::fail;

struct State {
  std::mutex mutex;
  bool started = false;  // init() ran (and finalize() may have run since)
  bool live = false;     // init() ran and finalize() did not
  int rank = 0, size = 1, local_rank = 0;
#if KILN_HAVE_MPI
  std::shared_ptr<class Engine> engine;  // while live
#endif
};

State& state() {
  static State s;
  return s;
}

/// The state of a live MPI, for `op`; an error naming op otherwise.
State& live_state(const char* op) {
  State& s = state();
  if (!s.live)
    fail(op, "{}",
         s.started ? "MPI was finalized (kiln::distributed::finalize)"
                   : "MPI is not started: call kiln::distributed::init() first");
  return s;
}

#if KILN_HAVE_MPI

using replicas::check_mpi;

/// The MPI type of one element of dtype, for the reductions (bool, i8 and u8 are not reduced).
MPI_Datatype reduce_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    default:
      fail(op, "reduces f32, f64, i32 or i64 tensors, got {}", dtype_name(dtype));
  }
}

/// x as a contiguous eager tensor, for a collective named op.
Tensor concrete(const Tensor& x, const char* op) {
  if (!x.defined()) fail(op, "argument 0 is an undefined tensor");
  if (detail::active_trace() != nullptr)
    fail(op, "collectives run eagerly; call it outside kiln::function");
  detail::check_concrete(*x.impl(), op);
  return x.contiguous();
}

/// Every process must pass the same dtype and rank, and the same dims from `first_dim` on:
/// one allreduce of those numbers and their negations with MIN finds the least and the
/// greatest of each, and any difference is an error on every process alike.
void check_same_layout(const Tensor& x, std::size_t first_dim, const char* op) {
  std::vector<std::int64_t> mine{static_cast<std::int64_t>(x.dtype()), x.ndim()};
  for (std::size_t d = first_dim; d < x.shape().size(); ++d) mine.push_back(x.shape()[d]);
  // Ranks of different ranks (ndim) send vectors of different lengths: pad to the largest rank.
  mine.resize(2 + Shape::max_rank, -1);
  std::vector<std::int64_t> both(2 * mine.size()), least(both.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    both[i] = mine[i];
    both[mine.size() + i] = -mine[i];
  }
  check_mpi(MPI_Allreduce(both.data(), least.data(), static_cast<int>(both.size()), MPI_INT64_T,
                          MPI_MIN, MPI_COMM_WORLD),
            op, "MPI_Allreduce");
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (least[i] != -least[mine.size() + i])
      fail(op,
           "the processes passed different tensors (this one: {} {}); every process must pass "
           "the same dtype and shape{}",
           dtype_name(x.dtype()), x.shape(), first_dim > 0 ? " after the first dim" : "");
}

/// The byte count of t as an MPI count.
int byte_count(const Tensor& t, const char* op) {
  const auto bytes =
      static_cast<std::int64_t>(t.size()) * static_cast<std::int64_t>(dtype_size(t.dtype()));
  if (bytes > INT_MAX) fail(op, "a tensor of {} bytes is larger than one MPI message", bytes);
  return static_cast<int>(bytes);
}

#endif

#if KILN_HAVE_MPI

/// out[i] = in[i] * factor (separate buffers, so the compiler vectorizes it).
template <class T>
void scaled_copy(const T* __restrict in, T* __restrict out, std::size_t n, T factor) {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i] * factor;
}

/// The thread that talks to MPI, and the collectives queued for it. Every MPI call of the
/// process runs on this one thread (MPI_THREAD_FUNNELED, with it as MPI's main thread), in the
/// order the calls were queued: eager collectives from the caller's thread, and gradient
/// buckets from a compiled train step (the collective primitives' kernels), which queue one and
/// carry on with the backward pass while this thread sends it. Since every process queues the
/// same collectives in the same order, they meet in MPI in that order.
///
/// A caller waits for its collective with a timeout. A collective that does not finish in time
/// (a process died, or stopped calling collectives) breaks the engine: the caller gets a
/// kiln::Error, and so does every later call, instead of waiting forever.
class Engine final : public detail::CollectiveEngine {
 public:
  explicit Engine(std::chrono::milliseconds timeout) : timeout_(timeout) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Engine() {
    if (!thread_.joinable()) return;  // stopped by finalize()
    bool stuck = false;
    {
      std::lock_guard lock(mutex_);
      stuck = !broken_.empty();
      stopping_ = true;
    }
    work_.notify_one();
    // A thread stuck in MPI (a broken engine) cannot be joined; the process is ending anyway.
    // Otherwise (init() failed, say) it finishes its queue and ends.
    if (stuck)
      thread_.detach();
    else
      thread_.join();
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Runs `task` on the MPI thread and waits for it (its exception is rethrown here).
  void run(const char* op, std::function<void()> task) {
    auto job = std::make_shared<Job>();
    job->task = std::move(task);
    {
      std::unique_lock lock(mutex_);
      fail_if_broken(op);
      queue_.push_back(job);
    }
    work_.notify_one();
    std::unique_lock lock(mutex_);
    if (!done_.wait_for(lock, timeout_, [&] { return job->done; })) break_engine(op);
    if (job->error) std::rethrow_exception(job->error);
  }

  /// Stops the thread after the queued work (finalize()). Returns false when it is stuck.
  bool stop() {
    {
      std::lock_guard lock(mutex_);
      if (!broken_.empty()) return false;
      stopping_ = true;
    }
    work_.notify_one();
    thread_.join();
    return true;
  }

  /// Called once MPI is up, before any collective.
  void set_world(int rank, int size) {
    size_ = size;
    rounds_.set_world(rank, size);
  }
  /// On the MPI thread, before MPI_Finalize: ends the sync-replicas rounds.
  void finish_rounds(const char* op) { rounds_.finish(op); }
  int size() const override { return size_; }

  std::int64_t start(detail::CollectiveKind kind, DType dtype,
                     std::span<const detail::ArrayRef> inputs,
                     const detail::CollectiveParams& params, const char* op) override {
    std::int64_t bytes = 0;
    for (const detail::ArrayRef& a : inputs)
      bytes += a.numel() * static_cast<std::int64_t>(dtype_size(a.dtype));
    const std::int64_t elements = bytes / static_cast<std::int64_t>(dtype_size(dtype));
    if (elements > INT_MAX || (kind == detail::CollectiveKind::gather && bytes * size_ > INT_MAX))
      fail(op, "a bucket of {} bytes is larger than one MPI message", bytes);
    auto job = std::make_shared<Job>();
    // kiln tensors as buffers: aligned, and recycled by kiln's storage cache. The result has a
    // buffer of its own (an in-place allreduce copies inside MPI).
    job->data = buffer(bytes, op);
    job->result = buffer(kind == detail::CollectiveKind::gather ? bytes * size_ : bytes, op);
    char* at = job->data.impl()->data();
    for (const detail::ArrayRef& a : inputs) {
      const auto n = static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype);
      if (n > 0) std::memcpy(at, a.data, n);
      at += n;
    }
    Job& j = *job;
    job->task = [this, &j, kind, dtype, elements, bytes, params, op] {
      if (kind == detail::CollectiveKind::replicas)
        rounds_.run(reinterpret_cast<const std::byte*>(j.data.impl()->data()),
                    reinterpret_cast<std::byte*>(j.result.impl()->data()), bytes, dtype, params,
                    op);
      else if (kind == detail::CollectiveKind::sum)
        check_mpi(MPI_Allreduce(j.data.impl()->data(), j.result.impl()->data(),
                                static_cast<int>(elements), reduce_type(dtype, op), MPI_SUM,
                                MPI_COMM_WORLD),
                  op, "MPI_Allreduce");
      else
        check_mpi(MPI_Allgather(j.data.impl()->data(), static_cast<int>(bytes), MPI_BYTE,
                                j.result.impl()->data(), static_cast<int>(bytes), MPI_BYTE,
                                MPI_COMM_WORLD),
                  op, "MPI_Allgather");
    };
    std::int64_t ticket = 0;
    {
      std::lock_guard lock(mutex_);
      fail_if_broken(op);
      ticket = next_ticket_++;
      tickets_.emplace(ticket, job);
      queue_.push_back(std::move(job));
    }
    work_.notify_one();
    return ticket;
  }

  void wait(std::int64_t ticket, const detail::ArrayRef& out, double scale,
            const char* op) override {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      const auto it = tickets_.find(ticket);
      if (it == tickets_.end()) fail(op, "no collective has ticket {}", ticket);
      job = it->second;
      tickets_.erase(it);
      if (!done_.wait_for(lock, timeout_, [&] { return job->done; })) break_engine(op);
    }
    if (job->error) std::rethrow_exception(job->error);
    const void* result = job->result.impl()->data();
    const auto result_bytes = static_cast<std::size_t>(job->result.size());
    const auto n = static_cast<std::size_t>(out.numel());
    if (n * dtype_size(out.dtype) != result_bytes)
      fail(op, "the result has {} bytes, its output {}", result_bytes, n * dtype_size(out.dtype));
    if (scale != 1.0 && out.dtype == DType::f32)
      scaled_copy(static_cast<const float*>(result), out.ptr<float>(), n,
                  static_cast<float>(scale));
    else if (scale != 1.0 && out.dtype == DType::f64)
      scaled_copy(static_cast<const double*>(result), out.ptr<double>(), n, scale);
    else if (result_bytes > 0)
      std::memcpy(out.data, result, result_bytes);
  }

 private:
  struct Job {
    std::function<void()> task;
    Tensor data, result;  // buckets: the data sent and the result (u8 tensors)
    bool done = false;    // guarded by the engine's mutex
    std::exception_ptr error;
  };

  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing is left
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        job->task();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        job->error = error;
        job->done = true;
      }
      done_.notify_all();
    }
  }

  /// Called with the mutex held.
  void fail_if_broken(const char* op) const {
    if (!broken_.empty()) fail(op, "{}", broken_);
  }

  /// Called with the mutex held, after a wait ran out of time.
  [[noreturn]] void break_engine(const char* op) {
    if (broken_.empty())
      broken_ = fmt::format(
          "no answer from the other processes within {} s: a process may have died or stopped "
          "calling the same collectives in the same order (kiln::distributed cannot go on; "
          "InitOptions::timeout_seconds sets the limit)",
          std::chrono::duration<double>(timeout_).count());
    fail(op, "{}", broken_);
  }

  /// A buffer of `bytes` bytes (a u8 tensor).
  static Tensor buffer(std::int64_t bytes, const char* op) {
    return detail::empty(Shape{bytes}, DType::u8, op);
  }

  std::chrono::milliseconds timeout_;
  int size_ = 1;
  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<std::int64_t, std::shared_ptr<Job>> tickets_;
  std::int64_t next_ticket_ = 1;
  std::string broken_;
  bool stopping_ = false;
  std::thread thread_;
  replicas::Rounds rounds_;  // the MPI thread's alone
};

#endif

}  // namespace

bool available() { return KILN_HAVE_MPI != 0; }

bool initialized() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.live;
}

int rank() { return live_state("distributed.rank").rank; }
int size() { return live_state("distributed.size").size; }
int local_rank() { return live_state("distributed.local_rank").local_rank; }

#if KILN_HAVE_MPI

/// The line a process prints when the launcher stops it (SIGTERM): mpirun does that to every
/// process when one of them died or failed, and without a word the survivors' end looks like a
/// crash of their own. Written at init() (a signal handler may only write).
char stop_message[256];
std::size_t stop_message_length = 0;

extern "C" void on_launcher_stop(int signal_number) {
  [[maybe_unused]] const auto written = ::write(2, stop_message, stop_message_length);
  // Stay alive a moment so the launcher reads the line before it sees this process end: Open
  // MPI's mpirun may stop forwarding a process's output once that process died of a signal, and
  // a CI run once lost one of four survivors' lines that way. mpirun sends SIGKILL 1 s after
  // SIGTERM by default, so 0.2 s is well inside it.
  const timespec pause{.tv_sec = 0, .tv_nsec = 200'000'000};
  ::nanosleep(&pause, nullptr);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

/// Installs on_launcher_stop for SIGTERM unless the program handles SIGTERM itself.
void explain_launcher_stops(int rank, int size) {
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  const auto text = fmt::format(
      "kiln::distributed: process {} of {} was stopped by the launcher: another process of the "
      "job died or failed (see mpirun's report)\n",
      rank, size);
  stop_message_length = std::min(text.size(), sizeof stop_message);
  std::memcpy(stop_message, text.data(), stop_message_length);
  std::signal(SIGTERM, &on_launcher_stop);
}

Engine& live_engine(const char* op) {
  live_state(op);
  return *state().engine;
}

void init(const InitOptions& options) {
  constexpr const char* op = "distributed.init";
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.started)
    fail(op, "{}",
         s.live ? "already called in this process" : "MPI was finalized; it cannot restart");
  if (!(options.timeout_seconds > 0) || !std::isfinite(options.timeout_seconds))
    fail(op, "timeout_seconds must be finite and > 0, got {}", options.timeout_seconds);
  auto engine = std::make_shared<Engine>(std::chrono::milliseconds(
      static_cast<std::int64_t>(std::ceil(options.timeout_seconds * 1000.0))));
  int rank = 0, size = 1, local_rank = 0;
  engine->run(op, [&] {
    int already = 0;
    check_mpi(MPI_Initialized(&already), op, "MPI_Initialized");
    if (already)
      fail(op,
           "MPI was initialised by someone else in this process; kiln::distributed::init must "
           "start it (and finalize end it)");
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), op,
              "MPI_Init_thread");
    // Errors come back as codes (kiln::Error), not as an abort of the whole job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm local;
    check_mpi(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), op,
        "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
  });
  engine->set_world(rank, size);
  explain_launcher_stops(rank, size);
  s.rank = rank;
  s.size = size;
  s.local_rank = local_rank;
  s.engine = std::move(engine);
  detail::set_collective_engine(s.engine.get());
  s.started = s.live = true;
}

Tensor allreduce(const Tensor& x, ReduceOp reduce) {
  constexpr const char* op = "distributed.allreduce";
  Engine& engine = live_engine(op);
  const Tensor in = concrete(x, op);
  const MPI_Datatype type = reduce_type(in.dtype(), op);
  if (reduce == ReduceOp::mean && !is_floating(in.dtype()))
    fail(op, "mean needs a floating dtype, got {}", dtype_name(in.dtype()));
  if (in.size() > INT_MAX)
    fail(op, "a tensor of {} elements is larger than one MPI message", in.size());
  Tensor out = detail::empty(in.shape(), in.dtype(), op);
  const MPI_Op mpi_op = reduce == ReduceOp::max   ? MPI_MAX
                        : reduce == ReduceOp::min ? MPI_MIN
                                                  : MPI_SUM;
  // The task holds its tensors: should the wait run out of time, the thread may still write.
  engine.run(op, [in, out, type, mpi_op] {
    check_same_layout(in, 0, op);
    check_mpi(MPI_Allreduce(in.impl()->data(), out.impl()->data(), static_cast<int>(in.size()),
                            type, mpi_op, MPI_COMM_WORLD),
              op, "MPI_Allreduce");
  });
  if (reduce == ReduceOp::mean) out = out / scalar(static_cast<double>(engine.size()), out.dtype());
  return out;
}

Tensor broadcast(const Tensor& x, int root) {
  constexpr const char* op = "distributed.broadcast";
  const State& s = live_state(op);
  if (root < 0 || root >= s.size) fail(op, "root {} is not a rank of [0, {})", root, s.size);
  const Tensor in = concrete(x, op);
  Tensor out = detail::empty(in.shape(), in.dtype(), op);
  const int bytes = byte_count(in, op);
  if (s.rank == root && bytes > 0)
    std::memcpy(out.impl()->data(), in.impl()->data(), static_cast<std::size_t>(bytes));
  s.engine->run(op, [in, out, bytes, root] {
    check_same_layout(in, 0, op);
    check_mpi(MPI_Bcast(out.impl()->data(), bytes, MPI_BYTE, root, MPI_COMM_WORLD), op,
              "MPI_Bcast");
  });
  return out;
}

Tensor allgather(const Tensor& x) {
  constexpr const char* op = "distributed.allgather";
  Engine& engine = live_engine(op);
  const Tensor in = concrete(x, op);
  if (in.ndim() == 0)
    fail(op, "needs a tensor with a first dim to concatenate along, got a scalar");
  auto out = std::make_shared<Tensor>();
  const int bytes = byte_count(in, op);
  engine.run(op, [in, out, bytes] {
    check_same_layout(in, 1, op);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(size));
    const std::int64_t mine = in.shape()[0];
    check_mpi(MPI_Allgather(&mine, 1, MPI_INT64_T, rows.data(), 1, MPI_INT64_T, MPI_COMM_WORLD), op,
              "MPI_Allgather");
    const std::int64_t row_bytes =
        (in.shape()[0] == 0 ? 0 : static_cast<std::int64_t>(in.size()) / in.shape()[0]) *
        static_cast<std::int64_t>(dtype_size(in.dtype()));
    Shape shape = in.shape();
    std::int64_t total_rows = 0;
    std::vector<int> counts(rows.size()), offsets(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::int64_t row_count = rows[r] * row_bytes, offset = total_rows * row_bytes;
      if (row_count > INT_MAX || offset > INT_MAX)
        fail(op, "the gathered tensor is larger than one MPI message");
      counts[r] = static_cast<int>(row_count);
      offsets[r] = static_cast<int>(offset);
      total_rows += rows[r];
    }
    shape[0] = total_rows;
    *out = detail::empty(shape, in.dtype(), op);
    check_mpi(MPI_Allgatherv(in.impl()->data(), bytes, MPI_BYTE, out->impl()->data(), counts.data(),
                             offsets.data(), MPI_BYTE, MPI_COMM_WORLD),
              op, "MPI_Allgatherv");
  });
  return *out;
}

std::int64_t dropped_gradients() {
  if (!state().started)
    fail("distributed.dropped_gradients",
         "MPI is not started: call kiln::distributed::init() first");
  return replicas::dropped();
}

void barrier() {
  constexpr const char* op = "distributed.barrier";
  live_engine(op).run(op, [] { check_mpi(MPI_Barrier(MPI_COMM_WORLD), op, "MPI_Barrier"); });
}

void finalize() {
  constexpr const char* op = "distributed.finalize";
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.live) fail(op, "{}", s.started ? "already called" : "MPI is not started (no init())");
  s.live = false;
  detail::set_collective_engine(nullptr);
  std::shared_ptr<Engine> engine = std::move(s.engine);
  // Finalizing needs the other processes; a broken engine's thread is stuck in MPI.
  Engine* e = engine.get();
  engine->run(op, [e] {
    e->finish_rounds(op);
    check_mpi(MPI_Finalize(), op, "MPI_Finalize");
  });
  engine->stop();
}

#else  // without MPI

namespace {
[[noreturn]] void missing(const char* op) {
  fail(op, "this kiln was built without MPI (install Debian's libopenmpi-dev and rebuild kiln)");
}
}  // namespace

void init(const InitOptions&) { missing("distributed.init"); }
Tensor allreduce(const Tensor&, ReduceOp) { missing("distributed.allreduce"); }
Tensor broadcast(const Tensor&, int) { missing("distributed.broadcast"); }
Tensor allgather(const Tensor&) { missing("distributed.allgather"); }
void barrier() { missing("distributed.barrier"); }
void finalize() { missing("distributed.finalize"); }
std::int64_t dropped_gradients() { missing("distributed.dropped_gradients"); }

#endif

}  // namespace kiln::distributed

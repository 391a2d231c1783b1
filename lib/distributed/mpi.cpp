// kiln::distributed (kiln/distributed.hpp) on Open MPI. This translation unit alone sees MPI's
// headers (meson builds it into its own static library with the MPI dependency); without MPI
// every function throws a kiln::Error that says so.
#include "kiln/distributed.hpp"

#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/ops.hpp"

#if KILN_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: MPI's C++ bindings are deprecated
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kiln::distributed {

namespace {

using detail::fail;

struct State {
  std::mutex mutex;
  bool started = false;  // init() ran (and finalize() may have run since)
  bool live = false;     // init() ran and finalize() did not
  int rank = 0, size = 1, local_rank = 0;
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

/// Turns an MPI error code into a kiln::Error naming op and MPI's message.
void check_mpi(int code, const char* op, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(op, "{} failed: {}", call, std::string(text, static_cast<std::size_t>(length)));
}

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

void init() {
  constexpr const char* op = "distributed.init";
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.started)
    fail(op, "{}",
         s.live ? "already called in this process" : "MPI was finalized; it cannot restart");
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
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  MPI_Comm local;
  check_mpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &local), op,
      "MPI_Comm_split_type");
  MPI_Comm_rank(local, &s.local_rank);
  MPI_Comm_free(&local);
  s.started = s.live = true;
}

Tensor allreduce(const Tensor& x, ReduceOp reduce) {
  constexpr const char* op = "distributed.allreduce";
  const State& s = live_state(op);
  const Tensor in = concrete(x, op);
  const MPI_Datatype type = reduce_type(in.dtype(), op);
  if (reduce == ReduceOp::mean && !is_floating(in.dtype()))
    fail(op, "mean needs a floating dtype, got {}", dtype_name(in.dtype()));
  if (in.size() > INT_MAX)
    fail(op, "a tensor of {} elements is larger than one MPI message", in.size());
  check_same_layout(in, 0, op);
  Tensor out = detail::empty(in.shape(), in.dtype(), op);
  const MPI_Op mpi_op = reduce == ReduceOp::max   ? MPI_MAX
                        : reduce == ReduceOp::min ? MPI_MIN
                                                  : MPI_SUM;
  check_mpi(MPI_Allreduce(in.impl()->data(), out.impl()->data(), static_cast<int>(in.size()), type,
                          mpi_op, MPI_COMM_WORLD),
            op, "MPI_Allreduce");
  if (reduce == ReduceOp::mean) out = out / scalar(static_cast<double>(s.size), out.dtype());
  return out;
}

Tensor broadcast(const Tensor& x, int root) {
  constexpr const char* op = "distributed.broadcast";
  const State& s = live_state(op);
  if (root < 0 || root >= s.size) fail(op, "root {} is not a rank of [0, {})", root, s.size);
  const Tensor in = concrete(x, op);
  check_same_layout(in, 0, op);
  Tensor out = detail::empty(in.shape(), in.dtype(), op);
  const int bytes = byte_count(in, op);
  if (s.rank == root && bytes > 0)
    std::memcpy(out.impl()->data(), in.impl()->data(), static_cast<std::size_t>(bytes));
  check_mpi(MPI_Bcast(out.impl()->data(), bytes, MPI_BYTE, root, MPI_COMM_WORLD), op, "MPI_Bcast");
  return out;
}

Tensor allgather(const Tensor& x) {
  constexpr const char* op = "distributed.allgather";
  const State& s = live_state(op);
  const Tensor in = concrete(x, op);
  if (in.ndim() == 0)
    fail(op, "needs a tensor with a first dim to concatenate along, got a scalar");
  check_same_layout(in, 1, op);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(s.size));
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
    const std::int64_t bytes = rows[r] * row_bytes, offset = total_rows * row_bytes;
    if (bytes > INT_MAX || offset > INT_MAX)
      fail(op, "the gathered tensor is larger than one MPI message");
    counts[r] = static_cast<int>(bytes);
    offsets[r] = static_cast<int>(offset);
    total_rows += rows[r];
  }
  shape[0] = total_rows;
  Tensor out = detail::empty(shape, in.dtype(), op);
  check_mpi(MPI_Allgatherv(in.impl()->data(), byte_count(in, op), MPI_BYTE, out.impl()->data(),
                           counts.data(), offsets.data(), MPI_BYTE, MPI_COMM_WORLD),
            op, "MPI_Allgatherv");
  return out;
}

void barrier() {
  constexpr const char* op = "distributed.barrier";
  live_state(op);
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), op, "MPI_Barrier");
}

void finalize() {
  constexpr const char* op = "distributed.finalize";
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.live) fail(op, "{}", s.started ? "already called" : "MPI is not started (no init())");
  s.live = false;
  check_mpi(MPI_Finalize(), op, "MPI_Finalize");
}

#else  // without MPI

namespace {
[[noreturn]] void missing(const char* op) {
  fail(op, "this kiln was built without MPI (install Debian's libopenmpi-dev and rebuild kiln)");
}
}  // namespace

void init() { missing("distributed.init"); }
Tensor allreduce(const Tensor&, ReduceOp) { missing("distributed.allreduce"); }
Tensor broadcast(const Tensor&, int) { missing("distributed.broadcast"); }
Tensor allgather(const Tensor&) { missing("distributed.allgather"); }
void barrier() { missing("distributed.barrier"); }
void finalize() { missing("distributed.finalize"); }

#endif

}  // namespace kiln::distributed

#pragma once
// Sync replicas (TensorFlow's SyncReplicasOptimizer with backup workers) on MPI point-to-point
// messages: the rounds of the replicas collective (lib/kernels/collective.hpp). Only the MPI
// translation units of lib/distributed/ include this, and only the engine's thread (mpi.cpp)
// calls it.
//
// A round: every process sends its gradient bucket, tagged with the round's number, to process
// 0. Process 0 sums the first `replicas` that reach it for the current round (its own counts
// from the moment its own round starts: buckets that came earlier come first) and drops the
// rest, as well as any bucket of an earlier round (stale: computed from older weights). It
// then sends the sum to every process, which applies it: every process applies the same sums
// in the same order, so weights, optimizer state and step count stay identical everywhere,
// and a process that was late stays as many rounds behind as it was (its buckets are dropped
// while the others are quicker) without slowing them, until it is `max_lag_rounds` behind:
// then process 0 waits for it, which bounds the memory its pending sums take.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#define OMPI_SKIP_MPICXX 1  // the C API only: MPI's C++ bindings are deprecated
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "kernels/collective.hpp"
#include "kiln/dtype.hpp"

namespace kiln::distributed::replicas {

/// The rounds of one process (its engine's).
class Rounds {
 public:
  void set_world(int rank, int size);

  /// One round: `bucket` (`bytes` bytes of `dtype`, f32 or f64) is this process's part;
  /// `result` (as large) receives the sum process 0 made. `op` names the caller in errors.
  void run(const std::byte* bucket, std::byte* result, std::int64_t bytes, DType dtype,
           const detail::CollectiveParams& params, const char* op);

  /// Before MPI_Finalize: process 0 receives (and drops) the buckets still on their way, and
  /// every process waits for its own sends, so no message is left unmatched.
  void finish(const char* op);

 private:
  /// A message in flight: its bytes live until every request is done.
  struct Pending {
    std::shared_ptr<std::vector<std::byte>> message;
    std::vector<MPI_Request> requests;
  };

  void lead(const std::byte* bucket, std::byte* result, std::int64_t bytes, DType dtype,
            const detail::CollectiveParams& params, const char* op);
  void follow(const std::byte* bucket, std::byte* result, std::int64_t bytes, const char* op);
  /// Process 0: receives the bucket `status` announces; adds it to `sum` when it is for the
  /// current round and fewer than `wanted` were added, else drops it.
  void receive(const MPI_Status& status, std::byte* sum, std::int64_t bytes, DType dtype,
               std::int64_t wanted, std::int64_t& added, const char* op);
  /// Drops the sends that are done.
  void reap(const char* op);

  int rank_ = 0, size_ = 1;
  std::int64_t rounds_ = 0;             // rounds this process finished
  std::vector<std::int64_t> received_;  // process 0: buckets received from each process
  std::vector<std::byte> scratch_;      // a received bucket (process 0) or sum (the others)
  std::vector<Pending> pending_;
};

/// Buckets process 0 dropped since init() (late or stale); 0 on the other processes.
std::int64_t dropped();

/// Turns an MPI error code into a kiln::Error naming op and MPI's message.
void check_mpi(int code, const char* op, const char* call);

}  // namespace kiln::distributed::replicas

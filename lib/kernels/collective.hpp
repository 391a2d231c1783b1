#pragma once
// The collective primitives' kernels (collective_start, collective_wait) and the engine they
// hand their work to. The engine is kiln::distributed's (lib/distributed/), above this layer: it
// installs itself with set_collective_engine when MPI starts, so kernels reach the network
// without including it.
//
// collective_start copies its inputs into a buffer of the engine and queues the collective;
// it returns at once with a ticket (an i64 scalar) that collective_wait redeems, blocking until
// the collective is done and copying the result out. Between the two a compiled plan runs
// other steps (the rest of a backward pass): that is where communication overlaps compute.

#include <cstdint>
#include <span>

#include "kernels/kernel.hpp"

namespace kiln::detail {

/// What a collective_start queues (attrs.ints[0] of both primitives).
enum class CollectiveKind : std::int64_t {
  sum = 0,     ///< elementwise sum over the processes of the inputs joined (one dtype)
  gather = 1,  ///< each process's input (one tensor) joined along dim 0, in rank order
  /// sync replicas: the sum of the first CollectiveParams::replicas inputs (joined, one
  /// floating dtype) that reach process 0 in time; later ones are dropped (see replicas.hpp
  /// in lib/distributed/)
  replicas = 2,
};

/// The settings of a replicas collective (attrs.ints[1] and [2]; unused by the other kinds).
struct CollectiveParams {
  std::int64_t replicas = 0;  ///< how many processes' inputs are summed
  /// How many rounds a process may fall behind process 0 before process 0 waits for it.
  std::int64_t max_lag_rounds = 0;
};

/// The engine behind the collective primitives. Every process queues the same collectives in
/// the same order; the engine runs them in that order.
class CollectiveEngine {
 public:
  /// Copies `inputs` (contiguous, all of `dtype`) into a buffer of its own, joined in order, and
  /// queues `kind` on it. Returns the ticket wait() takes. `op` names the caller in errors.
  virtual std::int64_t start(CollectiveKind kind, DType dtype, std::span<const ArrayRef> inputs,
                             const CollectiveParams& params, const char* op) = 0;
  /// Blocks until collective `ticket` is done (or fails: a kiln::Error) and writes its result
  /// into `out` (contiguous, of the result's size), each element times `scale` when it is not 1.
  virtual void wait(std::int64_t ticket, const ArrayRef& out, double scale, const char* op) = 0;
  /// The number of processes (a gather's result has this many parts).
  virtual int size() const = 0;

 protected:
  ~CollectiveEngine() = default;
};

/// The engine MPI installed (null: kiln::distributed is not started).
CollectiveEngine* collective_engine();
/// Installs `engine` (null removes it).
void set_collective_engine(CollectiveEngine* engine);

}  // namespace kiln::detail

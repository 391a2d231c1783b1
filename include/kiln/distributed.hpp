#pragma once
/// @file distributed.hpp
/// Collective operations on tensors across processes, on Open MPI: the first layer of kiln's
/// data-parallel training. Launch the program with mpirun (`mpirun -np 2 ./train`); each process
/// calls kiln::distributed::init() once, before any other call here.
///
/// Every collective is called by every process in the same order, with tensors of the same
/// dtype and shape (allgather: the same shape after the first dim). The results are new
/// tensors; the inputs are not changed. Collectives run eagerly: calling one while a
/// kiln::function is being traced is an error.
///
/// A kiln built without MPI has these functions too; each throws a kiln::Error saying so.

#include <cstdint>
#include <vector>

#include "kiln/optim.hpp"
#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln::distributed {

/// True when this kiln was built with MPI (kiln::distributed works).
bool available();

struct InitOptions {
  /// How long a collective may wait for the other processes before it fails with a
  /// kiln::Error (a process died, or stopped calling collectives): from then on every call of
  /// kiln::distributed fails alike, instead of the job hanging.
  double timeout_seconds = 300.0;
};

/// Starts MPI in this process and reads rank, size and local rank from it. kiln talks to MPI
/// from one thread of its own (MPI_THREAD_FUNNELED), which runs the collectives in the order
/// they are called: the eager ones here and the gradient buckets a compiled train step queues
/// while its backward pass runs. An error when MPI is missing, when this process already
/// called init(), or when something else initialised MPI first (kiln then does not own its
/// lifetime).
void init(const InitOptions& options = {});

/// Whether init() ran and finalize() did not.
bool initialized();

/// This process's rank in [0, size()).
int rank();
/// The number of processes.
int size();
/// This process's rank among the processes on its host (OMPI_COMM_WORLD_LOCAL_RANK, or found
/// with MPI_Comm_split_type).
int local_rank();

/// How allreduce combines the processes' values, element by element.
enum class ReduceOp {
  sum,   ///< the sum
  mean,  ///< the sum divided by size() (floating dtypes only)
  max,   ///< the largest
  min,   ///< the smallest
};

/// The elementwise reduction of x over every process (f32, f64, i32 or i64; mean only for
/// floating dtypes). Every process receives the result.
Tensor allreduce(const Tensor& x, ReduceOp op = ReduceOp::sum);

/// root's x on every process. Every process passes a tensor of the same dtype and shape; only
/// root's values are read.
Tensor broadcast(const Tensor& x, int root = 0);

/// The processes' x concatenated along dim 0, in rank order. Every process passes the same
/// dtype and the same dims after the first; the first may differ.
Tensor allgather(const Tensor& x);

/// Waits until every process has called barrier().
void barrier();

/// Assigns root's value of each variable to it on every process (every process passes the
/// same variables, in the same order): the same starting point for data-parallel training.
/// Call it once the variables exist (after a model's first call or build()), before training.
void broadcast_variables(const std::vector<Variable>& vars, int root = 0);

struct DistributedOptimizerOptions {
  /// Dense gradients travel in buckets of up to this many bytes (one collective each; a larger
  /// gradient gets a bucket of its own). Bigger buckets pay the per-message cost fewer times;
  /// smaller ones start sending sooner while the backward pass runs. The default is measured in
  /// docs/performance.md.
  std::int64_t fusion_bytes = std::int64_t{4} << 20;
  /// mean: each gradient averaged over the processes (each process's loss is a mean over its
  /// own batch, so this is the gradient of the mean over all of them); sum: added.
  ReduceOp op = ReduceOp::mean;

  /// Sync replicas (TensorFlow's SyncReplicasOptimizer with backup workers) when > 0: each
  /// bucket's combined gradient is made of the first replicas_to_aggregate processes' buckets
  /// that reach process 0 for the current step; later ones are dropped, and so is any bucket
  /// computed at an earlier step (stale). With op = mean they are averaged over
  /// replicas_to_aggregate. Every process then applies the same result, so the weights and the
  /// step count (the global step) stay the same everywhere. 0: every process's gradient, by
  /// allreduce. At most size().
  int replicas_to_aggregate = 0;
  /// TF's name for the number of processes that compute gradients: 0, or size() (checked).
  /// total_num_replicas - replicas_to_aggregate of them are backup workers.
  int total_num_replicas = 0;
  /// Sync replicas: how many steps a process may fall behind process 0 before process 0 waits
  /// for it (>= 1). A process that was slow once stays behind without slowing the others (its
  /// gradients are dropped while they are late); this bounds the combined gradients queued for
  /// it, which take max_lag times the gradients' bytes at most.
  int max_lag = 4;
};

/// Data-parallel training (Horovod's DistributedOptimizer, PyTorch's DDP): wraps a kiln
/// optimizer so that every apply() first combines each gradient over the processes, then
/// updates with the result, identically on every process.
///
/// Dense gradients are joined into buckets (DistributedOptimizerOptions::fusion_bytes) in the
/// order the backward pass computes them, and each bucket is one allreduce. Inside a
/// kiln::function the buckets are ops of the compiled step: each is queued as soon as its last
/// gradient is computed and waited for only where the update reads it, so the communication
/// runs while the rest of the backward pass does; the bucket layout is part of the cached
/// graph. Indexed-slices gradients (an embedding's) are gathered, rows and values, never made
/// dense. On the first step of each layout the processes check with one small allreduce that
/// they all send the same buckets, so a mismatch is an error, not a hang.
///
/// The wrapped optimizer keeps its state (iterations, slots: checkpoint it as usual); while
/// wrapped, its own apply() synchronises too. Pass the DistributedOptimizer wherever an
/// optimizer goes (train::fit takes it as the optimizer it wraps). With one process it applies
/// the gradients as they are.
///
/// With replicas_to_aggregate set it runs sync replicas instead of allreduce: each bucket goes
/// to process 0, which sums the first replicas_to_aggregate to arrive for the current step,
/// drops the late and the stale, and sends the result back to every process (an embedding's
/// gradient is made dense for it). Process 0 is the meeting point: a slow process 0 slows
/// every process. Every process must run the same number of steps; finalize() collects the
/// dropped buckets still on their way.
class DistributedOptimizer final : public optim::GradientAggregator {
 public:
  explicit DistributedOptimizer(optim::Optimizer& optimizer,
                                DistributedOptimizerOptions options = {});
  /// Removes the synchronisation from the wrapped optimizer.
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// The wrapped optimizer's apply(), gradients combined first.
  void apply(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
    optimizer_->apply(grads, vars);
  }
  optim::Optimizer& optimizer() const { return *optimizer_; }
  operator optim::Optimizer&() const { return *optimizer_; }  // NOLINT(google-explicit-constructor)
  const DistributedOptimizerOptions& options() const { return options_; }

  /// The gradients combined over the processes (called by the optimizer's apply()).
  std::vector<Tensor> aggregate(const std::vector<Tensor>& grads,
                                const std::vector<Variable>& vars) override;

 private:
  /// The options against a job of `processes` processes (an error when they do not fit).
  void check_processes(int processes) const;

  optim::Optimizer* optimizer_;
  DistributedOptimizerOptions options_;
  std::vector<std::uint64_t> checked_layouts_;  // fingerprints all processes agreed on
};

/// On process 0: how many gradient buckets sync replicas dropped since init() because they
/// came late for their step or were computed at an earlier one; 0 on the other processes.
/// Buckets still on their way at finalize() are counted there; the count stays readable after.
std::int64_t dropped_gradients();

/// Ends MPI (MPI_Finalize). Call once, after the last collective. Not calling it before the
/// process exits makes mpirun report an error.
void finalize();

}  // namespace kiln::distributed

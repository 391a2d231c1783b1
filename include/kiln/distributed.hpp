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

#include "kiln/tensor.hpp"

namespace kiln::distributed {

/// True when this kiln was built with MPI (kiln::distributed works).
bool available();

/// Starts MPI in this process (MPI_Init_thread, asking for MPI_THREAD_FUNNELED) and reads rank,
/// size and local rank from it. An error when MPI is missing, when this process already called
/// init(), or when something else initialised MPI first (kiln then does not own its lifetime).
void init();

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

/// Ends MPI (MPI_Finalize). Call once, after the last collective. Not calling it before the
/// process exits makes mpirun report an error.
void finalize();

}  // namespace kiln::distributed

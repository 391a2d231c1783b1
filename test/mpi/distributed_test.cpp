// The collectives of kiln::distributed across real processes: run by scripts/test.sh with
// `mpirun -np 2` and `mpirun -np 4 --oversubscribe`. Every rank checks the results it can
// compute on its own (each rank's input is a function of its rank) and the errors every rank
// must get alike; rank 0 prints the closing "N passed, M failed" line of all ranks together.
#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include "mpi_check.hpp"

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace dist = kiln::distributed;
using kiln::Tensor;

namespace {

using mpi_check::check;
using mpi_check::check_error;

}  // namespace

int main() {
  dist::init();
  const int rank = dist::rank(), size = dist::size();
  check(dist::initialized() && size >= 1 && rank >= 0 && rank < size, "rank and size");
  check(dist::local_rank() >= 0 && dist::local_rank() < size, "local rank");

  // allreduce: rank r holds r + i; the sum over ranks is size * i + size (size - 1) / 2.
  const Tensor x = kiln::arange(0.0, 6.0, 1.0, kiln::f32) + static_cast<float>(rank);
  const auto sum = dist::allreduce(x).to_vector<float>();
  const auto mean = dist::allreduce(x, dist::ReduceOp::mean).to_vector<float>();
  const auto high =
      dist::allreduce(kiln::cast(x, kiln::i64), dist::ReduceOp::max).to_vector<std::int64_t>();
  bool sums = true, means = true, highs = true;
  for (int i = 0; i < 6; ++i) {
    const double want = size * i + size * (size - 1) / 2.0;
    sums = sums && sum[i] == static_cast<float>(want);
    means = means && std::abs(mean[i] - static_cast<float>(want / size)) < 1e-6f;
    highs = highs && high[i] == i + size - 1;
  }
  check(sums, "allreduce sum");
  check(means, "allreduce mean");
  check(highs, "allreduce max (i64)");
  check(x.to_vector<float>()[0] == static_cast<float>(rank), "allreduce leaves its input");
  // A large tensor (several MiB, more than one internal segment).
  const Tensor big = kiln::full({1 << 20}, 1.0 + rank, kiln::f64);
  check(dist::allreduce(big).to_vector<double>()[(1 << 20) - 1] == size * (size + 1) / 2.0,
        "allreduce of 8 MiB");

  // broadcast: every rank gets the last rank's values, of any dtype.
  const int root = size - 1;
  const Tensor mine = kiln::tensor<std::int8_t>({static_cast<std::int8_t>(rank), -1}, {2});
  check(dist::broadcast(mine, root).to_vector<std::int8_t>() ==
            std::vector<std::int8_t>{static_cast<std::int8_t>(root), -1},
        "broadcast from the last rank (i8)");

  // allgather: rank r contributes r + 1 rows of [r, r].
  const Tensor rows = kiln::full({rank + 1, 2}, rank, kiln::i32);
  const Tensor all = dist::allgather(rows);
  std::vector<std::int32_t> want;
  for (int r = 0; r < size; ++r)
    for (int k = 0; k < 2 * (r + 1); ++k) want.push_back(r);
  check(
      all.shape() == kiln::Shape{size * (size + 1) / 2, 2} && all.to_vector<std::int32_t>() == want,
      "allgather of uneven row counts");

  // Mismatched shapes are an error on every rank alike, and MPI goes on working after it.
  if (size > 1)
    check_error([&] { dist::allreduce(kiln::zeros({2 + (rank == 0 ? 1 : 0)})); },
                "the processes passed different tensors", "allreduce of different shapes");
  check_error([&] { dist::allreduce(kiln::zeros({2}, kiln::boolean)); },
              "reduces f32, f64, i32 or i64", "allreduce of bool");
  check_error([&] { dist::broadcast(x, size); }, "is not a rank", "broadcast from a bad root");
  check_error([&] { dist::init(); }, "already called", "a second init");
  auto traced = kiln::function([](const Tensor& t) { return dist::allreduce(t); });
  check_error([&] { traced(x); }, "collectives run eagerly", "allreduce inside kiln::function");
  dist::barrier();

  // Every rank's counts, summed on rank 0.
  return mpi_check::finish("kiln::distributed");
}

// MPI_Allreduce alone (an osu_allreduce-style loop): the baseline for kiln's gradient buckets in
// bench_distributed.cpp, on the same sizes (4 KiB .. 16 MiB of f32), with the same fixed counts
// and medians. Usage: mpirun -np N kiln_bench_mpi_allreduce [--quick]
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (std::int64_t bytes = 4096; bytes <= (std::int64_t{16} << 20); bytes *= 4) {
    const auto n = static_cast<std::size_t>(bytes / 4);
    std::vector<float> in(n, 1.0f), out(n);
    const int calls = quick ? 1 : bytes >= (1 << 20) ? 5 : 50, samples = quick ? 1 : 11;
    for (int i = 0; i < (quick ? 1 : 5); ++i)
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> per_call;
    for (int s = 0; s < samples; ++s) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i)
        MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      per_call.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls);
    }
    std::sort(per_call.begin(), per_call.end());
    if (rank == 0)
      std::printf("mpi_allreduce bytes=%lld mpi_us=%.2f\n", static_cast<long long>(bytes),
                  per_call[per_call.size() / 2] * 1e6);
  }
  MPI_Finalize();
  return 0;
}

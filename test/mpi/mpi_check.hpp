#pragma once
// Checks for the programs test/mpi/ runs under mpirun: every rank counts its own checks, and
// finish() adds them up over the ranks, has rank 0 print "N passed, M failed", ends MPI and
// gives main's exit status.
#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace mpi_check {

inline int passed = 0, failed = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::printf("rank %d: FAILED: %s\n", kiln::distributed::rank(), what.c_str());
  }
}

/// f throws a kiln::Error whose message holds `text`.
inline void check_error(const std::function<void()>& f, const std::string& text,
                        const std::string& what) {
  try {
    f();
    check(false, what + ": no error");
  } catch (const kiln::Error& e) {
    const bool ok = std::string(e.what()).find(text) != std::string::npos;
    if (!ok) std::printf("rank %d: message was: %s\n", kiln::distributed::rank(), e.what());
    check(ok, what);
  }
}

/// Rank 0's values of `vars` on every rank, copied into `reference` (the same variables of a
/// model trained alone for comparison): both start from the same weights everywhere.
inline void same_start(const std::vector<kiln::Variable>& vars,
                       const std::vector<kiln::Variable>& reference) {
  kiln::distributed::broadcast_variables(vars, 0);
  for (std::size_t i = 0; i < vars.size() && i < reference.size(); ++i)
    reference[i].assign(vars[i].value());
}

/// The largest difference between two models' weights (variables in the same order), each
/// relative to the weight's size.
inline double largest_difference(const std::vector<kiln::Variable>& va,
                                 const std::vector<kiln::Variable>& vb) {
  double worst = va.size() == vb.size() ? 0.0 : 1e9;
  for (std::size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    const auto x = kiln::cast(va[i].value(), kiln::f64).to_vector<double>();
    const auto y = kiln::cast(vb[i].value(), kiln::f64).to_vector<double>();
    for (std::size_t k = 0; k < x.size(); ++k)
      worst = std::max(worst, std::abs(x[k] - y[k]) / (1.0 + std::abs(y[k])));
  }
  return worst;
}

/// Every rank's counts summed, printed by rank 0 under `title`; finalizes MPI. 0 when every
/// check of every rank passed, else 1.
inline int finish(const std::string& title) {
  namespace dist = kiln::distributed;
  const auto totals =
      dist::allreduce(kiln::tensor<std::int64_t>({passed, failed}, {2})).to_vector<std::int64_t>();
  if (dist::rank() == 0)
    std::printf("%s on %d ranks\n%lld passed, %lld failed\n", title.c_str(), dist::size(),
                static_cast<long long>(totals[0]), static_cast<long long>(totals[1]));
  dist::finalize();
  return totals[1] == 0 ? 0 : 1;
}

}  // namespace mpi_check

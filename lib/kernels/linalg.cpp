#include "kernels/linalg.hpp"

#include <openblas_config.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fail.hpp"

// LAPACK's Fortran entry points, exported by OpenBLAS; Debian ships no LAPACKE header with it.
// Every argument is by reference; none is a character, so no hidden length arguments follow.
extern "C" {
void sgeqrf_(const blasint* m, const blasint* n, float* a, const blasint* lda, float* tau,
             float* work, const blasint* lwork, blasint* info);
void dgeqrf_(const blasint* m, const blasint* n, double* a, const blasint* lda, double* tau,
             double* work, const blasint* lwork, blasint* info);
void sorgqr_(const blasint* m, const blasint* n, const blasint* k, float* a, const blasint* lda,
             const float* tau, float* work, const blasint* lwork, blasint* info);
void dorgqr_(const blasint* m, const blasint* n, const blasint* k, double* a, const blasint* lda,
             const double* tau, double* work, const blasint* lwork, blasint* info);
}

namespace kiln::detail {

namespace {

// The two precisions' routines under one name each.
void geqrf(const blasint* m, const blasint* n, float* a, const blasint* lda, float* tau,
           float* work, const blasint* lwork, blasint* info) {
  sgeqrf_(m, n, a, lda, tau, work, lwork, info);
}
void geqrf(const blasint* m, const blasint* n, double* a, const blasint* lda, double* tau,
           double* work, const blasint* lwork, blasint* info) {
  dgeqrf_(m, n, a, lda, tau, work, lwork, info);
}
void orgqr(const blasint* m, const blasint* n, const blasint* k, float* a, const blasint* lda,
           const float* tau, float* work, const blasint* lwork, blasint* info) {
  sorgqr_(m, n, k, a, lda, tau, work, lwork, info);
}
void orgqr(const blasint* m, const blasint* n, const blasint* k, double* a, const blasint* lda,
           const double* tau, double* work, const blasint* lwork, blasint* info) {
  dorgqr_(m, n, k, a, lda, tau, work, lwork, info);
}

template <class T>
constexpr const char* prefix() {
  return sizeof(T) == sizeof(float) ? "s" : "d";
}

template <class T>
void check_info(std::string_view op, const char* routine, blasint info) {
  if (info != 0)
    fail(op, "LAPACK {}{} failed (info = {}{})", prefix<T>(), routine, info,
         info < 0 ? ": an invalid argument" : "");
}

/// The workspace size LAPACK asks for in a query (lwork = -1), which it returns in work[0].
template <class T>
blasint workspace(T query) {
  return std::max<blasint>(1, static_cast<blasint>(query));
}

template <class T>
void qr_orthonormal_impl(std::string_view op, T* a, std::int64_t rows, std::int64_t cols) {
  if (cols < 1 || rows < cols || rows > std::numeric_limits<blasint>::max() ||
      rows * cols > std::numeric_limits<blasint>::max())
    fail(op, "QR of a {} x {} matrix is not supported (needs rows >= cols >= 1, {}-bit indices)",
         rows, cols, 8 * sizeof(blasint));
  const auto m = static_cast<blasint>(rows), n = static_cast<blasint>(cols);
  const auto count = static_cast<std::size_t>(rows), width = static_cast<std::size_t>(cols);

  // Column norms before the factorization, to judge R's diagonal against.
  std::vector<T> norms(width);
  for (std::size_t j = 0; j < width; ++j) {
    const T* col = a + j * count;
    double sum = 0;
    for (std::size_t k = 0; k < count; ++k) sum += static_cast<double>(col[k]) * col[k];
    norms[j] = static_cast<T>(std::sqrt(sum));
  }

  std::vector<T> tau(width);
  blasint info = 0, query = -1;
  T size = 0;
  geqrf(&m, &n, a, &m, tau.data(), &size, &query, &info);
  check_info<T>(op, "geqrf", info);
  T size_orgqr = 0;
  orgqr(&m, &n, &n, a, &m, tau.data(), &size_orgqr, &query, &info);
  check_info<T>(op, "orgqr", info);
  const blasint lwork = std::max(workspace(size), workspace(size_orgqr));
  std::vector<T> work(static_cast<std::size_t>(lwork));

  geqrf(&m, &n, a, &m, tau.data(), work.data(), &lwork, &info);
  check_info<T>(op, "geqrf", info);
  // R's diagonal, before orgqr overwrites it with Q.
  constexpr T tolerance = 16 * std::numeric_limits<T>::epsilon();
  std::vector<bool> negative(width);
  for (std::size_t j = 0; j < width; ++j) {
    const T r = a[j * count + j];
    if (!(std::abs(r) > tolerance * norms[j]))
      fail(op, "the random matrix is rank deficient (column {})", j);
    negative[j] = r < 0;
  }
  orgqr(&m, &n, &n, a, &m, tau.data(), work.data(), &lwork, &info);
  check_info<T>(op, "orgqr", info);
  for (std::size_t j = 0; j < width; ++j) {
    if (!negative[j]) continue;
    T* col = a + j * count;
    for (std::size_t k = 0; k < count; ++k) col[k] = -col[k];
  }
}

}  // namespace

void qr_orthonormal(std::string_view op, float* a, std::int64_t rows, std::int64_t cols) {
  qr_orthonormal_impl(op, a, rows, cols);
}

void qr_orthonormal(std::string_view op, double* a, std::int64_t rows, std::int64_t cols) {
  qr_orthonormal_impl(op, a, rows, cols);
}

}  // namespace kiln::detail

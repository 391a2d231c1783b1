#pragma once
// Dense linear algebra that is not a primitive: called directly (not through the kernel
// registry) by code above, on plain host buffers. LAPACK from the linked OpenBLAS.

#include <cstdint>
#include <string_view>

namespace kiln::detail {

/// Replaces `a`, a column-major `rows` x `cols` matrix (rows >= cols >= 1, leading dimension
/// `rows`), with the orthonormal factor Q of its thin QR decomposition A = Q R, each column of
/// Q multiplied by the sign of R's diagonal entry, so that R's diagonal is positive and Q is
/// uniquely determined by A. LAPACK's geqrf / orgqr in the precision of T.
///
/// Errors name `op` ("[op] ..."): a LAPACK failure (info != 0) and a rank-deficient A: a
/// column whose component orthogonal to the columns before it, |R[j][j]|, is within 16
/// machine epsilons of the column's norm (at that size its sign, and so Q's column, is
/// rounding noise).
void qr_orthonormal(std::string_view op, float* a, std::int64_t rows, std::int64_t cols);
void qr_orthonormal(std::string_view op, double* a, std::int64_t rows, std::int64_t cols);

}  // namespace kiln::detail

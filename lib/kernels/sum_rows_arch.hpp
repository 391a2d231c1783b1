#pragma once
// The row kernel of float sums (lib/kernels/reduce.cpp's pairwise leaves) for one xsimd
// architecture: SumRowsFn. Included only by elementwise_arch.hpp, after elementwise_ops_arch.hpp;
// the same one-definition rules apply (everything here is in an anonymous namespace).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/sum_rows_arch.hpp"
#endif

#include <cstdint>

namespace kiln::detail {

namespace {

/// SumRowsFn: acc[k] = x[k] + x[ld + k] + ... + x[(rows - 1) ld + k] for k < cols (rows >= 1),
/// added in row order: each column is the scalar loop's sum, bit for bit, at every vector
/// width. Four vectors of columns stay in registers over all the rows, so each row costs four
/// loads and four adds; the scalar loop the compiler made of reduce.cpp (baseline SSE2) read
/// and wrote its accumulators every row, and ran the sum of an f32[16M] in the caches at 0.71
/// of a read pass on a 2-core Xeon with AVX-512. Each row asks for the one 16 rows on into the
/// cache: on a Zen 2 the sum of an f32[16M] ran 0.81-0.98 of a read pass of four streams
/// without (six runs), 1.00-1.10 with (a sum reads one stream per thread, which that CPU's own
/// prefetcher ran behind). The request covers every line of the row's four vectors: at AVX-512
/// they are four lines, and asking for the first and the last alone left a Zen 4 at 0.68-0.82
/// of the read pass (1.02-1.16 with all four, five interleaved pairs).
template <class Arch, class T>
void sum_rows(const void* in, std::int64_t rows, std::int64_t cols, std::int64_t ld, void* out) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));  // elements a line
  const T* x = static_cast<const T*>(in);
  T* acc = static_cast<T*>(out);
  std::int64_t k = 0;
  for (; k + 4 * width <= cols; k += 4 * width) {
    B a[4];
    for (std::int64_t v = 0; v < 4; ++v) a[v] = B::load_unaligned(x + k + v * width);
    for (std::int64_t r = 1; r < rows; ++r) {
      const T* row = x + r * ld + k;
      // Every cache line of the four vectors (four at AVX-512, whose 256 bytes the first and
      // last addresses alone left two lines of) and the last element's, for rows that start
      // mid-line; past the end too: a prefetch never faults.
      const T* ahead = row + 16 * ld;
      for (std::int64_t at = 0; at < 4 * width; at += line) __builtin_prefetch(ahead + at, 0, 3);
      __builtin_prefetch(ahead + 4 * width - 1, 0, 3);
      for (std::int64_t v = 0; v < 4; ++v) a[v] += B::load_unaligned(row + v * width);
    }
    for (std::int64_t v = 0; v < 4; ++v) a[v].store_unaligned(acc + k + v * width);
  }
  for (; k + width <= cols; k += width) {
    B a = B::load_unaligned(x + k);
    for (std::int64_t r = 1; r < rows; ++r) a += B::load_unaligned(x + r * ld + k);
    a.store_unaligned(acc + k);
  }
  for (; k < cols; ++k) {
    T s = x[k];
    for (std::int64_t r = 1; r < rows; ++r) s += x[r * ld + k];
    acc[k] = s;
  }
}

}  // namespace

}  // namespace kiln::detail

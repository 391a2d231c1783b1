#pragma once
// The row kernel of float sums (lib/kernels/reduce.cpp's pairwise leaves) for one xsimd
// architecture: SumRowsFn. Included only by elementwise_arch.hpp, after elementwise_ops_arch.hpp;
// the same one-definition rules apply (everything here is in an anonymous namespace).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/sum_rows_arch.hpp"
#endif

#include <algorithm>
#include <cstdint>

namespace kiln::detail {

namespace {

/// SumRowsFn: acc[k] = x[k] + x[ld + k] + ... + x[(rows - 1) ld + k] for k < cols (rows >= 1),
/// added in row order: each column is the scalar loop's sum, bit for bit, at every vector
/// width. A block of vectors of columns stays in registers over all the rows, so each row
/// costs a load and an add a vector; the scalar loop the compiler made of reduce.cpp (baseline
/// SSE2) read and wrote its accumulators every row, and ran the sum of an f32[16M] in the caches
/// at 0.71 of a read pass on a 2-core Xeon with AVX-512. Each row asks for the one 16 rows on
/// into the cache: on a Zen 2 the sum of an f32[16M] ran 0.81-0.98 of a read pass of four
/// streams without (six runs), 1.00-1.10 with (a sum reads one stream per thread, which that
/// CPU's own prefetcher ran behind). A contiguous sum's rows of 256 bytes are one block at AVX2
/// as at AVX-512. With blocks of four vectors, half the row, the second block read lines the
/// first had not asked for: on a Zen 4 the sum at KILN_SIMD=avx2 ran 0.67-0.78 of the read pass,
/// 0.72-0.92 with the first block asking for whole rows, 1.01-1.22 in one block (four
/// interleaved pairs each). SSE2, two blocks of eight vectors asking for whole rows in the
/// first, went from 0.59-0.64 to 0.76-0.89 (three pairs).
template <class Arch, class T>
void sum_rows(const void* in, std::int64_t rows, std::int64_t cols, std::int64_t ld, void* out) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));  // elements a line
  const T* x = static_cast<const T*>(in);
  T* acc = static_cast<T*>(out);
  // Vectors of columns a block keeps in registers: a contiguous sum's row of 64 elements is one
  // block at AVX-512 (four vectors of f32, eight of f64) and at AVX2 for f32 (eight), two or more
  // where eight vectors hold less (SSE2, whose 16 registers hold no more beside the loads; f64 at
  // AVX2). An f64[8M] sum at AVX-512 took 1.19-1.32x an f32[16M]'s time (as many bytes) in
  // blocks of four vectors, 0.98-1.07x in one block of eight (four interleaved pairs).
  constexpr std::int64_t kVectors = std::clamp<std::int64_t>(64 / width, 4, 8);
  constexpr std::int64_t block = kVectors * width;
  // A row of at most four lines is asked for whole by the first block, so that a later block
  // reads lines already on their way; a longer row's blocks each ask for their own.
  const bool whole_rows = cols * static_cast<std::int64_t>(sizeof(T)) <= 4 * 64;
  std::int64_t k = 0;
  for (; k + block <= cols; k += block) {
    B a[kVectors];
    for (std::int64_t v = 0; v < kVectors; ++v) a[v] = B::load_unaligned(x + k + v * width);
    const std::int64_t ask = !whole_rows ? block : k == 0 ? cols : 0;  // elements to ask for
    for (std::int64_t r = 1; r < rows; ++r) {
      const T* row = x + r * ld + k;
      // Every cache line of the span (asking for the first and last addresses alone left a Zen
      // 4 at 0.68-0.82 of the read pass at AVX-512, 1.02-1.16 with all four lines) and the last
      // element's, for rows that start mid-line; past the end too: a prefetch never faults.
      const T* ahead = row + 16 * ld;
      for (std::int64_t at = 0; at < ask; at += line) __builtin_prefetch(ahead + at, 0, 3);
      if (ask > 0) __builtin_prefetch(ahead + ask - 1, 0, 3);
      for (std::int64_t v = 0; v < kVectors; ++v) a[v] += B::load_unaligned(row + v * width);
    }
    for (std::int64_t v = 0; v < kVectors; ++v) a[v].store_unaligned(acc + k + v * width);
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

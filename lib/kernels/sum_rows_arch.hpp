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

/// One stream of sum_rows_streams: acc[k] = x[k] + x[ld + k] + ... + x[(rows - 1) ld + k].
template <class T>
struct SumStream {
  const T* x;
  std::int64_t rows;
  T* acc;
};

/// SumRowsFn for S streams at once: each stream's acc[k] is the sum of its column k added in row
/// order, the scalar loop's bits, at every vector width. A block of vectors of columns stays in
/// registers over all the rows, so each row costs a load and an add a vector; the scalar loop
/// the compiler made of reduce.cpp (baseline SSE2) read and wrote its accumulators every row,
/// and ran the sum of an f32[16M] in the caches at 0.71 of a read pass on a 2-core Xeon with
/// AVX-512. Each row asks for the one 16 rows on into the cache: on a Zen 2 the sum of an
/// f32[16M] ran 0.81-0.98 of a read pass of four streams without (six runs), 1.00-1.10 with (a
/// sum read one stream per thread, which that CPU's own prefetcher ran behind). A row of at most
/// four lines is asked for whole by the first block (with blocks of four vectors, half a 64-float
/// row, the second block read lines the first had not asked for: on a Zen 4 the sum at
/// KILN_SIMD=avx2 ran 0.67-0.78 of the read pass, 0.72-0.92 with the first block asking for
/// whole rows, 1.01-1.22 in one block, four interleaved pairs each). The streams are read
/// together, row by row, so that a pairwise sum's leaves far apart in memory (reduce.cpp's
/// accumulate_nodes) have lines in flight at as many places: on the Xeon, two threads summing
/// 64 MiB as four streams 2 MiB apart each took 0.74-0.85x the time of one stream each (a
/// scratch program, from the caches and from memory).
template <class Arch, class T, int S>
void sum_streams(const SumStream<T> (&streams)[S], std::int64_t cols, std::int64_t ld) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));  // elements a line
  // Vectors of columns a block keeps in registers for each stream: a contiguous sum's row of 64
  // elements is one block for one stream at AVX-512 (four vectors of f32, eight of f64) and at
  // AVX2 for f32 (eight), two or more where eight vectors hold less (SSE2, whose 16 registers
  // hold no more beside the loads; f64 at AVX2): an f64[8M] sum at AVX-512 took 1.19-1.32x an
  // f32[16M]'s time (as many bytes) in blocks of four vectors, 0.98-1.07x in one block of eight
  // (four interleaved pairs). Several streams share the vector registers (the loads fold into
  // the adds), at most as many vectors as one stream's and at least two each: four f32 streams
  // at AVX2 in blocks of four vectors each took 0.92-0.94x the time of blocks of two (the sum of
  // an f32[16M], Xeon); at AVX-512 four vectors each are one stream's own.
  constexpr std::int64_t registers = width * static_cast<std::int64_t>(sizeof(T)) == 64 ? 32 : 16;
  constexpr std::int64_t one_stream = std::clamp<std::int64_t>(64 / width, 4, 8);
  constexpr std::int64_t kVectors =
      S == 1 ? one_stream : std::clamp<std::int64_t>(registers / S, 2, one_stream);
  constexpr std::int64_t block = kVectors * width;
  std::int64_t together = streams[0].rows;  // rows every stream has (no std::min: see
  for (int s = 1; s < S; ++s)               // elementwise_arch.hpp on inline functions)
    together = streams[s].rows < together ? streams[s].rows : together;
  const bool whole_rows = cols * static_cast<std::int64_t>(sizeof(T)) <= 4 * 64;
  std::int64_t k = 0;
  for (; k + block <= cols; k += block) {
    const std::int64_t ask = !whole_rows ? block : k == 0 ? cols : 0;  // elements to ask for
    B a[S][kVectors];
    for (int s = 0; s < S; ++s)
      for (std::int64_t v = 0; v < kVectors; ++v)
        a[s][v] = B::load_unaligned(streams[s].x + k + v * width);
    const auto add_row = [&](int s, std::int64_t r) {
      const T* row = streams[s].x + r * ld + k;
      // Every cache line of the span (asking for the first and last addresses alone left a Zen
      // 4 at 0.68-0.82 of the read pass at AVX-512, 1.02-1.16 with all four lines) and the last
      // element's, for rows that start mid-line; past the end too: a prefetch never faults.
      const T* ahead = row + 16 * ld;
      for (std::int64_t at = 0; at < ask; at += line) __builtin_prefetch(ahead + at, 0, 3);
      if (ask > 0) __builtin_prefetch(ahead + ask - 1, 0, 3);
      for (std::int64_t v = 0; v < kVectors; ++v) a[s][v] += B::load_unaligned(row + v * width);
    };
    for (std::int64_t r = 1; r < together; ++r)
      for (int s = 0; s < S; ++s) add_row(s, r);
    for (int s = 0; s < S; ++s) {
      for (std::int64_t r = together > 1 ? together : 1; r < streams[s].rows; ++r) add_row(s, r);
      for (std::int64_t v = 0; v < kVectors; ++v)
        a[s][v].store_unaligned(streams[s].acc + k + v * width);
    }
  }
  for (int s = 0; s < S; ++s) {
    const T* x = streams[s].x;
    const std::int64_t rows = streams[s].rows;
    T* acc = streams[s].acc;
    std::int64_t j = k;
    for (; j + width <= cols; j += width) {
      B a = B::load_unaligned(x + j);
      for (std::int64_t r = 1; r < rows; ++r) a += B::load_unaligned(x + r * ld + j);
      a.store_unaligned(acc + j);
    }
    for (; j < cols; ++j) {
      T sum = x[j];
      for (std::int64_t r = 1; r < rows; ++r) sum += x[r * ld + j];
      acc[j] = sum;
    }
  }
}

/// SumRowsFn, for 1 to max_sum_streams streams (accumulate_nodes passes no more).
template <class Arch, class T>
void sum_rows(const void* const* x, const std::int64_t* rows, std::int64_t count, std::int64_t cols,
              std::int64_t ld, void* const* acc) {
  const auto stream = [&](std::int64_t s) {
    return SumStream<T>{static_cast<const T*>(x[s]), rows[s], static_cast<T*>(acc[s])};
  };
  switch (count) {
    case 1:
      return sum_streams<Arch, T, 1>({stream(0)}, cols, ld);
    case 2:
      return sum_streams<Arch, T, 2>({stream(0), stream(1)}, cols, ld);
    case 3:
      return sum_streams<Arch, T, 3>({stream(0), stream(1), stream(2)}, cols, ld);
    default:
      return sum_streams<Arch, T, 4>({stream(0), stream(1), stream(2), stream(3)}, cols, ld);
  }
}

}  // namespace

}  // namespace kiln::detail

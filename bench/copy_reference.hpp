#pragma once
// The copy references of the memory-bound benchmarks (bench_bandwidth.cpp, and workload 2 of
// kiln_bench.cpp): out = the sum of k float inputs, split over persistent threads, stored as
// kiln's kernels store an output of that size.

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "thread_team.hpp"

namespace kiln::bench {

/// out[i] = sum of the inputs' [i], [begin, end) of it, a full 64-byte line per iteration,
/// written with non-temporal stores (SSE2's movntps) when `stream`, else plain stores (the
/// buffers are 64-byte aligned and every part starts on a line). With `ahead` > 0 each
/// iteration first asks for the lines `ahead` bytes further on (the inputs' into L2, the
/// output's to be written), as kiln's generated fused loops do over data beyond L2.
inline void sum_part(const std::vector<const float*>& in, float* out, std::size_t begin,
                     std::size_t end, bool stream, std::size_t ahead = 0) {
  std::size_t i = begin;
  const std::size_t ahead_floats = ahead / sizeof(float);
#if defined(__SSE2__)
  for (; i + 16 <= end; i += 16) {
    if (ahead_floats > 0 && i + ahead_floats < end) {
      for (const float* input : in) __builtin_prefetch(input + i + ahead_floats, 0, 2);
      // prefetchw, as kiln's loops write it (__builtin_prefetch for writing gives a plain
      // prefetch unless the compiler is told the CPU has PREFETCHW).
      if (!stream) asm volatile("prefetchw %0" : : "m"(out[i + ahead_floats]));
    }
    __m128 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm_load_ps(in[0] + i + 4 * j);
    for (std::size_t k = 1; k < in.size(); ++k)
      for (int j = 0; j < 4; ++j) v[j] = _mm_add_ps(v[j], _mm_load_ps(in[k] + i + 4 * j));
    if (stream)
      for (int j = 0; j < 4; ++j) _mm_stream_ps(out + i + 4 * j, v[j]);
    else
      for (int j = 0; j < 4; ++j) _mm_store_ps(out + i + 4 * j, v[j]);
  }
#endif
  for (; i < end; ++i) {
    float s = in[0][i];
    for (std::size_t k = 1; k < in.size(); ++k) s += in[k][i];
    out[i] = s;
  }
}

/// [begin, end) of thread id's share of n elements, cut on 64-byte lines.
inline std::pair<std::size_t, std::size_t> share(std::size_t n, int id, int threads) {
  const std::size_t lines = (n + 15) / 16;
  const auto t = static_cast<std::size_t>(threads), i = static_cast<std::size_t>(id);
  return {std::min(n, lines * i / t * 16), std::min(n, lines * (i + 1) / t * 16)};
}

/// out[0, n) = the sum of the inputs' [0, n) on `threads` persistent threads (the caller
/// included), each a share cut on 64-byte lines, with non-temporal stores when `stream` (then an
/// sfence per thread), asking `ahead` bytes ahead (sum_part). The inputs and out must outlive
/// the team.
inline std::unique_ptr<ThreadTeam> sum_copy_team(std::vector<const float*> in, float* out,
                                                 std::size_t n, int threads, bool stream,
                                                 std::size_t ahead = 0) {
  auto part = [in = std::move(in), out, n, stream, ahead](int id, int t) {
    const auto [begin, end] = share(n, id, t);
    sum_part(in, out, begin, end, stream, ahead);
#if defined(__SSE2__)
    if (stream) _mm_sfence();
#endif
  };
  return std::make_unique<ThreadTeam>(threads, std::move(part));
}

}  // namespace kiln::bench

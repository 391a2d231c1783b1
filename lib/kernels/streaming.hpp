#pragma once
// When kernels write their outputs with non-temporal stores: outputs larger than the
// last-level cache, which would otherwise be read into the caches line by line before being
// overwritten and push the inputs out. Fused elementwise kernels (elementwise.cpp) and softmax
// (reduce.cpp) follow it; kiln_bench_bandwidth's reference copies do the same. And how far
// ahead the fused kernels (the block interpreter and the generated loops) ask for their streams.

#include <algorithm>
#include <cstdint>

namespace kiln::detail {

/// The size of the last-level cache in bytes: the largest cache that sysfs lists for cpu0
/// (/sys/devices/system/cpu/cpu0/cache/index*/size), 32 MiB when there is none. Read once.
/// (sysconf's _SC_LEVEL3_CACHE_SIZE is not used: in some VMs it reports the host's.)
std::int64_t last_level_cache_bytes();

/// Outputs of more than this many bytes are written with non-temporal stores:
/// last_level_cache_bytes(), unless a test set another bound.
std::int64_t stream_output_bytes();

/// Test hook: outputs of more than `bytes` are streamed from now on (0: the default again).
/// Compiled plans keep the choice they made when they were built.
void set_stream_output_bytes(std::int64_t bytes);

/// How far ahead of the part being computed (in bytes of each stream) a memory-bound kernel
/// (a fused kernel in short blocks) asks for its inputs and its plain-stored output to be
/// brought into L2. The hardware prefetchers alone left the chain `tanh(a*b+c)*0.5` over 4M
/// f32 at 3.4 ms against 2.6 ms for a copy 3->1 (two threads, AVX-512); asking 8 KiB ahead
/// brought it to 2.3-2.9 ms: the next blocks' loads are in flight while the current block runs
/// the instructions that read no input.
inline constexpr std::int64_t stream_prefetch_bytes = 8192;

/// How far ahead of the vector being computed (in bytes of each stream) a generated fused loop
/// over data from beyond the L2 caches (a layout in short blocks) asks for its flat inputs
/// (prefetcht1) and its plain-stored outputs (prefetchw), one request per 64-byte line. The
/// hardware prefetchers alone left the chain `tanh(a*b+c)*0.5` over 4M f32 at 1.47-1.65 ms (two
/// threads, zmm loops, Xeon); asking 1, 2, 3, 4, 6 and 8 KiB ahead gave 1.28-1.35, 1.21-1.32,
/// 1.20-1.22, 1.25-1.27, 1.26-1.27 and 1.31-1.41 ms (ymm loops: 1.53-1.58 to 1.28-1.30 at
/// 4 KiB). 4 KiB sits inside the flat range, where CPUs whose memory is further away than
/// this one's have room: far enough for the lines to arrive while the ones before them are
/// computed, near enough that what comes in is not pushed out again first.
inline constexpr std::int64_t loop_prefetch_bytes = 4096;

/// Asks for bytes [from, from + count) of the `total` bytes at `base` to be brought into L2 (for
/// writing when `write`), one request per 64-byte line; offsets past `total` are skipped, so
/// every address asked for is inside the stream. Never faults.
inline void prefetch_stream(const char* base, std::int64_t from, std::int64_t count,
                            std::int64_t total, bool write) {
  const std::int64_t last = std::min(from + count, total);
  for (std::int64_t at = from; at < last; at += 64) {
    if (write)
      __builtin_prefetch(base + at, 1, 2);
    else
      __builtin_prefetch(base + at, 0, 2);
  }
}

/// How many rows ahead of the current one a kernel walking the rows of a large table in a
/// given order (gather, the row kernels of rows.cpp) asks for: each row is a random memory
/// access, which the hardware prefetchers do not foresee. 8 rows took a lazy Adam step of a
/// 1,000,000 x 64 table from 3.4 ms to about 2 ms (docs/performance.md, workload 10).
inline constexpr std::int64_t prefetch_rows_ahead = 8;

/// Asks for the `bytes` bytes of one table row at `row` (for writing when `write`).
inline void prefetch_row(const void* row, std::int64_t bytes, bool write) {
  prefetch_stream(static_cast<const char*>(row), 0, bytes, bytes, write);
}

}  // namespace kiln::detail

#pragma once
// When kernels write their outputs with non-temporal stores: outputs larger than the
// last-level cache, which would otherwise be read into the caches line by line before being
// overwritten and push the inputs out. Fused elementwise kernels (elementwise.cpp) and softmax
// (reduce.cpp) follow it; kiln_bench_bandwidth's reference copies do the same.

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

}  // namespace kiln::detail

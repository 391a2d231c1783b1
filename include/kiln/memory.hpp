#pragma once
/// @file memory.hpp
/// Counters that let users prove nothing grows.

#include <cstdint>

namespace kiln {

/// A snapshot of kiln's memory accounting.
struct MemoryStats {
  std::int64_t live_tensors = 0;  ///< Tensor values alive now (views included).
  std::int64_t live_buffers = 0;  ///< Data buffers alive now.
  std::int64_t live_bytes = 0;    ///< Bytes held by those buffers.
  std::int64_t peak_bytes = 0;    ///< Highest live_bytes since start or reset_peak_bytes().
  /// Bytes of released large buffers (and of recurrences' weight-panel blocks) kept for reuse
  /// (bounded; see release_cached_memory()).
  std::int64_t cached_bytes = 0;
  std::int64_t cached_functions = 0;  ///< Concrete functions held by kiln::function caches.
  std::int64_t live_graph_nodes = 0;  ///< Nodes in those functions' graphs.
  /// Bytes held by those graphs and plans, and by what their kernels keep between calls (a
  /// recurrent layer's weights laid out for its kernel).
  std::int64_t graph_bytes = 0;
};

/// Current counters (thread-safe).
MemoryStats memory_stats();

/// Frees the large buffers kept for reuse. kiln keeps at most 1 GiB of them (environment
/// variable KILN_CACHED_BYTES_LIMIT, in bytes, changes that; 0 disables the cache).
void release_cached_memory();

/// Sets peak_bytes to the current live_bytes.
void reset_peak_bytes();

}  // namespace kiln

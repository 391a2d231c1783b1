#include "core/storage.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "kiln/error.hpp"
#include "kiln/memory.hpp"

namespace kiln::detail {

namespace {
std::atomic<std::int64_t> live_tensors{0};
std::atomic<std::int64_t> live_buffers{0};
std::atomic<std::int64_t> live_bytes{0};
std::atomic<std::int64_t> peak_bytes{0};

constexpr std::size_t alignment = 64;

void raise_peak(std::int64_t now) {
  std::int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

namespace {

// Small buffers come from a per-thread cache of 64-byte aligned blocks in power-of-two size
// classes (64 B .. 4 KiB), so that eager ops on small tensors do not pay for aligned_alloc/free.
constexpr std::size_t num_size_classes = 7;
constexpr std::size_t blocks_per_class = 32;

std::size_t size_class(std::size_t rounded) {
  std::size_t c = 0;
  while ((alignment << c) < rounded) ++c;
  return c;
}

struct BlockCache {
  void* blocks[num_size_classes][blocks_per_class];
  std::size_t count[num_size_classes] = {};
  ~BlockCache() {
    for (std::size_t c = 0; c < num_size_classes; ++c)
      for (std::size_t i = 0; i < count[c]; ++i) std::free(blocks[c][i]);
  }
};

// Initial-exec TLS: a plain %fs-relative load instead of a __tls_get_addr call per access.
__attribute__((tls_model("initial-exec"))) thread_local BlockCache* thread_cache = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local bool thread_cache_gone = false;

struct BlockCacheOwner {
  ~BlockCacheOwner() {
    delete thread_cache;
    thread_cache = nullptr;
    thread_cache_gone = true;
  }
};
thread_local BlockCacheOwner cache_owner;

/// This thread's cache, or null while the thread is exiting.
BlockCache* block_cache() {
  if (thread_cache != nullptr || thread_cache_gone) return thread_cache;
  BlockCacheOwner* owner = &cache_owner;  // registers the owner's destructor for this thread
  (void)owner;
  thread_cache = new BlockCache;
  return thread_cache;
}

std::size_t block_bytes(std::size_t bytes) {
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return rounded == 0 ? alignment : rounded;
}

constexpr std::size_t largest_cached = alignment << (num_size_classes - 1);

}  // namespace

void* allocate_block(std::size_t bytes) {
  const std::size_t rounded = block_bytes(bytes);
  if (rounded <= largest_cached) {
    const std::size_t c = size_class(rounded);
    BlockCache* cache = block_cache();
    if (cache != nullptr && cache->count[c] > 0) return cache->blocks[c][--cache->count[c]];
    return std::aligned_alloc(alignment, alignment << c);
  }
  return std::aligned_alloc(alignment, rounded);
}

void free_block(void* p, std::size_t bytes) {
  const std::size_t rounded = block_bytes(bytes);
  if (rounded <= largest_cached) {
    const std::size_t c = size_class(rounded);
    BlockCache* cache = block_cache();
    if (cache != nullptr && cache->count[c] < blocks_per_class) {
      cache->blocks[c][cache->count[c]++] = p;
      return;
    }
  }
  std::free(p);
}

Storage::Storage(std::size_t bytes) : bytes_(bytes) {
  data_ = allocate_block(bytes);
  if (data_ == nullptr)
    throw Error(fmt::format("[alloc] out of memory allocating {} bytes", bytes));
  live_buffers.fetch_add(1, std::memory_order_relaxed);
  const auto b = static_cast<std::int64_t>(bytes);
  raise_peak(live_bytes.fetch_add(b, std::memory_order_relaxed) + b);
}

Storage::~Storage() {
  free_block(data_, bytes_);
  live_buffers.fetch_sub(1, std::memory_order_relaxed);
  live_bytes.fetch_sub(static_cast<std::int64_t>(bytes_), std::memory_order_relaxed);
}

std::shared_ptr<Storage> allocate_storage(std::size_t bytes) {
  return std::allocate_shared<Storage>(CachedAllocator<Storage>{}, bytes);
}

void count_tensor_created() { live_tensors.fetch_add(1, std::memory_order_relaxed); }
void count_tensor_destroyed() { live_tensors.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace kiln::detail

namespace kiln {

MemoryStats memory_stats() {
  using namespace detail;
  MemoryStats s;
  s.live_tensors = live_tensors.load(std::memory_order_relaxed);
  s.live_buffers = live_buffers.load(std::memory_order_relaxed);
  s.live_bytes = live_bytes.load(std::memory_order_relaxed);
  s.peak_bytes = peak_bytes.load(std::memory_order_relaxed);
  return s;
}

void reset_peak_bytes() { detail::peak_bytes.store(detail::live_bytes.load()); }

}  // namespace kiln

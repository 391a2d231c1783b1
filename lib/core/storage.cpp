#include "core/storage.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include <fmt/format.h>
#include <sys/mman.h>

#include "kiln/error.hpp"
#include "kiln/memory.hpp"

namespace kiln::detail {

namespace {
// Object counts are kept per thread (an uncontended relaxed add, no locked instruction on the
// eager hot path) and summed by memory_stats(); a thread's counts fold into the global ones when
// it exits. Bytes stay one global atomic because the peak needs the global sum.
struct ObjectCounts {
  std::atomic<std::int64_t> tensors{0};
  std::atomic<std::int64_t> buffers{0};
};

struct CountRegistry {
  std::mutex mutex;
  std::vector<ObjectCounts*> threads;
  std::int64_t exited_tensors = 0;
  std::int64_t exited_buffers = 0;
};

CountRegistry& count_registry() {
  static CountRegistry* registry = new CountRegistry;  // never destroyed: usable at exit
  return *registry;
}

__attribute__((tls_model("initial-exec"))) thread_local ObjectCounts* thread_counts = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local bool thread_counts_gone = false;
std::atomic<std::int64_t> orphan_counts_tensors{0};  // counted after this thread's counts died
std::atomic<std::int64_t> orphan_counts_buffers{0};

/// This thread's counts: registered on creation, folded into the exited totals at thread exit.
struct ThreadCounts {
  ObjectCounts counts;
  ThreadCounts() {
    auto& r = count_registry();
    std::lock_guard lock(r.mutex);
    r.threads.push_back(&counts);
  }
  ~ThreadCounts() {
    thread_counts = nullptr;
    thread_counts_gone = true;
    auto& r = count_registry();
    std::lock_guard lock(r.mutex);
    r.exited_tensors += counts.tensors.load(std::memory_order_relaxed);
    r.exited_buffers += counts.buffers.load(std::memory_order_relaxed);
    std::erase(r.threads, &counts);
  }
};

ObjectCounts* local_counts() {
  if (thread_counts != nullptr || thread_counts_gone) return thread_counts;
  static thread_local ThreadCounts owner;
  thread_counts = &owner.counts;
  return thread_counts;
}

void bump(std::atomic<std::int64_t> ObjectCounts::*field, std::atomic<std::int64_t>& orphan,
          std::int64_t delta) {
  if (ObjectCounts* c = local_counts()) {
    auto& counter = c->*field;
    counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  } else {
    orphan.fetch_add(delta, std::memory_order_relaxed);
  }
}

std::atomic<std::int64_t> live_bytes{0};
std::atomic<std::int64_t> cached_functions{0};
std::atomic<std::int64_t> live_graph_nodes{0};
std::atomic<std::int64_t> graph_bytes{0};
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
// classes (64 B .. 128 KiB), so that eager ops on small tensors do not pay for aligned_alloc/free.
constexpr std::size_t num_size_classes = 12;  // 64 B .. 128 KiB
constexpr std::size_t blocks_per_class = 16;

/// Class c holds blocks of alignment << c bytes; rounded is a multiple of alignment.
std::size_t size_class(std::size_t rounded) {
  const std::size_t units = rounded / alignment;  // >= 1
  return units <= 1 ? 0 : static_cast<std::size_t>(64 - __builtin_clzll(units - 1));
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

namespace {

// Large buffers (>= 128 KiB, which malloc would map and unmap each time, paying a page fault per
// 4 KiB on first touch) are kept after release in a process-wide cache, bounded in total size,
// and reused for requests of the same size class. memory_stats() reports it as cached_bytes.
constexpr std::size_t large_threshold = std::size_t{128} << 10;
constexpr std::size_t page = 4096;

/// Gives a block back to the system: std::free for aligned_alloc's, munmap for a mapping's.
using BlockRelease = void (*)(void* p, std::size_t size);
void release_allocated(void* p, std::size_t /*size*/) { std::free(p); }
void release_mapped(void* p, std::size_t size) { ::munmap(p, size); }

struct LargeBlockCache {
  struct Block {
    void* p;
    std::uint64_t kept_at;  // when it was kept: the oldest goes first when the cache is full
  };
  std::mutex mutex;
  std::multimap<std::size_t, Block> blocks;  // size -> block
  std::size_t bytes = 0;
  std::size_t limit = 0;
  std::uint64_t clock = 0;
  BlockRelease release_block;
  std::size_t slack_divisor;  // take() hands out blocks up to size + size / slack_divisor

  /// slack_divisor 0: take() hands out blocks of exactly the size asked for (a mapping's size
  /// must be known when it is unmapped).
  LargeBlockCache(BlockRelease how, std::size_t slack) : release_block(how), slack_divisor(slack) {
    limit = std::size_t{1} << 30;
    if (const char* env = std::getenv("KILN_CACHED_BYTES_LIMIT"))
      limit = std::strtoull(env, nullptr, 10);
  }
  ~LargeBlockCache() { release(); }

  /// The smallest kept block that serves `size`, and of those of its size the one kept last:
  /// its lines are the likeliest to be in the caches still. (Handing out the one kept first
  /// made a cached 16 MiB chain, after eager work had left four such blocks here, write a
  /// different output each call: 1.8 ms against 1.3 for the same one each call.)
  void* take(std::size_t size) {
    std::lock_guard lock(mutex);
    auto it = blocks.lower_bound(size);
    const std::size_t largest = slack_divisor == 0 ? size : size + size / slack_divisor;
    if (it == blocks.end() || it->first > largest) return nullptr;
    it = std::prev(blocks.upper_bound(it->first));  // equal sizes keep the order they came in
    void* p = it->second.p;
    bytes -= it->first;
    blocks.erase(it);
    return p;
  }
  /// Keeps p for reuse, making room by freeing the blocks kept longest ago (a block just freed
  /// is the likeliest to be asked for again: a plan's arena, every call); returns false for a
  /// block larger than the whole limit.
  bool keep(void* p, std::size_t size) {
    std::lock_guard lock(mutex);
    if (size > limit) return false;
    while (bytes + size > limit) {
      auto oldest = std::min_element(
          blocks.begin(), blocks.end(),
          [](const auto& a, const auto& b) { return a.second.kept_at < b.second.kept_at; });
      release_block(oldest->second.p, oldest->first);
      bytes -= oldest->first;
      blocks.erase(oldest);
    }
    blocks.emplace(size, Block{p, ++clock});
    bytes += size;
    return true;
  }
  void release() {
    std::lock_guard lock(mutex);
    for (auto& [size, block] : blocks) release_block(block.p, size);
    blocks.clear();
    bytes = 0;
  }
};

LargeBlockCache& large_cache() {
  // Never destroyed: usable at exit. A block of up to a quarter more than asked serves.
  static LargeBlockCache* cache = new LargeBlockCache(release_allocated, 4);
  return *cache;
}

/// The blocks of allocate_huge_block, kept after release as the large ones are (and bounded
/// alike), reused for the same size only.
LargeBlockCache& huge_cache() {
  static LargeBlockCache* cache = new LargeBlockCache(release_mapped, 0);
  return *cache;
}

std::size_t huge_block_bytes(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + huge_page_bytes - 1) / huge_page_bytes *
         huge_page_bytes;
}

std::size_t large_block_bytes(std::size_t rounded) { return (rounded + page - 1) / page * page; }

/// The size actually held by a block of the given request (what the caches store).
std::size_t held_bytes(std::size_t rounded) {
  return rounded >= large_threshold ? large_block_bytes(rounded) : rounded;
}

}  // namespace

void* allocate_block(std::size_t bytes) {
  const std::size_t rounded = block_bytes(bytes);
  if (rounded <= largest_cached) {
    const std::size_t c = size_class(rounded);
    BlockCache* cache = block_cache();
    if (cache != nullptr && cache->count[c] > 0) return cache->blocks[c][--cache->count[c]];
    return std::aligned_alloc(alignment, alignment << c);
  }
  const std::size_t held = held_bytes(rounded);
  if (held >= large_threshold) {
    if (void* p = large_cache().take(held)) return p;
    return std::aligned_alloc(page, held);
  }
  return std::aligned_alloc(alignment, held);
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
  const std::size_t held = held_bytes(rounded);
  if (held >= large_threshold && large_cache().keep(p, held)) return;
  std::free(p);
}

void* allocate_huge_block(std::size_t bytes) {
  const std::size_t held = huge_block_bytes(bytes);
  if (void* p = huge_cache().take(held)) return p;
  // A mapping of its own, cut to 2 MiB boundaries: never memory the heap already faulted in
  // as 4 KiB pages, which the advice below would not change.
  const std::size_t span = held + huge_page_bytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (base + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  if (aligned > base) ::munmap(raw, aligned - base);
  const std::uintptr_t end = base + span, used_end = aligned + held;
  if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
  ::madvise(reinterpret_cast<void*>(aligned), held, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void free_huge_block(void* p, std::size_t bytes) {
  const std::size_t held = huge_block_bytes(bytes);
  if (!huge_cache().keep(p, held)) ::munmap(p, held);
}

namespace {
void count_new_buffer(std::size_t bytes) {
  bump(&ObjectCounts::buffers, orphan_counts_buffers, 1);
  const auto b = static_cast<std::int64_t>(bytes);
  raise_peak(live_bytes.fetch_add(b, std::memory_order_relaxed) + b);
}
}  // namespace

Storage::Storage(std::size_t bytes, const char* op) : bytes_(bytes) {
  data_ = allocate_block(bytes);
  if (data_ == nullptr)
    throw Error(fmt::format("[{}] out of memory allocating {} bytes", op, bytes));
  count_new_buffer(bytes);
}

Storage::Storage(std::size_t bytes, void* owned_by_derived)
    : data_(owned_by_derived), bytes_(bytes), inline_(true) {
  count_new_buffer(bytes);
}

Storage::~Storage() {
  if (!inline_) free_block(data_, bytes_);
  bump(&ObjectCounts::buffers, orphan_counts_buffers, -1);
  live_bytes.fetch_sub(static_cast<std::int64_t>(bytes_), std::memory_order_relaxed);
}

std::shared_ptr<Storage> allocate_storage(std::size_t bytes, const char* op) {
  if (bytes <= InlineStorage::capacity)
    return std::allocate_shared<InlineStorage>(CachedAllocator<InlineStorage>{}, bytes);
  return std::allocate_shared<Storage>(CachedAllocator<Storage>{}, bytes, op);
}

void count_cached_function(std::int64_t functions, std::int64_t nodes, std::int64_t bytes) {
  cached_functions.fetch_add(functions, std::memory_order_relaxed);
  live_graph_nodes.fetch_add(nodes, std::memory_order_relaxed);
  graph_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void count_tensor_created() { bump(&ObjectCounts::tensors, orphan_counts_tensors, 1); }
void count_tensor_destroyed() { bump(&ObjectCounts::tensors, orphan_counts_tensors, -1); }

}  // namespace kiln::detail

namespace kiln {

MemoryStats memory_stats() {
  using namespace detail;
  MemoryStats s;
  {
    auto& r = count_registry();
    std::lock_guard lock(r.mutex);
    s.live_tensors = r.exited_tensors + orphan_counts_tensors.load(std::memory_order_relaxed);
    s.live_buffers = r.exited_buffers + orphan_counts_buffers.load(std::memory_order_relaxed);
    for (const ObjectCounts* c : r.threads) {
      s.live_tensors += c->tensors.load(std::memory_order_relaxed);
      s.live_buffers += c->buffers.load(std::memory_order_relaxed);
    }
  }
  s.live_bytes = live_bytes.load(std::memory_order_relaxed);
  s.peak_bytes = peak_bytes.load(std::memory_order_relaxed);
  s.cached_functions = cached_functions.load(std::memory_order_relaxed);
  s.live_graph_nodes = live_graph_nodes.load(std::memory_order_relaxed);
  s.graph_bytes = graph_bytes.load(std::memory_order_relaxed);
  for (LargeBlockCache* cache : {&large_cache(), &huge_cache()}) {
    std::lock_guard lock(cache->mutex);
    s.cached_bytes += static_cast<std::int64_t>(cache->bytes);
  }
  return s;
}

void release_cached_memory() {
  detail::large_cache().release();
  detail::huge_cache().release();
}

void reset_peak_bytes() { detail::peak_bytes.store(detail::live_bytes.load()); }

}  // namespace kiln

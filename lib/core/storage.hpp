#pragma once
// Buffers: 64-byte aligned, reference counted, counted in memory_stats().

#include <cstddef>
#include <memory>
#include <new>

namespace kiln::detail {

/// One data buffer. Tensors that alias (views) share a Storage.
class Storage {
 public:
  /// Uninitialized buffer of `bytes` bytes (64-byte aligned; a zero-size buffer still has
  /// a valid, non-null pointer).
  /// Throws "[op] out of memory ..." when the buffer cannot be had.
  explicit Storage(std::size_t bytes, const char* op = "alloc");
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 protected:
  /// A buffer owned by a derived object (InlineStorage): counted, but not allocated here.
  Storage(std::size_t bytes, void* owned_by_derived);

 private:
  void* data_;
  std::size_t bytes_;
  bool inline_ = false;
};

/// A small buffer that lives in the same allocation as its Storage and reference counts, so a
/// small tensor costs one allocation from the block cache instead of two.
class InlineStorage final : public Storage {
 public:
  static constexpr std::size_t capacity = 64;
  explicit InlineStorage(std::size_t bytes) : Storage(bytes, buffer_) {}

 private:
  alignas(64) unsigned char buffer_[capacity];
};

/// A buffer of `bytes` bytes for op `op` (named in the out-of-memory error).
std::shared_ptr<Storage> allocate_storage(std::size_t bytes, const char* op = "alloc");

/// 64-byte aligned memory from a per-thread cache of small blocks (falls back to
/// aligned_alloc for large sizes). free_block must get the same size.
void* allocate_block(std::size_t bytes);
void free_block(void* p, std::size_t bytes);

/// Memory in 2 MiB-aligned blocks of whole 2 MiB pages that the kernel is asked to back with
/// huge pages (MADV_HUGEPAGE; advice only), for buffers that a kernel streams through on every
/// step (a recurrence's packed weight panels). Each block is a mapping of its own when first
/// made, so it is never memory the heap already faulted in as 4 KiB pages. Released blocks are
/// kept for a request of the same size, in a cache of their own under the large-buffer cache's
/// limit, counted in memory_stats().cached_bytes. Null when the system has no memory;
/// free_huge_block must get the same size.
constexpr std::size_t huge_page_bytes = std::size_t{1} << 21;
void* allocate_huge_block(std::size_t bytes);
void free_huge_block(void* p, std::size_t bytes);

/// Allocator for std::allocate_shared that takes its memory from the block cache, so
/// creating a tensor does not go through malloc for its bookkeeping objects.
template <class T>
struct CachedAllocator {
  using value_type = T;
  CachedAllocator() = default;
  template <class U>
  CachedAllocator(const CachedAllocator<U>&) {}
  T* allocate(std::size_t n) {
    void* p = allocate_block(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) { free_block(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const CachedAllocator<U>&) const {
    return true;
  }
};

/// Counts cached concrete functions, their graph nodes and bytes (graphs + plans) in
/// memory_stats(); called with positive deltas when one is cached, negative when freed.
void count_cached_function(std::int64_t functions, std::int64_t nodes, std::int64_t bytes);

/// Counters behind memory_stats().
void count_tensor_created();
void count_tensor_destroyed();

}  // namespace kiln::detail

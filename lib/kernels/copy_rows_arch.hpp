#pragma once
// The short-row copier (CopyRowsFn) and the streaming copier (StreamCopyFn) for one xsimd
// architecture. Included only by
// elementwise_arch.hpp, after it has set up xsimd under the instruction set's own namespace; the
// same one-definition rules apply (everything here is in an anonymous namespace).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/copy_rows_arch.hpp"
#endif

#include <cstdint>

namespace kiln::detail {

namespace {

/// CopyRowsFn: each row in vector-width moves, the last one ending at the row's end (it may
/// overlap the one before); rows shorter than a vector in 8-byte moves, then bytes.
template <class Arch>
void copy_rows(const void* src, std::int64_t src_row_stride, void* dst, std::int64_t row_bytes,
               std::int64_t rows) {
  using V = xsimd::batch<std::uint8_t, Arch>;
  constexpr std::int64_t width = V::size;
  const auto* from = static_cast<const std::uint8_t*>(src);
  auto* to = static_cast<std::uint8_t*>(dst);
  for (std::int64_t r = 0; r < rows; ++r, from += src_row_stride, to += row_bytes) {
    if (row_bytes >= width) {
      for (std::int64_t i = 0; i + width < row_bytes; i += width)
        V::load_unaligned(from + i).store_unaligned(to + i);
      V::load_unaligned(from + row_bytes - width).store_unaligned(to + row_bytes - width);
    } else if (row_bytes >= 8) {
      for (std::int64_t i = 0; i + 8 < row_bytes; i += 8) __builtin_memcpy(to + i, from + i, 8);
      __builtin_memcpy(to + row_bytes - 8, from + row_bytes - 8, 8);
    } else {
      for (std::int64_t i = 0; i < row_bytes; ++i) to[i] = from[i];
    }
  }
}

/// One vector of `width` bytes from src (any alignment) to dst (aligned to width) with a
/// non-temporal store: the instruction set's widest stream instruction.
template <std::int64_t width>
inline void stream_vector(std::uint8_t* dst, const std::uint8_t* src) {
  if constexpr (width == 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), _mm512_loadu_si512(src));
#endif
  } else if constexpr (width == 32) {
#if defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
#endif
  } else {
    static_assert(width == 16);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  }
}

/// StreamCopyFn: the bytes before dst's first vector-aligned address and after its last whole
/// vector are copied with plain stores; everything between with non-temporal stores of the
/// instruction set's full width (64 bytes on AVX-512, 32 on AVX2, 16 on SSE2). Every byte is
/// copied exactly once, whatever the alignment and length. The caller issues the sfence
/// (_mm_sfence) before another thread may read dst.
template <class Arch>
void stream_copy(void* dst, const void* src, std::int64_t bytes) {
  constexpr std::int64_t width = xsimd::batch<std::uint8_t, Arch>::size;
  auto* to = static_cast<std::uint8_t*>(dst);
  const auto* from = static_cast<const std::uint8_t*>(src);
  const auto misaligned = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(to) % width);
  std::int64_t head = misaligned == 0 ? 0 : width - misaligned;
  if (head > bytes) head = bytes;
  __builtin_memcpy(to, from, static_cast<unsigned long>(head));
  std::int64_t i = head;
  for (; i + 4 * width <= bytes; i += 4 * width) {
    stream_vector<width>(to + i, from + i);
    stream_vector<width>(to + i + width, from + i + width);
    stream_vector<width>(to + i + 2 * width, from + i + 2 * width);
    stream_vector<width>(to + i + 3 * width, from + i + 3 * width);
  }
  for (; i + width <= bytes; i += width) stream_vector<width>(to + i, from + i);
  __builtin_memcpy(to + i, from + i, static_cast<unsigned long>(bytes - i));
}

}  // namespace

}  // namespace kiln::detail

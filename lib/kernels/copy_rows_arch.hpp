#pragma once
// The short-row copier (CopyRowsFn) for one xsimd architecture. Included only by
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

}  // namespace

}  // namespace kiln::detail

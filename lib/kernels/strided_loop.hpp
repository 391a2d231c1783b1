#pragma once
// Walking several strided arrays of one shape together, one inner row at a time.

#include <array>
#include <cstdint>

#include "kernels/kernel.hpp"

namespace kiln::detail {

/// Dims of a group of same-shape arrays after merging dims that are contiguous in all of
/// them (and dropping size-1 dims). `shape`/`strides[k]` have `rank` entries; the last
/// dim is the inner row. Rank 0 arrays become rank 1 of size 1.
template <std::size_t N>
struct CoalescedDims {
  std::size_t rank = 0;
  std::array<std::int64_t, Shape::max_rank> shape{};
  std::array<std::array<std::int64_t, Shape::max_rank>, N> strides{};
};

template <std::size_t N>
CoalescedDims<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  CoalescedDims<N> c;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = c.rank > 0;
    for (std::size_t k = 0; k < N && merge; ++k)
      merge = c.strides[k][c.rank - 1] == (*strides[k])[d] * shape[d];
    if (merge) {
      c.shape[c.rank - 1] *= shape[d];
      for (std::size_t k = 0; k < N; ++k) c.strides[k][c.rank - 1] = (*strides[k])[d];
    } else {
      c.shape[c.rank] = shape[d];
      for (std::size_t k = 0; k < N; ++k) c.strides[k][c.rank] = (*strides[k])[d];
      ++c.rank;
    }
  }
  if (c.rank == 0) {
    c.rank = 1;
    c.shape[0] = 1;
    for (std::size_t k = 0; k < N; ++k) c.strides[k][0] = 1;
  }
  return c;
}

/// Calls row(offsets, n) for every inner row of the coalesced dims, where offsets[k] is
/// the element offset of array k at the row start and n the row length. The inner
/// strides are c.strides[k][c.rank - 1]. Nothing is called when any dim is 0.
template <std::size_t N, class Row>
void for_each_row(const CoalescedDims<N>& c, Row&& row) {
  for (std::size_t d = 0; d < c.rank; ++d)
    if (c.shape[d] == 0) return;
  const std::size_t outer = c.rank - 1;
  std::array<std::int64_t, Shape::max_rank> index{};
  std::array<std::int64_t, N> offsets{};
  const std::int64_t n = c.shape[outer];
  while (true) {
    row(offsets, n);
    std::size_t d = outer;
    while (d-- > 0) {
      ++index[d];
      for (std::size_t k = 0; k < N; ++k) offsets[k] += c.strides[k][d];
      if (index[d] < c.shape[d]) break;
      for (std::size_t k = 0; k < N; ++k) offsets[k] -= c.strides[k][d] * c.shape[d];
      index[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

}  // namespace kiln::detail

#pragma once
// The row kernel of argmax and argmin (kernels/arg_extremum.cpp) for one xsimd architecture:
// ArgExtremumRowFn. Included only by elementwise_arch.hpp; the same one-definition rules apply
// (everything here is in an anonymous namespace).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/arg_extremum_rows_arch.hpp"
#endif

#include <cstdint>
#include <cstring>

#include "kernels/arg_extremum_order.hpp"

namespace kiln::detail {

namespace {

/// ArgExtremumRowFn: the index replaces<> picks in row[0, n) (n >= 1), for T of 4 or 8 bytes.
/// Rows of at least four vectors (and 32 elements) take two passes in vectors of Arch's width
/// (GCC's vector extension, compiled for this translation unit's instruction set): the extremum
/// of the non-NaN elements in four vectors of lanes (x > m ? x : m is the max instruction, which
/// skips a NaN x) beside a flag per lane for NaN, folded into one vector and then one value,
/// then a scan for the first (last) element equal to that extremum, or NaN. Equal is the same
/// test the one-pass loop makes: -0 and +0 tie, and the first (last) of them wins either way.
/// In 16-byte vectors on every instruction set, with the 4 x 16 lanes of a step taken one by
/// one, an argmax over the rows of an f32[4096, 1024] ran 0.57-0.62 ms on two threads of the
/// Xeon from the caches (kiln_bench_bandwidth: 0.72-0.78 of its read pass); at AVX-512 with the
/// lanes folded as vectors, 0.47-0.49 ms (0.87-0.95 of the read pass), and from memory 1.40
/// against 1.66 ms. Folding the lanes one by one, 64 of them at AVX-512, had made it slower
/// than the 16-byte code.
template <class Arch, class T, bool kMax, bool kLast>
std::int64_t arg_extremum_row(const void* in, std::int64_t n) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "vector lanes of 4 or 8 bytes");
  const T* row = static_cast<const T*>(in);
  constexpr std::int64_t bytes = static_cast<std::int64_t>(sizeof(xsimd::batch<float, Arch>));
  constexpr std::int64_t width = bytes / static_cast<std::int64_t>(sizeof(T));
  constexpr std::int64_t kLanes = 4 * width;
  if (n < kLanes || n < 32) return one_pass_arg_extremum<T, kMax, kLast>(row, n);
  // NaN flags as wide as T.
  using Flag = std::conditional_t<sizeof(T) == 8, std::int64_t, std::int32_t>;
  typedef T V __attribute__((vector_size(bytes)));
  typedef Flag F __attribute__((vector_size(bytes)));
  const auto load = [&](std::int64_t at) {
    V v;
    std::memcpy(&v, row + at, sizeof(V));
    return v;
  };
  V b[4];
  F flag[4];
  for (int k = 0; k < 4; ++k) {
    b[k] = load(k * width);
    flag[k] = b[k] != b[k];
  }
  std::int64_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < 4; ++k) {
      const V v = load(i + k * width);
      if constexpr (kMax)
        b[k] = v > b[k] ? v : b[k];
      else
        b[k] = v < b[k] ? v : b[k];
      flag[k] |= v != v;
    }
  for (; i + width <= n; i += width) {
    const V v = load(i);
    if constexpr (kMax)
      b[0] = v > b[0] ? v : b[0];
    else
      b[0] = v < b[0] ? v : b[0];
    flag[0] |= v != v;
  }
  // A lane is NaN only where its first element was, which its flag holds: with no flag set the
  // four vectors' lanes hold no NaN and fold into one vector, then into one extremum, and the
  // tail (fewer elements than a vector) joins it one by one.
  const F flags = flag[0] | flag[1] | flag[2] | flag[3];
  Flag any_flag = 0;
  for (std::int64_t j = 0; j < width; ++j) any_flag |= flags[j];
  bool any_nan = any_flag != 0;
  T extremum = b[0][0];
  if (!any_nan) {
    V m = b[0];
    for (int k = 1; k < 4; ++k) {
      if constexpr (kMax)
        m = b[k] > m ? b[k] : m;
      else
        m = b[k] < m ? b[k] : m;
    }
    extremum = m[0];
    for (std::int64_t j = 1; j < width; ++j)
      if (kMax ? m[j] > extremum : m[j] < extremum) extremum = m[j];
    for (; i < n; ++i) {
      any_nan = any_nan || is_nan_value(row[i]);
      if (kMax ? row[i] > extremum : row[i] < extremum) extremum = row[i];
    }
  }
  // The scan, in blocks whose test is one loop of vector compares, then the element in the
  // block that has it.
  constexpr std::int64_t kBlock = 64;
  const auto find = [&](auto wanted) -> std::int64_t {
    const auto block_has = [&](std::int64_t at) {
      Flag hit = 0;
      for (std::int64_t j = 0; j < kBlock; ++j) hit |= wanted(row[at + j]) ? 1 : 0;
      return hit != 0;
    };
    if constexpr (kLast) {
      std::int64_t k = n;
      while (k >= kBlock && !block_has(k - kBlock)) k -= kBlock;
      while (k-- > 0)
        if (wanted(row[k])) return k;
    } else {
      std::int64_t k = 0;
      while (k + kBlock <= n && !block_has(k)) k += kBlock;
      for (; k < n; ++k)
        if (wanted(row[k])) return k;
    }
    return 0;  // not reached: the extremum (or a NaN) is an element of the row
  };
  if (any_nan) return find([](T v) { return is_nan_value(v); });
  return find([&](T v) { return v == extremum; });
}

/// The four entries of one element type: [max or min][first or last].
template <class Arch, class T>
constexpr void fill_arg_extremum_rows(ArgExtremumRowFn (&entries)[2][2]) {
  entries[0][0] = &arg_extremum_row<Arch, T, false, false>;
  entries[0][1] = &arg_extremum_row<Arch, T, false, true>;
  entries[1][0] = &arg_extremum_row<Arch, T, true, false>;
  entries[1][1] = &arg_extremum_row<Arch, T, true, true>;
}

}  // namespace

}  // namespace kiln::detail

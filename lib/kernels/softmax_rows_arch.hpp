#pragma once
// The two row pieces of the softmax primitive (lib/kernels/reduce.cpp) for one xsimd
// architecture: a row's max (MaxRowFn) and exp(x - shift) over a row (ExpShiftedRowFn). Included
// only by elementwise_arch.hpp, after elementwise_ops_arch.hpp; the same one-definition rules
// apply (everything here is in an anonymous namespace, scalar math through __builtin_*).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/softmax_rows_arch.hpp"
#endif

#include <cstdint>

namespace kiln::detail {

namespace {

/// max(a, b) with NaN winning, as MaximumOp::simd does lane by lane.
template <class T>
T max_with_nan(T a, T b) {
  return a >= b || __builtin_isnan(a) ? a : b;
}

/// MaxRowFn: *out = the max of x[0, n) (n >= 1), NaN when there is one, in four vector
/// accumulators (MaximumOp's lanes) and then their lanes. The max of a set is one of its
/// elements whatever the order, so this is the max of every other order too (up to the sign of
/// a zero maximum).
template <class Arch, class T>
void max_row(const void* in, std::int64_t n, void* out) {
  const T* x = static_cast<const T*>(in);
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  T m = x[0];
  std::int64_t i = 1;
  if (n >= 4 * width) {
    B acc[4] = {B::load_unaligned(x), B::load_unaligned(x + width),
                B::load_unaligned(x + 2 * width), B::load_unaligned(x + 3 * width)};
    for (i = 4 * width; i + 4 * width <= n; i += 4 * width)
      for (std::int64_t k = 0; k < 4; ++k)
        acc[k] = MaximumOp::simd(acc[k], B::load_unaligned(x + i + k * width));
    for (; i + width <= n; i += width) acc[0] = MaximumOp::simd(acc[0], B::load_unaligned(x + i));
    const B all = MaximumOp::simd(MaximumOp::simd(acc[0], acc[1]), MaximumOp::simd(acc[2], acc[3]));
    T lanes[width];
    all.store_unaligned(lanes);
    m = lanes[0];
    for (std::int64_t j = 1; j < width; ++j) m = max_with_nan(m, lanes[j]);
  }
  for (; i < n; ++i) m = max_with_nan(m, x[i]);
  *static_cast<T*>(out) = m;
}

/// ExpShiftedRowFn: out[i] = exp(x[i] - *shift) for i < n: the subtraction and ExpOp of the
/// row table in one pass, with the bits of sub then exp (the tail through a zero-padded batch,
/// as every row kernel's).
template <class Arch, class T>
void exp_shifted_row(const void* in, const void* shift, void* out, std::int64_t n) {
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  const B s(*static_cast<const T*>(shift));
  std::int64_t i = 0;
  for (; i + width <= n; i += width)
    ExpOp::simd(SubOp::simd(B::load_unaligned(x + i), s)).store_unaligned(y + i);
  if (i < n) {
    T rest[width] = {};
    for (std::int64_t j = 0; j < n - i; ++j) rest[j] = x[i + j];
    ExpOp::simd(SubOp::simd(B::load_unaligned(rest), s)).store_unaligned(rest);
    for (std::int64_t j = 0; j < n - i; ++j) y[i + j] = rest[j];
  }
}

}  // namespace

}  // namespace kiln::detail

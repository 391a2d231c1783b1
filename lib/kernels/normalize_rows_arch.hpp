#pragma once
// The row kernels of the layer_norm and rms_norm primitives (lib/kernels/reduce.cpp) for one
// xsimd architecture: NormalizeRowFn. Included only by elementwise_arch.hpp, after
// softmax_rows_arch.hpp (whose lane_sum and kSoftmaxBlock it uses); the same one-definition rules
// apply (everything here is in an anonymous namespace, scalar math through __builtin_*).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/normalize_rows_arch.hpp"
#endif

#include <cstdint>

namespace kiln::detail {

namespace {

/// The sum of term(x[i]) over a row of n elements: within each block of kSoftmaxBlock elements
/// in four vector accumulators, the blocks' sums in double, the last partial vector through a
/// batch padded with `pad` (whose term must be 0). So every float partial sum adds at most
/// kSoftmaxBlock / 4 / width terms, whatever the row's length.
template <class Arch, class T, class Term>
double blocked_row_sum(const T* x, std::int64_t n, const Term& term, T pad) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  double total = 0;
  std::int64_t i = 0;
  for (std::int64_t block = 0; block < n; block += kSoftmaxBlock) {
    const std::int64_t block_end = n - block < kSoftmaxBlock ? n : block + kSoftmaxBlock;
    B acc[4] = {B(T{0}), B(T{0}), B(T{0}), B(T{0})};
    for (; i + 4 * width <= block_end; i += 4 * width)
      for (std::int64_t k = 0; k < 4; ++k) acc[k] += term(B::load_unaligned(x + i + k * width));
    for (; i + width <= block_end; i += width) acc[0] += term(B::load_unaligned(x + i));
    total += static_cast<double>(lane_sum<Arch, T>((acc[0] + acc[1]) + (acc[2] + acc[3])));
  }
  if (i < n) {
    T rest[width];
    for (std::int64_t j = 0; j < width; ++j) rest[j] = j < n - i ? x[i + j] : pad;
    total += static_cast<double>(lane_sum<Arch, T>(term(B::load_unaligned(rest))));
  }
  return total;
}

/// The output pass of a normalized row: y = (x - mean) * scale, then times gamma and plus beta
/// where given (kScale, kShift), each a rounded operation in that order (the composite's). Each
/// step of two vectors also asks for the same bytes of `next` (the next row, as long as this
/// one) to be brought into L2, spread over the pass as softmax's exp pass does. x may be y.
/// One request a step: at AVX-512 that is every other line of `next`. Asking for every line
/// made layer_norm over f32[4096, 1024] slower on a Zen 4 (0.63-0.72 ms against 0.53-0.61 in
/// three interleaved pairs), so the step keeps its one.
template <class Arch, class T, bool kScale, bool kShift>
void normalized_output(const T* x, const T* gamma, const T* beta, T* y, std::int64_t n, T mean,
                       T scale, const char* next) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  const B m(mean), s(scale);
  const auto one = [&](std::int64_t at) {
    B v = (B::load_unaligned(x + at) - m) * s;
    if constexpr (kScale) v = v * B::load_unaligned(gamma + at);
    if constexpr (kShift) v = v + B::load_unaligned(beta + at);
    v.store_unaligned(y + at);
  };
  std::int64_t i = 0;
  for (; i + 2 * width <= n; i += 2 * width) {
    if (next != nullptr) __builtin_prefetch(next + i * static_cast<std::int64_t>(sizeof(T)), 0, 2);
    one(i);
    one(i + width);
  }
  for (; i + width <= n; i += width) one(i);
  for (; i < n; ++i) {
    T v = (x[i] - mean) * scale;
    if constexpr (kScale) v = v * gamma[i];
    if constexpr (kShift) v = v + beta[i];
    y[i] = v;
  }
}

/// NormalizeRowFn of the layer_norm (kCentered) and rms_norm primitives for one row of n >= 1
/// elements (in may be out): the mean (layer_norm; 0 for rms_norm) rounded to T, the mean of
/// (x - mean)^2 in double, scale = 1 / sqrt(that + epsilon) in double rounded to T, then the
/// output pass. Three passes over the row for layer_norm (two for rms_norm), all but the first
/// in L1. A NaN or an infinity in the row makes the whole row NaN, as in the composite (the
/// mean or the sum of squares is NaN or inf; x - mean or 0 * inf then NaN), except for rms_norm,
/// where an infinite square sum gives scale 0: NaN at the infinities and 0 elsewhere, the
/// composite's values (x * rsqrt(inf)).
template <class Arch, class T, bool kCentered>
void normalize_row(const void* in, const void* gamma, const void* beta, void* out, std::int64_t n,
                   double epsilon, const void* next) {
  using B = xsimd::batch<T, Arch>;
  const T* x = static_cast<const T*>(in);
  T mean = 0;
  if constexpr (kCentered)
    mean = static_cast<T>(blocked_row_sum<Arch, T>(
                              x, n, [](const B& v) { return v; }, T{0}) /
                          static_cast<double>(n));
  const B m(mean);
  const auto square = [m](const B& v) {
    if constexpr (kCentered) {
      const B d = v - m;
      return d * d;
    } else {
      return v * v;
    }
  };
  const double squares = blocked_row_sum<Arch, T>(x, n, square, mean);
  const T scale = static_cast<T>(1.0 / __builtin_sqrt(squares / static_cast<double>(n) + epsilon));
  const auto* g = static_cast<const T*>(gamma);
  const auto* b = static_cast<const T*>(beta);
  T* y = static_cast<T*>(out);
  const auto* ahead = static_cast<const char*>(next);
  if (g != nullptr && b != nullptr)
    normalized_output<Arch, T, true, true>(x, g, b, y, n, mean, scale, ahead);
  else if (g != nullptr)
    normalized_output<Arch, T, true, false>(x, g, b, y, n, mean, scale, ahead);
  else if (b != nullptr)
    normalized_output<Arch, T, false, true>(x, g, b, y, n, mean, scale, ahead);
  else
    normalized_output<Arch, T, false, false>(x, g, b, y, n, mean, scale, ahead);
}

}  // namespace

}  // namespace kiln::detail

#pragma once
// The row kernels of the softmax, log_softmax and logsumexp primitives (lib/kernels/reduce.cpp)
// for one xsimd architecture: SoftmaxRowFn and LogSumExpRowsFn. Included only by
// elementwise_arch.hpp, after elementwise_ops_arch.hpp; the same one-definition rules apply
// (everything here is in an anonymous namespace, scalar math through __builtin_*).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/softmax_rows_arch.hpp"
#endif

#include <cstdint>
#include <type_traits>

namespace kiln::detail {

namespace {

/// The least and the greatest of the non-NaN elements of a row x[0, n) (+inf and -inf when there
/// are none), gathered in four vector accumulators of each as the row is read: `step` takes the
/// next kCount elements (at most four vectors' worth, each into its own accumulators), `finish`
/// the rest and gives the range. Each step is xsimd::max(x, acc) (and min), the instruction set's
/// max instruction (maxps, vmaxps), which gives its second operand when either is NaN: a NaN
/// element is skipped, and the accumulators, which start at -inf (+inf), never hold one. The max
/// of a set is one of its elements whatever the order and the grouping, up to the sign of a zero
/// maximum (and minimum), which changes no exp of x - max and no softmax, log_softmax or
/// logsumexp: so a row's range may be gathered in steps of any size. The min costs little: the
/// pass waits on its loads.
/// While it reads x, `step` also asks for the same bytes of `ahead` (a row as long as x, or null)
/// to be brought into L2, and `finish` for the rest of them: the softmax_exps side work of
/// logsumexp_rows, which so reads the next row's range from L2 while it adds this row's exps.
template <class T>
struct RowRange {
  T min;
  T max;
};
template <class Arch, class T>
class RangeReader {
 public:
  RangeReader(const T* x, std::int64_t n, const T* ahead) : x_(x), ahead_(ahead), n_(n) {}

  template <std::int64_t kCount>
  [[gnu::always_inline]] void step(std::int64_t) {
    constexpr int vectors = static_cast<int>(kCount / width);
    static_assert(vectors >= 1 && vectors <= 4 && kCount % width == 0);
    for_each_batch<vectors>([&](int k) {
      const B v = B::load_unaligned(x_ + i_ + k * width);
      most_[k] = xsimd::max(v, most_[k]);
      least_[k] = xsimd::min(v, least_[k]);
    });
    if (ahead_ != nullptr)
      for (std::int64_t byte = 0; byte < kCount * bytes; byte += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(ahead_ + i_) + byte, 0, 2);
    i_ += kCount;
  }
  void after(std::int64_t) {}

  RowRange<T> finish() {
    while (i_ + width <= n_) step<width>(i_);
    if (ahead_ != nullptr)
      for (std::int64_t byte = i_ * bytes; byte < n_ * bytes; byte += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(ahead_) + byte, 0, 2);
    T lo = inf, hi = -inf;
    T highs[width], lows[width];
    xsimd::max(xsimd::max(most_[0], most_[1]), xsimd::max(most_[2], most_[3]))
        .store_unaligned(highs);
    xsimd::min(xsimd::min(least_[0], least_[1]), xsimd::min(least_[2], least_[3]))
        .store_unaligned(lows);
    for (std::int64_t j = 0; j < width; ++j) {
      hi = highs[j] > hi ? highs[j] : hi;
      lo = lows[j] < lo ? lows[j] : lo;
    }
    for (; i_ < n_; ++i_) {
      hi = x_[i_] > hi ? x_[i_] : hi;
      lo = x_[i_] < lo ? x_[i_] : lo;
    }
    return {lo, hi};
  }

 private:
  using B = xsimd::batch<T, Arch>;
  static constexpr std::int64_t width = B::size;
  static constexpr std::int64_t bytes = sizeof(T);
  static constexpr T inf = __builtin_inf();
  const T* x_;
  const T* ahead_;
  std::int64_t n_;
  std::int64_t i_ = 0;  // x's elements read
  B most_[4] = {B(-inf), B(-inf), B(-inf), B(-inf)};
  B least_[4] = {B(inf), B(inf), B(inf), B(inf)};
};

/// A row's range by RangeReader in steps of four vectors.
template <class Arch, class T>
RowRange<T> range_skipping_nan(const T* x, std::int64_t n) {
  constexpr std::int64_t chunk = 4 * xsimd::batch<T, Arch>::size;
  RangeReader<Arch, T> reader(x, n, nullptr);
  for (std::int64_t i = 0; i + chunk <= n; i += chunk) reader.template step<chunk>(i);
  return reader.finish();
}

/// The lanes of v added: halves, then quarters, ... (the same order on every call). Not
/// xsimd::hadd: xsimd 8.1's AVX-512F version calls an AVX-512DQ intrinsic, which this table's
/// -mavx512f build cannot compile.
template <class Arch, class T>
T lane_sum(const xsimd::batch<T, Arch>& v) {
  constexpr std::int64_t width = xsimd::batch<T, Arch>::size;
  T lanes[width];
  v.store_unaligned(lanes);
  for (std::int64_t half = width / 2; half > 0; half /= 2)
    for (std::int64_t j = 0; j < half; ++j) lanes[j] += lanes[j + half];
  return lanes[0];
}

/// What softmax_exps writes to y beside adding the exps: nothing (logsumexp), the exps
/// (softmax, which then scales them in place) or the shifted inputs x - shift (log_softmax,
/// which then subtracts the log of the sum in place). Either store keeps the output's lines
/// written in the pass that reads x, so the last pass reads and writes one row in L1.
enum class ExpStore { none, exps, shifted };

/// Elements per block of the exp pass: within a block the exps are added in one vector
/// accumulator per batch of a group (softmax_exps); the blocks' sums are added in double. So every
/// partial sum adds at most kSoftmaxBlock / 8 terms, whatever the row's length. With 2048, a row of
/// 5,000 equal exps of e^-10 beside a 1 (a classifier's logits before training look like this)
/// added in float lanes of 128 terms each, all rounded the same way: logsumexp was 1.7e-6 off, more
/// than 8 roundings of its value. 512 leaves 1.9e-7, for 1-3% of logsumexp's time from L1.
inline constexpr std::int64_t kSoftmaxBlock = 512;

/// softmax_row's exp pass: out[i] = exp(x[i] - shift) by Exp, written out while the exps are
/// added per block of kSoftmaxBlock (the blocks in double; the tail through a batch padded with
/// -inf, whose exps are 0). Returns the sum. kStore says what else is written to y (ExpStore;
/// with none y is not touched). With kClamp false every x - shift is in [-88, 0] or NaN
/// (shifted_exp_sum), and Exp leaves out its clamp (the tail, padded with -inf, keeps it).
/// - The exps go in groups of two batches (four below 8 lanes), and each step finishes one group
///   while it begins the next (ExpBelowOverflowOp): the core's scheduler then holds the next
///   group's ready reductions beside this group's polynomials, where a whole group's chain of
///   dependent operations would fill it. On the Zen 2, a loop of exps and their stores (from L1,
///   without the clamp) took 2.4 ns per 8 floats so, against 2.8 with four batches begun and
///   finished in turn and 3.0 with one batch after another.
/// - Each group's exps add into their own accumulators, so a lane adds at most kSoftmaxBlock / 8
///   terms.
/// - Each step also gives `side` its position (side.step<group>(i)), and the loop's end
///   (side.after(i)): the caller's work beside the exps, which waits on memory while they compute
///   (AskAhead: asking for the next rows; RangeReader: reading the next row's range).
template <class Arch, class T, class Exp, ExpStore kStore, bool kClamp, class Side>
double softmax_exps(const T* x, T* y, std::int64_t n, T shift, Side& side) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  constexpr int kGroup = width >= 8 ? 2 : 4;
  constexpr std::int64_t group = kGroup * width;
  const B s(shift);
  const auto begin_at = [&](std::int64_t at) {
    B v[kGroup];
    for_each_batch<kGroup>([&](int k) {
      v[k] = SubOp::simd(B::load_unaligned(x + at + k * width), s);
      if constexpr (kStore == ExpStore::shifted) v[k].store_unaligned(y + at + k * width);
    });
    return Exp::template begin<kClamp>(v);
  };
  double total = 0;
  std::int64_t i = 0;
  while (i + width <= n) {
    const std::int64_t block_end = n - i > kSoftmaxBlock ? i + kSoftmaxBlock : n;
    B acc[kGroup];
    for_each_batch<kGroup>([&](int k) { acc[k] = B(T{0}); });
    const auto finish_at = [&](std::int64_t at, const auto& started) {
      B e[kGroup];
      Exp::finish(started, e);
      for_each_batch<kGroup>([&](int k) {
        if constexpr (kStore == ExpStore::exps) e[k].store_unaligned(y + at + k * width);
        acc[k] += e[k];
      });
    };
    if (i + group <= block_end) {
      auto started = begin_at(i);
      for (; i + 2 * group <= block_end; i += group) {
        side.template step<group>(i);
        const auto following = begin_at(i + group);
        finish_at(i, started);
        started = following;
      }
      side.template step<group>(i);
      finish_at(i, started);
      i += group;
    }
    for (; i + width <= block_end; i += width) {
      const B shifted = SubOp::simd(B::load_unaligned(x + i), s);
      if constexpr (kStore == ExpStore::shifted) shifted.store_unaligned(y + i);
      const B e = Exp::simd(shifted);
      if constexpr (kStore == ExpStore::exps) e.store_unaligned(y + i);
      acc[0] += e;
    }
    const B both = acc[0] + acc[1];
    if constexpr (kGroup == 2)
      total += static_cast<double>(lane_sum<Arch, T>(both));
    else
      total += static_cast<double>(lane_sum<Arch, T>(both + (acc[2] + acc[3])));
  }
  side.after(i);
  if (i < n) {
    T rest[width];
    for (std::int64_t j = 0; j < width; ++j) rest[j] = j < n - i ? x[i + j] : -__builtin_inf();
    const B shifted = SubOp::simd(B::load_unaligned(rest), s);
    const B e = Exp::simd(shifted);
    if constexpr (kStore != ExpStore::none) {
      (kStore == ExpStore::exps ? e : shifted).store_unaligned(rest);
      for (std::int64_t j = 0; j < n - i; ++j) y[i + j] = rest[j];
    }
    total += static_cast<double>(lane_sum<Arch, T>(e));
  }
  return total;
}

/// softmax_exps' side work for softmax and log_softmax: each step asks for the same bytes of
/// `next` (the next row, as long as this one) to be brought into L2, and `after` for the rest of
/// it: spread over the pass, the prefetches wait on nothing (all at once, 64 of them for a row of
/// 1,024 f32 stalled on the core's fill buffers: a tenth of softmax's time at AVX2). When
/// `to_write` is not null (the caller's next output row), each step asks for its same bytes too,
/// for writing: log_softmax, which then asked for its own output row, ran over rows of 1,024 f32
/// on two threads in 1.05-1.14 ms instead of 1.19-1.22 (the rows are pages apart, and a store to
/// a page the prefetchers have not followed waits for its line).
template <class T>
struct AskAhead {
  const char* next;
  const char* to_write;
  std::int64_t n;

  template <std::int64_t kCount>
  [[gnu::always_inline]] void step(std::int64_t at) const {
    constexpr auto bytes = static_cast<std::int64_t>(sizeof(T));
    for (std::int64_t byte = 0; byte < kCount * bytes; byte += 64)
      __builtin_prefetch(next + at * bytes + byte, 0, 2);
    if (to_write != nullptr)
      for (std::int64_t byte = 0; byte < kCount * bytes; byte += 64)
        __builtin_prefetch(to_write + at * bytes + byte, 1, 3);
  }
  void after(std::int64_t at) const {
    for (std::int64_t byte = at * static_cast<std::int64_t>(sizeof(T));
         byte < n * static_cast<std::int64_t>(sizeof(T)); byte += 64)
      __builtin_prefetch(next + byte, 0, 2);
  }
};

/// A row's exp pass with its shift, given the row's range: shift = the max of the row's non-NaN
/// elements when that is finite, else 0, then softmax_exps with it (writing to y what kStore
/// says; `side` its side work per step). With a finite shift every x - shift is at most 0 (or
/// NaN), where ExpBelowOverflowOp gives ExpOp's bits without its test for the top of the range;
/// when only the sum is wanted (log_softmax, logsumexp: no exp is stored)
/// ExpOfNonPositiveForSumOp's cheaper exp adds up instead. Where the row's elements are all
/// within 87 of its max (most rows of logits), the exps leave out their clamp (kClamp false),
/// which changes nothing there.
template <class T>
struct ShiftedSum {
  T shift;
  double total;
};
template <class Arch, class T, ExpStore kStore, class Side>
ShiftedSum<T> exp_sum_in_range(const T* x, T* y, std::int64_t n, RowRange<T> range, Side& side) {
  const auto [min, max] = range;
  if (!__builtin_isfinite(max))
    return {T{0}, softmax_exps<Arch, T, ExpOp, kStore, true>(x, y, n, T{0}, side)};
  using BelowMax =
      std::conditional_t<kStore == ExpStore::exps, ExpBelowOverflowOp, ExpOfNonPositiveForSumOp>;
  // Every x - max in [-87, 0] (or NaN): the exps need no clamp. min - max rounds to at least
  // -87 only when it is above -88, and so is each x - max, being at least min - max.
  if (min - max >= T{-87})
    return {max, softmax_exps<Arch, T, BelowMax, kStore, false>(x, y, n, max, side)};
  return {max, softmax_exps<Arch, T, BelowMax, kStore, true>(x, y, n, max, side)};
}

/// A row's range (range_skipping_nan) and its exp pass (exp_sum_in_range), asking for `next`
/// (null: this row, which is in L1 by then) and `to_write` as AskAhead says.
template <class Arch, class T, ExpStore kStore>
ShiftedSum<T> shifted_exp_sum(const T* x, T* y, std::int64_t n, const void* next,
                              const void* to_write) {
  AskAhead<T> side{static_cast<const char*>(next != nullptr ? next : x),
                   static_cast<const char*>(to_write), n};
  return exp_sum_in_range<Arch, T, kStore>(x, y, n, range_skipping_nan<Arch, T>(x, n), side);
}

/// SoftmaxRowFn: out[i] = softmax(x)[i] for one row of n >= 1 elements, in three passes over
/// the row (in may be out):
/// - the shift and e = exp(x - shift), the row table's sub then exp bit for bit, stored
///   (shifted_exp_sum; a row with a NaN gives NaN everywhere through the sum, so skipping NaN in
///   the max changes nothing);
/// - out = e * (1 / sum), one rounding of a product by the reciprocal, as the composite
///   e * (1 / sum(e)) of lib/ops/reduce.cpp: 0 / 0 and inf / inf give NaN either way.
/// The exp pass asks for the n elements at `next` (the caller's next row; null for none) to be
/// brought into L2: the first pass of the next row reads memory at the speed of the caches
/// instead of waiting for each line, and the loads are in flight while this row computes. Each
/// row starts a new run of pages, which the hardware prefetchers do not follow (a single thread
/// over rows of 1,024 f32: 4.1-4.4 ms instead of 4.8-5.9). Without a next row it asks for this
/// row's own bytes, which are in L1 by then. It asks for the row at `next_out` too, for writing
/// (softmax_exps' to_write), whose lines the next row's exp pass stores into at once: on two
/// threads over rows of 1,024 f32, 1.10-1.24 ms instead of 1.24-1.28.
template <class Arch, class T>
void softmax_row(const void* in, void* out, std::int64_t n, const void* next, void* next_out) {
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  const T inverse =
      T{1} /
      static_cast<T>(shifted_exp_sum<Arch, T, ExpStore::exps>(x, y, n, next, next_out).total);
  const B scale(inverse);
  std::int64_t i = 0;
  for (; i + 4 * width <= n; i += 4 * width) {
    B e[4];
    for_each_batch<4>([&](int k) { e[k] = B::load_unaligned(y + i + k * width) * scale; });
    for_each_batch<4>([&](int k) { e[k].store_unaligned(y + i + k * width); });
  }
  for (; i + width <= n; i += width) (B::load_unaligned(y + i) * scale).store_unaligned(y + i);
  for (; i < n; ++i) y[i] *= inverse;
}

/// The log of a row's sum of exps, rounded to T first, by the row table's LogOp on one batch, as
/// the composites take it: what log_softmax_row subtracts and logsumexp_rows adds to the shift.
template <class Arch, class T>
T log_of_sum(double total) {
  using B = xsimd::batch<T, Arch>;
  T lanes[B::size];
  LogOp::simd(B(static_cast<T>(total))).store_unaligned(lanes);
  return lanes[0];
}

/// SoftmaxRowFn of the log_softmax primitive: out[i] = (x[i] - shift) - log(sum exp(x - shift))
/// for one row of n >= 1 elements, in three passes over the row (in may be out), as the composite
/// of lib/ops/reduce.cpp computes it: shifted_exp_sum (ExpOfNonPositiveForSumOp's cheaper exp, the
/// exps not stored), which writes the rounded x - shift to the output as it goes, and the log of
/// its sum (log_of_sum), then that log subtracted in place (the
/// second rounding). The output's lines are so written in the pass that reads x, as softmax's
/// are, and the row asks for the next output row meanwhile (next_out): reading x again in the
/// last pass and writing each output line there first left log_softmax 12-15% behind softmax
/// over rows of 1,024 f32 on two threads of a Zen 4. A row with a NaN gives NaN everywhere
/// (through the sum), one with +inf NaN there and -inf elsewhere, one of -inf only NaN (-inf -
/// log 0): the composite's values.
template <class Arch, class T>
void log_softmax_row(const void* in, void* out, std::int64_t n, const void* next, void* next_out) {
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  const T log_sum = log_of_sum<Arch, T>(
      shifted_exp_sum<Arch, T, ExpStore::shifted>(x, y, n, next, next_out).total);
  const B l(log_sum);
  std::int64_t i = 0;
  for (; i + 4 * width <= n; i += 4 * width) {
    B o[4];
    for_each_batch<4>([&](int k) { o[k] = SubOp::simd(B::load_unaligned(y + i + k * width), l); });
    for_each_batch<4>([&](int k) { o[k].store_unaligned(y + i + k * width); });
  }
  for (; i + width <= n; i += width)
    SubOp::simd(B::load_unaligned(y + i), l).store_unaligned(y + i);
  for (; i < n; ++i) y[i] = y[i] - log_sum;
}

/// LogSumExpRowsFn: out[r] = log(sum exp(x - shift)) + shift for each row r of rows >= 1 rows
/// of n >= 1 elements (the shift and the sum by exp_sum_in_range, the exps not stored, and the log
/// by log_of_sum, as the composite computes it). A row with a NaN gives NaN, one with +inf +inf,
/// one of -inf only -inf (log 0 + 0).
/// With AVX-512's 32 vector registers the rows overlap: while a row's exps add up (softmax_exps,
/// which computes), its side work (RangeReader) reads the next row's range and asks for the row
/// after that, so the range pass no longer waits on memory by itself. Each row's value is the one
/// it has alone: its range has the same min and max (up to signs of zero, which change no value;
/// RangeReader) whichever steps read it. Over rows of 1,024 f32 on two threads of the Xeon this
/// took 0.49-0.51 ms where a range pass and then an exp pass per row took 0.60-0.75. With 16
/// registers (SSE2, AVX2) the exps' accumulators then left the registers, and at AVX2 the overlap
/// took 0.62 ms against 0.57-0.59: there each row runs its two passes in turn (shifted_exp_sum,
/// asking for the next row as softmax does).
template <class Arch, class T>
void logsumexp_rows(const void* in, void* out, std::int64_t rows, std::int64_t n) {
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  if constexpr (sizeof(xsimd::batch<T, Arch>) < 64) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      const auto [shift, total] = shifted_exp_sum<Arch, T, ExpStore::none>(
          row, nullptr, n, r + 1 < rows ? row + n : nullptr, nullptr);
      y[r] = log_of_sum<Arch, T>(total) + shift;
    }
  } else {
    RowRange<T> range = range_skipping_nan<Arch, T>(x, n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      ShiftedSum<T> sum;
      if (r + 1 < rows) {
        RangeReader<Arch, T> side(row + n, n, r + 2 < rows ? row + 2 * n : nullptr);
        sum = exp_sum_in_range<Arch, T, ExpStore::none>(row, nullptr, n, range, side);
        range = side.finish();
      } else {
        AskAhead<T> side{reinterpret_cast<const char*>(row), nullptr, n};
        sum = exp_sum_in_range<Arch, T, ExpStore::none>(row, nullptr, n, range, side);
      }
      y[r] = log_of_sum<Arch, T>(sum.total) + sum.shift;
    }
  }
}

}  // namespace

}  // namespace kiln::detail

// Reduction kernels: reduce_sum/prod/max/min/all/any over attrs.axes (argmax and argmin, which
// run_reduce also runs, are in arg_extremum.cpp). The contract (contiguous input, normalized
// sorted axes, contiguous output) is stated with the front ends in lib/ops/reduce.cpp.

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"
#include "kernels/streaming.hpp"

namespace kiln::detail {

namespace {

// Outer-axis reductions combine whole rows elementwise (a loop the compiler vectorizes);
// blocks of more than kPairwiseRows rows are split in halves, so float sums err like
// pairwise sums.
constexpr std::int64_t kPairwiseRows = 32;
// A contiguous row is reduced as a [n / kRowWidth, kRowWidth] matrix: its rows are
// combined as above into kRowWidth lanes, then the lanes and the leftover tail.
constexpr std::int64_t kRowWidth = 64;

/// Integers accumulate in the unsigned type of the same width, so overflow wraps without UB.
template <class T>
struct Wrapping {
  using type = T;
};
template <class T>
requires std::is_integral_v<T>
struct Wrapping<T> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using WrappingType = typename Wrapping<T>::type;

// Each reducer turns an input element (In, the storage type: bool is std::uint8_t) into an
// accumulator (load), merges two accumulators (combine, associative), and turns the final
// accumulator into the output element (store).

template <class T>
struct SumReducer {
  using In = T;
  using Acc = WrappingType<T>;
  using Out = T;
  static Acc identity() { return Acc{0}; }
  static Acc load(T v) { return static_cast<Acc>(v); }
  static Acc combine(Acc a, Acc b) { return static_cast<Acc>(a + b); }
  static Out store(Acc a) { return static_cast<Out>(a); }
};

template <class T>
struct ProdReducer {
  using In = T;
  using Acc = WrappingType<T>;
  using Out = T;
  static Acc identity() { return Acc{1}; }
  static Acc load(T v) { return static_cast<Acc>(v); }
  static Acc combine(Acc a, Acc b) { return static_cast<Acc>(a * b); }
  static Out store(Acc a) { return static_cast<Out>(a); }
};

/// max/min; NaN wins over everything (NumPy).
template <class T, bool kMax>
struct ExtremumReducer {
  using In = T;
  using Acc = T;
  using Out = T;
  static Acc identity() {
    if constexpr (std::is_floating_point_v<T>) {
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  static Acc load(T v) { return v; }
  static Acc combine(Acc a, Acc b) {
    const bool b_wins = kMax ? b > a : b < a;
    return b_wins || is_nan_element(b) ? b : a;
  }
  static Out store(Acc a) { return a; }
};

/// all/any: nonzero (NaN included) counts as true; the output is a bool byte.
template <class T, bool kAll>
struct LogicalReducer {
  using In = T;
  using Acc = std::uint8_t;
  using Out = std::uint8_t;
  static Acc identity() { return kAll ? 1 : 0; }
  static Acc load(T v) { return v != T{0} ? 1 : 0; }
  static Acc combine(Acc a, Acc b) { return static_cast<Acc>(kAll ? (a & b) : (a | b)); }
  static Out store(Acc a) { return a; }
};

/// Number of cols-sized scratch rows the pairwise recursion below needs for `rows` rows: one
/// more at each split, for the right half's sums.
std::int64_t pairwise_depth(std::int64_t rows) {
  std::int64_t depth = 0;
  while (rows > kPairwiseRows) {
    rows -= rows / 2;
    ++depth;
  }
  return depth;
}

/// A float sum of more than this many rows, each at most kQuarteredRowBytes long, reads the four
/// quarters of its pairwise tree (the halves of its halves) together, from four places at once
/// (accumulate_rows): below it a quarter is a single leaf. Longer rows (column sums of wide
/// matrices) stay one stream: on the Xeon the column sums of an f32[16384, 1024] took 1.4x the
/// time in four, whose leaves' rows span 128 pages at a time, past what the first-level TLB
/// holds. The f64 rows of a contiguous sum (512 bytes) were as fast either way.
constexpr std::int64_t kQuarteredRows = 4 * kPairwiseRows;
constexpr std::int64_t kQuarteredRowBytes = 256;

/// The rows of the quarters of `rows`, as the pairwise recursion cuts them (largest last).
std::array<std::int64_t, 4> quarter_rows(std::int64_t rows) {
  const std::int64_t half = rows / 2, rest = rows - half;
  return {half / 2, half - half / 2, rest / 2, rest - rest / 2};
}

/// A float sum (or a stage of one, below), whose leaves run the row table's sum_rows: the same
/// bits as the loop of accumulate_pairwise.
template <class R>
struct IsFloatSum : std::false_type {};
template <>
struct IsFloatSum<SumReducer<float>> : std::true_type {};
template <>
struct IsFloatSum<SumReducer<double>> : std::true_type {};

/// Whether accumulate_rows reads the quarters of `rows` rows of `cols` together.
template <class R>
bool reads_quarters(std::int64_t rows, std::int64_t cols) {
  return IsFloatSum<R>::value && rows > kQuarteredRows &&
         cols * static_cast<std::int64_t>(sizeof(typename R::In)) <= kQuarteredRowBytes;
}

/// Number of cols-sized scratch rows accumulate_rows needs for `rows` rows: the pairwise
/// recursion's, or for quarters read together the sums of three quarters and a recursion's
/// scratch for each.
template <class R>
std::int64_t accumulate_depth(std::int64_t rows, std::int64_t cols) {
  const std::int64_t pairwise = pairwise_depth(rows);
  if (!reads_quarters<R>(rows, cols)) return pairwise;
  return std::max(pairwise, 3 + 4 * pairwise_depth(quarter_rows(rows)[3]));
}

template <class R>
void accumulate_pairwise(const typename R::In* x, std::int64_t rows, std::int64_t cols,
                         std::int64_t ld, typename R::Acc* acc, typename R::Acc* scratch);

/// One node of the pairwise tree: rows rows at x, reduced into acc, with pairwise_depth(rows) *
/// cols accumulators of scratch for its subtree.
template <class R>
struct RowsNode {
  const typename R::In* x;
  std::int64_t rows;
  typename R::Acc* acc;
  typename R::Acc* scratch;
};

/// accumulate_pairwise for `count` (at most max_sum_streams) nodes of a float sum at once, each
/// with its own acc and scratch: while every node splits, the left halves go down together and then
/// the right halves, and at the leaves one sum_rows call reads them all, a stream each. Each
/// node gets accumulate_pairwise's bits (its own additions in its own order); only the order in
/// which independent subtrees run changes. Nodes whose subtrees differ in shape (one a leaf,
/// another not: row counts one apart across kPairwiseRows) go one by one.
template <class R>
void accumulate_nodes(const RowsNode<R>* nodes, std::size_t count, std::int64_t cols,
                      std::int64_t ld) {
  bool leaves = true, split = true;
  for (std::size_t i = 0; i < count; ++i) {
    leaves = leaves && nodes[i].rows <= kPairwiseRows;
    split = split && nodes[i].rows > kPairwiseRows;
  }
  if (leaves) {
    constexpr DType dtype = std::is_same_v<typename R::In, float> ? DType::f32 : DType::f64;
    std::array<const void*, max_sum_streams> x{};
    std::array<std::int64_t, max_sum_streams> rows{};
    std::array<void*, max_sum_streams> acc{};
    for (std::size_t i = 0; i < count; ++i) {
      x[i] = nodes[i].x;
      rows[i] = nodes[i].rows;
      acc[i] = nodes[i].acc;
    }
    elementwise_rows().sum_rows[dtype_index(dtype)](
        x.data(), rows.data(), static_cast<std::int64_t>(count), cols, ld, acc.data());
    return;
  }
  if (!split) {
    for (std::size_t i = 0; i < count; ++i)
      accumulate_pairwise<R>(nodes[i].x, nodes[i].rows, cols, ld, nodes[i].acc, nodes[i].scratch);
    return;
  }
  // As accumulate_pairwise splits a node: the left half into acc (with the node's scratch), the
  // right half into the first scratch row (with the rest), then acc += that row.
  std::array<RowsNode<R>, max_sum_streams> left, right;
  for (std::size_t i = 0; i < count; ++i) {
    const RowsNode<R>& n = nodes[i];
    const std::int64_t half = n.rows / 2;
    left[i] = {n.x, half, n.acc, n.scratch};
    right[i] = {n.x + half * ld, n.rows - half, n.scratch, n.scratch + cols};
  }
  accumulate_nodes<R>(left.data(), count, cols, ld);
  accumulate_nodes<R>(right.data(), count, cols, ld);
  for (std::size_t i = 0; i < count; ++i)
    for (std::int64_t k = 0; k < cols; ++k)
      nodes[i].acc[k] = R::combine(nodes[i].acc[k], nodes[i].scratch[k]);
}

/// acc[k] = reduction over r of x[r * ld + k] (k < cols <= ld), for rows >= 1, pairwise over
/// row blocks, one block after another. scratch holds pairwise_depth(rows) * cols accumulators.
template <class R>
void accumulate_pairwise(const typename R::In* x, std::int64_t rows, std::int64_t cols,
                         std::int64_t ld, typename R::Acc* acc, typename R::Acc* scratch) {
  if (rows > kPairwiseRows) {
    const std::int64_t half = rows / 2;
    accumulate_pairwise<R>(x, half, cols, ld, acc, scratch);
    accumulate_pairwise<R>(x + half * ld, rows - half, cols, ld, scratch, scratch + cols);
    for (std::int64_t k = 0; k < cols; ++k) acc[k] = R::combine(acc[k], scratch[k]);
    return;
  }
  if constexpr (IsFloatSum<R>::value) {
    const RowsNode<R> leaf{x, rows, acc, scratch};
    accumulate_nodes<R>(&leaf, 1, cols, ld);
    return;
  }
  for (std::int64_t k = 0; k < cols; ++k) acc[k] = R::load(x[k]);
  for (std::int64_t r = 1; r < rows; ++r) {
    const typename R::In* row = x + r * ld;
    for (std::int64_t k = 0; k < cols; ++k) acc[k] = R::combine(acc[k], R::load(row[k]));
  }
}

/// acc[k] = reduction over r of x[r * ld + k] (k < cols <= ld), for rows >= 1; pairwise over
/// row blocks. scratch holds accumulate_depth<R>(rows, cols) * cols accumulators. A float sum
/// of more than kQuarteredRows short rows reads its four quarters together (accumulate_nodes),
/// with the same bits: the sum of an f32[16M] on two threads of the Xeon went from 0.56-1.17 of
/// kiln_bench_bandwidth's read pass to 1.12-1.24 (three interleaved pairs; docs/performance.md).
template <class R>
void accumulate_rows(const typename R::In* x, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                     typename R::Acc* acc, typename R::Acc* scratch) {
  if constexpr (IsFloatSum<R>::value) {
    if (reads_quarters<R>(rows, cols)) {
      // The quarters' sums (the first's into acc, the others' in scratch rows 0-2: the
      // recursion would reuse one row for the second's and third's) and each quarter's own
      // recursion scratch after them.
      const std::array<std::int64_t, 4> quarter = quarter_rows(rows);
      const std::int64_t depth = pairwise_depth(quarter[3]);
      std::array<RowsNode<R>, 4> nodes;
      const typename R::In* at = x;
      for (std::size_t i = 0; i < 4; ++i) {
        typename R::Acc* sums = i == 0 ? acc : scratch + (i - 1) * cols;
        nodes[i] = {at, quarter[i], sums,
                    scratch + (3 + static_cast<std::int64_t>(i) * depth) * cols};
        at += quarter[i] * ld;
      }
      accumulate_nodes<R>(nodes.data(), 4, cols, ld);
      // (q0 + q1) + (q2 + q3), as the recursion combines them.
      for (std::int64_t k = 0; k < cols; ++k) {
        acc[k] = R::combine(acc[k], scratch[k]);
        scratch[cols + k] = R::combine(scratch[cols + k], scratch[2 * cols + k]);
        acc[k] = R::combine(acc[k], scratch[cols + k]);
      }
      return;
    }
  }
  accumulate_pairwise<R>(x, rows, cols, ld, acc, scratch);
}

/// Below this many input elements a reduction runs on the calling thread.
constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 18;

/// acc[k] as accumulate_rows computes it, with the top levels of its pairwise split run on
/// several threads: the split cuts the rows into 2^levels leaves at the boundaries the serial
/// recursion uses, each leaf is accumulated on its own, and the leaves are combined in the
/// serial order (left then right, bottom up), so the result has the serial bits for any
/// thread count. Runs accumulate_rows itself when the rows are too few to split at all.
template <class R>
void accumulate_rows_split(const typename R::In* x, std::int64_t rows, std::int64_t cols,
                           std::int64_t ld, typename R::Acc* acc) {
  using Acc = typename R::Acc;
  int levels = 0;
  // Four leaves per thread, claimed one by one (parallel_for_balanced): a thread that gets its
  // core late leaves its leaves to the others.
  while ((1 << levels) < 4 * num_threads() && levels < 8) ++levels;
  // Every node above the leaves must split as the serial recursion does (rows > kPairwiseRows).
  while (levels > 0 && (rows >> levels) <= kPairwiseRows + 1) --levels;
  if (levels == 0 || rows * cols < kParallelMinElements) {
    std::vector<Acc> scratch(static_cast<std::size_t>(accumulate_depth<R>(rows, cols) * cols));
    accumulate_rows<R>(x, rows, cols, ld, acc, scratch.data());
    return;
  }
  const std::size_t leaves = std::size_t{1} << levels;
  std::vector<std::int64_t> first(leaves + 1);
  // Leaf boundaries of the serial split: a node of n rows keeps n / 2 on the left.
  const auto cut = [&](auto&& self, std::size_t leaf, std::size_t count, std::int64_t begin,
                       std::int64_t n) -> void {
    if (count == 1) {
      first[leaf] = begin;
      return;
    }
    self(self, leaf, count / 2, begin, n / 2);
    self(self, leaf + count / 2, count / 2, begin + n / 2, n - n / 2);
  };
  cut(cut, 0, leaves, 0, rows);
  first[leaves] = rows;
  std::vector<Acc> partial(leaves * static_cast<std::size_t>(cols));
  parallel_for_balanced(
      static_cast<std::int64_t>(leaves), 1, [&](std::int64_t begin, std::int64_t end) {
        for (auto leaf = static_cast<std::size_t>(begin); leaf < static_cast<std::size_t>(end);
             ++leaf) {
          const std::int64_t n = first[leaf + 1] - first[leaf];
          std::vector<Acc> scratch(static_cast<std::size_t>(accumulate_depth<R>(n, cols) * cols));
          accumulate_rows<R>(x + first[leaf] * ld, n, cols, ld,
                             partial.data() + leaf * static_cast<std::size_t>(cols),
                             scratch.data());
        }
      });
  for (std::size_t width = 1; width < leaves; width *= 2)
    for (std::size_t leaf = 0; leaf < leaves; leaf += 2 * width) {
      Acc* left = partial.data() + leaf * static_cast<std::size_t>(cols);
      const Acc* right = left + width * static_cast<std::size_t>(cols);
      for (std::int64_t k = 0; k < cols; ++k) left[k] = R::combine(left[k], right[k]);
    }
  for (std::int64_t k = 0; k < cols; ++k) acc[k] = partial[static_cast<std::size_t>(k)];
}

/// Scratch accumulators reduce_contiguous needs for rows of up to n elements.
template <class R>
std::int64_t contiguous_scratch_size(std::int64_t n) {
  return kRowWidth * (1 + accumulate_depth<R>(n / kRowWidth, kRowWidth));
}

/// Folds the kRowWidth lanes of a contiguous reduction and adds the tail x[rows * kRowWidth, n).
template <class R>
typename R::Acc finish_contiguous(const typename R::In* x, std::int64_t n, typename R::Acc* lanes) {
  typename R::Acc total = R::identity();
  const std::int64_t rows = n / kRowWidth;
  if (rows > 0) {
    for (std::int64_t width = kRowWidth / 2; width > 0; width /= 2)
      for (std::int64_t j = 0; j < width; ++j) lanes[j] = R::combine(lanes[j], lanes[j + width]);
    total = lanes[0];
  }
  for (std::int64_t i = rows * kRowWidth; i < n; ++i) total = R::combine(total, R::load(x[i]));
  return total;
}

/// Reduces x[0..n) (n >= 0); scratch holds contiguous_scratch_size<R>(n) accumulators.
template <class R>
typename R::Acc reduce_contiguous(const typename R::In* x, std::int64_t n,
                                  typename R::Acc* scratch) {
  const std::int64_t rows = n / kRowWidth;
  if (rows > 0) accumulate_rows<R>(x, rows, kRowWidth, kRowWidth, scratch, scratch + kRowWidth);
  return finish_contiguous<R>(x, n, scratch);
}

/// reduce_contiguous with the pairwise split over threads (accumulate_rows_split): the same bits.
template <class R>
typename R::Acc reduce_contiguous_split(const typename R::In* x, std::int64_t n) {
  typename R::Acc lanes[kRowWidth];
  const std::int64_t rows = n / kRowWidth;
  if (rows > 0) accumulate_rows_split<R>(x, rows, kRowWidth, kRowWidth, lanes);
  return finish_contiguous<R>(x, n, lanes);
}

/// The input dims with size-1 dims dropped and neighbours of the same kind (reduced or
/// kept) merged; valid because the input is contiguous.
struct DimGroups {
  std::size_t count = 0;
  std::array<std::int64_t, Shape::max_rank> extent{};
  std::array<bool, Shape::max_rank> reduced{};
};

DimGroups group_dims(const Shape& shape, const std::array<bool, Shape::max_rank>& is_reduced) {
  DimGroups g;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (g.count > 0 && g.reduced[g.count - 1] == is_reduced[d]) {
      g.extent[g.count - 1] *= shape[d];
    } else {
      g.extent[g.count] = shape[d];
      g.reduced[g.count] = is_reduced[d];
      ++g.count;
    }
  }
  return g;
}

/// Reducer R applied as one stage of a reduction over several separate groups of axes:
/// it reads input elements (kFirst) or partial accumulators, and writes output elements
/// (kLast) or partial accumulators.
template <class R, bool kFirst, bool kLast>
struct Stage {
  using In = std::conditional_t<kFirst, typename R::In, typename R::Acc>;
  using Acc = typename R::Acc;
  using Out = std::conditional_t<kLast, typename R::Out, Acc>;
  static Acc identity() { return R::identity(); }
  static Acc load(In v) {
    if constexpr (kFirst) {
      return R::load(v);
    } else {
      return v;
    }
  }
  static Acc combine(Acc a, Acc b) { return R::combine(a, b); }
  static Out store(Acc a) {
    if constexpr (kLast) {
      return R::store(a);
    } else {
      return a;
    }
  }
};
template <class R, bool kFirst, bool kLast>
struct IsFloatSum<Stage<R, kFirst, kLast>> : IsFloatSum<R> {};

/// Where reduce_middle_axis finds its elements: [outer, rows, inner] with inner contiguous,
/// `row` elements between consecutive rows and `outer` between consecutive outer blocks (a
/// contiguous array: inner and rows * inner).
struct MiddleStrides {
  std::int64_t outer = 0, row = 0;
};

/// Reduces the middle axis of an [outer, rows, inner] array (rows >= 1; `st` says where its
/// elements are, row-major contiguous when st is {}) into out[outer, inner]: contiguous rows
/// when inner == 1, else whole rows accumulated.
template <class R>
void reduce_middle_axis(const typename R::In* x, std::int64_t outer, std::int64_t rows,
                        std::int64_t inner, typename R::Out* out, MiddleStrides st = {}) {
  using Acc = typename R::Acc;
  if (st.row == 0) st = {rows * inner, inner};
  // (Inside a parallel region, work stays on its thread: the split below would recurse.)
  const bool parallel =
      outer * rows * inner >= kParallelMinElements && num_threads() > 1 && !inside_parallel_region;
  // Many independent outputs: split them over the threads (each is reduced as on one thread).
  if (parallel && outer >= 2 * num_threads()) {
    parallel_for_balanced(outer, 1, [&](std::int64_t begin, std::int64_t end) {
      reduce_middle_axis<R>(x + begin * st.outer, end - begin, rows, inner, out + begin * inner,
                            st);
    });
    return;
  }
  if (inner == 1) {  // (then st.row is 1: only whole rows are strided)
    if (parallel) {
      for (std::int64_t o = 0; o < outer; ++o)
        out[o] = R::store(reduce_contiguous_split<R>(x + o * st.outer, rows));
      return;
    }
    std::vector<Acc> scratch(static_cast<std::size_t>(contiguous_scratch_size<R>(rows)));
    for (std::int64_t o = 0; o < outer; ++o)
      out[o] = R::store(reduce_contiguous<R>(x + o * st.outer, rows, scratch.data()));
    return;
  }
  std::vector<Acc> acc(static_cast<std::size_t>(inner));
  std::vector<Acc> scratch(static_cast<std::size_t>(accumulate_depth<R>(rows, inner) * inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    if (parallel)
      accumulate_rows_split<R>(x + o * st.outer, rows, inner, st.row, acc.data());
    else
      accumulate_rows<R>(x + o * st.outer, rows, inner, st.row, acc.data(), scratch.data());
    typename R::Out* dst = out + o * inner;
    for (std::int64_t k = 0; k < inner; ++k) dst[k] = R::store(acc[k]);
  }
}

/// The innermost reduced group of g seen as the middle axis of [outer, rows, inner] (with
/// no reduced group, everything is inner), and how many reduced groups g has.
struct MiddleAxis {
  std::int64_t outer = 1, rows = 1, inner = 1;
  std::size_t group = 0;
  std::size_t reduced_groups = 0;
};

MiddleAxis innermost_reduced(const DimGroups& g) {
  MiddleAxis m;
  for (std::size_t i = 0; i < g.count; ++i)
    if (g.reduced[i]) {
      ++m.reduced_groups;
      m.group = i;
    }
  for (std::size_t i = 0; i < g.count; ++i) {
    if (m.reduced_groups == 0 || i > m.group)
      m.inner *= g.extent[i];
    else if (i < m.group)
      m.outer *= g.extent[i];
    else
      m.rows = g.extent[i];
  }
  return m;
}

/// Removes reduced group `at`; the kept groups on either side become one.
void remove_group(DimGroups& g, std::size_t at) {
  std::size_t removed = 1;
  if (at > 0 && at + 1 < g.count) {
    g.extent[at - 1] *= g.extent[at + 1];
    removed = 2;
  }
  for (std::size_t i = at; i + removed < g.count; ++i) {
    g.extent[i] = g.extent[i + removed];
    g.reduced[i] = g.reduced[i + removed];
  }
  g.count -= removed;
}

/// A non-contiguous input that reduce_typed reads in place: rows of `cols` contiguous elements
/// `ld` apart (a slice of a wider array's last dims, such as a bias gradient's columns of a
/// fused kernel's output), reduced over all rows (kept columns: inner) or over all columns
/// (kept rows: outer). The same reduction, in the same order, as on a contiguous copy.
struct StridedRows {
  std::int64_t rows = 0, cols = 0, ld = 0;
  bool over_rows = false;
};

std::optional<StridedRows> strided_rows(const ArrayRef& x, const Shape& axes) {
  std::array<bool, Shape::max_rank> is_reduced{};
  for (auto axis : axes) is_reduced[static_cast<std::size_t>(axis)] = true;
  // The dims of more than one element, innermost first.
  struct Dim {
    std::int64_t extent, stride;
    bool reduced;
  };
  std::array<Dim, Shape::max_rank> dims{};
  std::size_t n = 0;
  for (std::size_t d = x.shape.size(); d-- > 0;)
    if (x.shape[d] != 1) dims[n++] = {x.shape[d], x.strides[d], is_reduced[d]};
  if (n < 2 || dims[0].stride != 1) return std::nullopt;
  // The inner block: dims contiguous from the innermost out, all reduced or all kept.
  std::size_t k = 1;
  std::int64_t cols = dims[0].extent;
  while (k < n && dims[k].stride == cols && dims[k].reduced == dims[0].reduced)
    cols *= dims[k++].extent;
  if (k == n) return std::nullopt;  // contiguous: the general path
  // The outer block: row-major over rows `ld` apart, with the other kind of dims.
  const std::int64_t ld = dims[k].stride;
  if (ld < cols || dims[k].reduced == dims[0].reduced) return std::nullopt;
  std::int64_t rows = dims[k].extent;
  for (std::size_t i = k + 1; i < n; ++i) {
    if (dims[i].stride != ld * rows || dims[i].reduced != dims[k].reduced) return std::nullopt;
    rows *= dims[i].extent;
  }
  return StridedRows{rows, cols, ld, dims[k].reduced};
}

template <class R>
void reduce_typed(const KernelCall& call) {
  using Acc = typename R::Acc;
  const ArrayRef& in = call.inputs[0];
  const auto* x = in.ptr<const typename R::In>();
  auto* out = call.out.ptr<typename R::Out>();
  const std::int64_t out_count = call.out.numel();
  if (out_count == 0) return;
  if (in.numel() == 0) {
    for (std::int64_t i = 0; i < out_count; ++i) out[i] = R::store(R::identity());
    return;
  }

  if (!is_contiguous_layout(in.shape, in.strides)) {  // reduce_reads_in_place said yes
    const std::optional<StridedRows> sr = strided_rows(in, call.attrs.axes);
    if (!sr) fail(name(call.prim), "cannot read this input layout in place");
    if (sr->over_rows)  // [1, rows, cols]: rows ld apart
      reduce_middle_axis<Stage<R, true, true>>(x, 1, sr->rows, sr->cols, out,
                                               {sr->rows * sr->ld, sr->ld});
    else  // [rows, cols, 1]: each row reduced, rows ld apart
      reduce_middle_axis<Stage<R, true, true>>(x, sr->rows, sr->cols, 1, out, {sr->ld, 1});
    return;
  }
  std::array<bool, Shape::max_rank> is_reduced{};
  for (auto axis : call.attrs.axes) is_reduced[static_cast<std::size_t>(axis)] = true;
  DimGroups g = group_dims(in.shape, is_reduced);
  MiddleAxis m = innermost_reduced(g);
  if (m.reduced_groups <= 1) {
    reduce_middle_axis<Stage<R, true, true>>(x, m.outer, m.rows, m.inner, out);
    return;
  }
  // Separate groups of reduced axes: reduce the innermost group into partial accumulators,
  // then the next one, and so on, so every stage reads contiguous rows.
  std::vector<Acc> partial(static_cast<std::size_t>(m.outer * m.inner)), next;
  reduce_middle_axis<Stage<R, true, false>>(x, m.outer, m.rows, m.inner, partial.data());
  while (true) {
    remove_group(g, m.group);
    m = innermost_reduced(g);
    if (m.reduced_groups == 1) break;
    next.resize(static_cast<std::size_t>(m.outer * m.inner));
    reduce_middle_axis<Stage<R, false, false>>(partial.data(), m.outer, m.rows, m.inner,
                                               next.data());
    partial.swap(next);
  }
  reduce_middle_axis<Stage<R, false, true>>(partial.data(), m.outer, m.rows, m.inner, out);
}

/// run(begin, end) over rows [0, rows) of n elements: split between the threads when the work is
/// large enough, else on this one.
template <class Run>
void run_row_ranges(std::int64_t rows, std::int64_t n, Run&& run) {
  if (rows * n >= kParallelMinElements && rows >= 2 && !inside_parallel_region)
    parallel_for_balanced(rows, 1, run);
  else
    run(0, rows);
}

/// Runs row(in_row, out_row, next_in_row, next_out_row) for each of `rows` contiguous rows of n
/// elements of x, writing n elements per row to y (next_in_row: the next row this thread runs, or
/// null; next_out_row: where it writes next, or null when that is this thread's scratch row, or
/// there is no next row).
/// Rows are split over the threads. A large output of whole rows is written with non-temporal
/// stores: each row is computed in this thread's scratch (in L1) and then streamed out.
template <class T, class Row>
void for_each_row(const T* x, T* y, std::int64_t rows, std::int64_t n, const Row& row) {
  if (rows == 0) return;
  const StreamCopyFn stream_copy = elementwise_rows().stream_copy;
  const bool stream = rows * n * static_cast<std::int64_t>(sizeof(T)) > stream_output_bytes();
  auto run_rows = [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> row_out(stream ? static_cast<std::size_t>(n) : 0);
    for (std::int64_t r = begin; r < end; ++r) {
      const T* next = r + 1 < end ? x + (r + 1) * n : nullptr;
      if (!stream) {
        row(x + r * n, y + r * n, next, r + 1 < end ? y + (r + 1) * n : nullptr);
        continue;
      }
      row(x + r * n, row_out.data(), next, nullptr);
      stream_copy(y + r * n, row_out.data(), n * static_cast<std::int64_t>(sizeof(T)));
    }
#if defined(__SSE2__)
    if (stream) _mm_sfence();  // this thread's streamed rows, before the result is published
#endif
  };
  run_row_ranges(rows, n, run_rows);
}

/// Prim::softmax, Prim::log_softmax and Prim::logsumexp over contiguous rows of
/// n = in.shape[axes[0]] elements (every later dim is 1): each row by the row table's
/// softmax_row (max, exp and its sum, the product by the sum's reciprocal) or log_softmax_row
/// (max, the sum of the exps, x - max minus the sum's log), asking for the next row as it goes;
/// each thread's rows by logsumexp_rows (one value per row: the max plus that log).
template <class T>
void softmax_typed(const KernelCall& call) {
  const ArrayRef& in = call.inputs[0];
  const std::int64_t n = in.shape[static_cast<std::size_t>(call.attrs.axes[0])];
  const std::int64_t rows = n == 0 ? 0 : in.numel() / n;
  const ElementwiseRowTable& table = elementwise_rows();
  const std::size_t d = dtype_index(in.dtype);
  if (call.prim == Prim::logsumexp) {
    if (rows == 0) return;
    const LogSumExpRowsFn logsumexp_rows = table.logsumexp_rows[d];
    const T* x = in.ptr<const T>();
    T* y = call.out.ptr<T>();
    run_row_ranges(rows, n, [&](std::int64_t begin, std::int64_t end) {
      logsumexp_rows(x + begin * n, y + begin, end - begin, n);
    });
    return;
  }
  const SoftmaxRowFn softmax_row =
      call.prim == Prim::log_softmax ? table.log_softmax_row[d] : table.softmax_row[d];
  for_each_row(
      in.ptr<const T>(), call.out.ptr<T>(), rows, n,
      [&](const T* x, T* y, const T* next, T* next_out) { softmax_row(x, y, n, next, next_out); });
}

/// Prim::layer_norm and Prim::rms_norm over the contiguous rows in.shape[axes[0]:]: each row by
/// the row table's layer_norm_row or rms_norm_row with the gamma and beta rows the call has
/// (attrs.ints says which), asking for the next row as it goes.
template <class T>
void normalize_typed(const KernelCall& call) {
  const ArrayRef& in = call.inputs[0];
  std::int64_t n = 1;
  for (std::size_t a = static_cast<std::size_t>(call.attrs.axes[0]); a < in.shape.size(); ++a)
    n *= in.shape[a];
  const std::int64_t rows = n == 0 ? 0 : in.numel() / n;
  const ElementwiseRowTable& table = elementwise_rows();
  const std::size_t d = dtype_index(in.dtype);
  const NormalizeRowFn normalize_row =
      call.prim == Prim::layer_norm ? table.layer_norm_row[d] : table.rms_norm_row[d];
  const auto row_of = [&](int input) -> const T* {
    if (input < 0) return nullptr;
    const auto i = static_cast<std::size_t>(input);
    if (i >= call.inputs.size() || call.inputs[i].numel() != n)
      fail(name(call.prim), "internal: the call's inputs do not match its attributes");
    return call.inputs[i].ptr<const T>();
  };
  const NormalizeInputs at = normalize_inputs(call.attrs);
  const T* gamma = row_of(at.gamma);
  const T* beta = row_of(at.beta);
  const double epsilon = call.attrs.value;
  for_each_row(in.ptr<const T>(), call.out.ptr<T>(), rows, n,
               [&](const T* x, T* y, const T* next, T*) {
                 normalize_row(x, gamma, beta, y, n, epsilon, next);
               });
}

}  // namespace

bool reduce_reads_in_place(Prim p, const ArrayRef& x, const Attrs& attrs) {
  switch (p) {
    case Prim::reduce_sum:
    case Prim::reduce_prod:
    case Prim::reduce_max:
    case Prim::reduce_min:
    case Prim::reduce_all:
    case Prim::reduce_any:
      return strided_rows(x, attrs.axes).has_value();
    default:
      return false;
  }
}

void run_reduce(const KernelCall& call) {
  if (call.prim == Prim::argmax || call.prim == Prim::argmin) {
    run_arg_extremum(call);
    return;
  }
  const DType dtype = call.inputs[0].dtype;
  const bool empty_extent = call.inputs[0].numel() == 0 && call.out.numel() > 0;
  switch (call.prim) {
    case Prim::reduce_sum:
    case Prim::reduce_prod:
      if (dtype == DType::boolean) fail(name(call.prim), "bool input is not supported");
      break;
    case Prim::reduce_max:
    case Prim::reduce_min:
      if (empty_extent) fail(name(call.prim), "reduction over a zero-size extent has no identity");
      break;
    default:
      break;
  }
  visit_compute_type(dtype, name(call.prim).data(), [&](auto tag) {
    using T = decltype(tag);
    switch (call.prim) {
      case Prim::reduce_sum:
        if constexpr (!std::is_same_v<T, std::uint8_t>) reduce_typed<SumReducer<T>>(call);
        break;
      case Prim::reduce_prod:
        if constexpr (!std::is_same_v<T, std::uint8_t>) reduce_typed<ProdReducer<T>>(call);
        break;
      case Prim::reduce_max:
        reduce_typed<ExtremumReducer<T, true>>(call);
        break;
      case Prim::reduce_min:
        reduce_typed<ExtremumReducer<T, false>>(call);
        break;
      case Prim::reduce_all:
        reduce_typed<LogicalReducer<T, true>>(call);
        break;
      case Prim::reduce_any:
        reduce_typed<LogicalReducer<T, false>>(call);
        break;
      case Prim::softmax:
      case Prim::log_softmax:
      case Prim::logsumexp:
        if constexpr (std::is_floating_point_v<T>) softmax_typed<T>(call);
        break;
      case Prim::layer_norm:
      case Prim::rms_norm:
        if constexpr (std::is_floating_point_v<T>) normalize_typed<T>(call);
        break;
      case Prim::dim_size: {
        std::int64_t count = 1;
        for (auto a : call.attrs.axes) count *= call.inputs[0].shape[static_cast<std::size_t>(a)];
        *static_cast<T*>(call.out.data) = static_cast<T>(count);
        break;
      }
      default:
        fail(name(call.prim), "is not a reduction primitive");
    }
  });
}

}  // namespace kiln::detail

// argmax and argmin over one axis (Prim::argmax, Prim::argmin; run by run_reduce): the index of
// each line's extremum, NaN winning, the first or (attrs.ints {1}) the last of equal ones. The
// contract is stated with the front ends in lib/ops/reduce.cpp.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "kernels/arg_extremum_order.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"

namespace kiln::detail {

namespace {

/// Below this many input elements the lines run on the calling thread (as reductions do).
constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 18;

/// Elements of T in a 16-byte vector, for the vector loops (0: T is not 4 or 8 bytes,
/// bool's storage, which takes the one-pass loop).
template <class T>
constexpr std::int64_t lanes_of() {
  return sizeof(T) == 4 || sizeof(T) == 8 ? 16 / static_cast<std::int64_t>(sizeof(T)) : 0;
}

/// The row kernel of the row table for T (elements of 4 or 8 bytes: two passes in vectors of
/// the instruction set's width, kernels/arg_extremum_rows_arch.hpp), or null for other element
/// types, which take the one-pass loop.
template <class T, bool kMax, bool kLast>
ArgExtremumRowFn arg_extremum_row_kernel() {
  if constexpr (lanes_of<T>() == 0) {
    return nullptr;
  } else {
    return elementwise_rows().arg_extremum_row[dtype_index(dtype_of<T>())][kMax][kLast];
  }
}

/// How many whole vectors of a block of `count` columns column_extrema takes: none for other
/// element sizes, or where an index (as wide as T) could overflow.
template <class T>
std::int64_t column_vectors(std::int64_t count, std::int64_t n) {
  constexpr std::int64_t lanes = lanes_of<T>();
  if constexpr (lanes == 0) {
    return 0;
  } else {
    if (sizeof(T) == 4 && n > std::int64_t{INT32_MAX}) return 0;
    return count / lanes;
  }
}

/// replaces<> over `vectors` vectors of adjacent columns at once, walked down the n rows (inner
/// apart) in order: best[] and best_at[] get each column's extremum and its row, as the scalar
/// loop leaves them. GCC's vector extension, baseline SSE2 code; the rows' indices are kept in
/// lanes as wide as T and widened at the end.
template <class T, bool kMax, bool kLast>
void column_extrema(const T* block, std::int64_t inner, std::int64_t n, std::int64_t vectors,
                    T* best, std::int64_t* best_at) {
  if constexpr (lanes_of<T>() > 0) {
    constexpr std::int64_t lanes = lanes_of<T>();
    using Index = std::conditional_t<sizeof(T) == 8, std::int64_t, std::int32_t>;
    typedef T V __attribute__((vector_size(16)));
    typedef Index I __attribute__((vector_size(16)));
    // The running extrema and their rows, column by column (in L1 for a block's columns);
    // vectors are copied in and out (GCC makes the copies single unaligned moves).
    std::vector<Index> at(static_cast<std::size_t>(vectors * lanes), 0);
    std::memcpy(best, block, static_cast<std::size_t>(vectors * lanes) * sizeof(T));
    for (std::int64_t r = 1; r < n; ++r) {
      const T* row = block + r * inner;
      const I here = I{} + static_cast<Index>(r);
      for (std::int64_t c = 0; c < vectors * lanes; c += lanes) {
        V v, m;
        I a;
        std::memcpy(&v, row + c, sizeof(V));
        std::memcpy(&m, best + c, sizeof(V));
        std::memcpy(&a, at.data() + c, sizeof(I));
        const I v_nan = v != v, m_nan = m != m;
        I beats;
        if constexpr (kMax)
          beats = kLast ? v >= m : v > m;
        else
          beats = kLast ? v <= m : v < m;
        // NaN wins and stays (with kLast a later NaN replaces it); a compare with NaN is false.
        const I wins =
            kLast ? (m_nan & v_nan) | (~m_nan & (v_nan | beats)) : ~m_nan & (v_nan | beats);
        m = wins ? v : m;
        a = wins ? here : a;
        std::memcpy(best + c, &m, sizeof(V));
        std::memcpy(at.data() + c, &a, sizeof(I));
      }
    }
    for (std::int64_t c = 0; c < vectors * lanes; ++c) best_at[c] = at[static_cast<std::size_t>(c)];
  }
}

/// argmax or argmin along one axis (lines of n elements inner apart), shared out over the
/// threads by output rows (inner == 1) or by blocks of outputs.
template <class T, bool kMax, bool kLast>
void arg_extremum_lines(const KernelCall& call) {
  const ArrayRef& in = call.inputs[0];
  const auto axis = static_cast<std::size_t>(call.attrs.axes[0]);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= in.shape[d];
  for (std::size_t d = axis + 1; d < in.shape.size(); ++d) inner *= in.shape[d];
  const std::int64_t n = in.shape[axis];
  if (call.out.numel() == 0) return;
  if (n == 0) fail(name(call.prim), "reduction over zero-size axis {} of shape {}", axis, in.shape);

  const T* x = in.ptr<const T>();
  auto* out = call.out.ptr<std::int64_t>();
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelMinElements / n);
  if (inner == 1) {
    const ArgExtremumRowFn row = arg_extremum_row_kernel<T, kMax, kLast>();
    parallel_for(outer, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o)
        out[o] = row != nullptr ? row(x + o * n, n)
                                : one_pass_arg_extremum<T, kMax, kLast>(x + o * n, n);
    });
    return;
  }
  // Lines inner apart: each item is a block of adjacent outputs, whose lines are walked
  // together row by row (so the reads stream through memory in order). A whole line of outputs
  // is one block when there are lines enough for the threads; else the lines are cut into
  // column blocks, a few per thread and at least 64 columns wide.
  const std::int64_t per_outer =
      outer >= num_threads() ? 1
                             : std::min((inner + 63) / 64, (2 * num_threads() + outer - 1) / outer);
  const std::int64_t columns = (inner + per_outer - 1) / per_outer;
  parallel_for(outer * per_outer, std::max<std::int64_t>(1, grain / columns),
               [&](std::int64_t begin, std::int64_t end) {
                 std::vector<T> best(static_cast<std::size_t>(columns));
                 for (std::int64_t b = begin; b < end; ++b) {
                   const std::int64_t o = b / per_outer;
                   const std::int64_t first = (b % per_outer) * columns;
                   const std::int64_t count = std::min(columns, inner - first);
                   const T* block = x + o * n * inner + first;
                   std::int64_t* best_at = out + o * inner + first;
                   // Whole vectors of columns in column_extrema, the rest one by one.
                   const std::int64_t vectors = column_vectors<T>(count, n);
                   const std::int64_t rest = vectors * lanes_of<T>();
                   if (vectors > 0)
                     column_extrema<T, kMax, kLast>(block, inner, n, vectors, best.data(), best_at);
                   for (std::int64_t k = rest; k < count; ++k) {
                     best[static_cast<std::size_t>(k)] = block[k];
                     best_at[k] = 0;
                   }
                   for (std::int64_t r = 1; r < n; ++r) {
                     const T* row = block + r * inner;
                     for (std::int64_t k = rest; k < count; ++k) {
                       if (replaces<T, kMax, kLast>(row[k], best[static_cast<std::size_t>(k)])) {
                         best[static_cast<std::size_t>(k)] = row[k];
                         best_at[k] = r;
                       }
                     }
                   }
                 }
               });
}

/// argmax or argmin; attrs.ints {1} asks for the last extremum.
template <class T, bool kMax>
void arg_extremum_typed(const KernelCall& call) {
  if (!call.attrs.ints.empty() && call.attrs.ints[0] == 1)
    arg_extremum_lines<T, kMax, true>(call);
  else
    arg_extremum_lines<T, kMax, false>(call);
}

}  // namespace

void run_arg_extremum(const KernelCall& call) {
  visit_compute_type(call.inputs[0].dtype, name(call.prim).data(), [&](auto tag) {
    using T = decltype(tag);
    if (call.prim == Prim::argmax)
      arg_extremum_typed<T, true>(call);
    else
      arg_extremum_typed<T, false>(call);
  });
}

}  // namespace kiln::detail

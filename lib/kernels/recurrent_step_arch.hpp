#pragma once
// The per-instruction-set pieces of a fused recurrent step (kernels/recurrent.cpp) for one xsimd
// architecture: the gate panel (GatePanelFn), the fused LSTM panel (LstmPanelFn: the product and
// the cell in one pass, AVX-512 only) and the LSTM and GRU cells' rows (LstmCellFn, GruCellFn).
// Included only by elementwise_arch.hpp, after elementwise_ops_arch.hpp; the same one-definition
// rules apply (everything here is in an anonymous namespace).
//
// A recurrent step's product z = x_t W_x + b + h_{t-1} W over a run of `panel width` gate
// columns, for every batch row: the columns' weights are packed (per call, or once in a compiled
// forward) into a panel
// [K][width] (kernels/recurrent_parts.hpp), and the product runs in tiles of several rows by two
// vectors whose accumulators stay in registers over all K. Per multiply-add step a tile
// loads the panel's two vectors and broadcasts one element of h per row: no packing of h, none
// of the weights per step (the libraries pack both on every call, 7-9% of an LSTM(256) forward
// on the Zen 3 in a profile). x_t W_x is either summed in the same registers (the panel holds
// W_x's rows ahead of W's, and the tile broadcasts x_t's elements first: the LSTM's forward) or
// read from a projection of every step made ahead, added with b as the tile is stored. A fused
// LSTM panel is four vectors wide, one per gate of the same units, so its tile holds every gate
// of its units and runs the cell on its accumulators before storing h and c.

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/recurrent_step_arch.hpp"
#endif

#include <cstdint>
#include <type_traits>

#include "kernels/lstm_tile_sums_avx512.hpp"

namespace kiln::detail {

namespace {

/// Rows of a full tile. 6 rows of 2 vectors is 12 accumulators, with the 2 panel vectors and one
/// broadcast 15 of the 16 vector registers of SSE2 and AVX2. AVX-512 has 32: 8 rows (16
/// accumulators) read each panel vector for 8 rows rather than 6, and an LSTM(512)'s step product
/// (K 512, 1024 columns a core) ran at 154 GFLOP/s a core against 142 with 6 on the Xeon (12 rows:
/// 155, at the price of a 4-row tail for a batch of 64).
template <class Arch>
constexpr std::int64_t gate_tile_rows = std::is_same_v<Arch, xsimd::avx512f> ? 8 : 6;

/// acc[v][r] = the sums of PanelProductArgs for rows i + r, r < R, and the V vectors v of each
/// panel row (V vectors a row), each sum in order, one fused multiply-add per term where the
/// instruction set has them. Every 4 rows of k, the next 64-byte line of [ask, ask_end) is asked
/// for into L2 (addresses as integers: the last may pass the end). A fused LSTM tile with f32 on
/// AVX-512 (V = 4) runs kiln's assembly instead, which asks for two lines every 4 rows
/// (lstm_tile_sums_avx512).
template <class Arch, class T, int R, int V>
[[gnu::always_inline]] inline void panel_sums(xsimd::batch<T, Arch> (&acc)[V][R],
                                              const PanelProductArgs& g, std::int64_t i,
                                              std::uintptr_t ask, std::uintptr_t ask_end) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
#if defined(__x86_64__) && defined(__AVX512F__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512f> && std::is_same_v<T, float> && V == 4) {
    // A fused LSTM tile: the same sums, in kiln's assembly (kernels/lstm_tile_sums_avx512.hpp).
    alignas(64) float sums[R * V * width] = {};
    const auto* panel = static_cast<const float*>(g.b);
    if (g.k_in > 0)
      lstm_tile_sums_avx512<R>(sums, static_cast<const float*>(g.in) + i * g.ldin,
                               g.ldin * std::int64_t{sizeof(float)}, panel, g.k_in, ask, ask_end);
    if (g.k > 0)
      lstm_tile_sums_avx512<R>(sums, static_cast<const float*>(g.a) + i * g.lda,
                               g.lda * std::int64_t{sizeof(float)}, panel + g.k_in * V * width, g.k,
                               ask, ask_end);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[v][r] = B::load_aligned(sums + (r * V + v) * width);
    return;
  }
#endif
  for (int v = 0; v < V; ++v)
    for (int r = 0; r < R; ++r) acc[v][r] = B(T(0));
  const auto step = [&](const T* src, std::int64_t ld, const T* rows, std::int64_t p) {
    B b[V];
    for (int v = 0; v < V; ++v) b[v] = B::load_unaligned(rows + (p * V + v) * width);
    for (int r = 0; r < R; ++r) {
      const B ar(src[r * ld + p]);
      for (int v = 0; v < V; ++v) acc[v][r] = fused_multiply_add(ar, b[v], acc[v][r]);
    }
  };
  const auto accumulate = [&](const T* src, std::int64_t ld, std::int64_t count, const T* rows) {
    std::int64_t p = 0;
    for (; p + 4 <= count; p += 4) {
      if (ask < ask_end) {
        __builtin_prefetch(reinterpret_cast<const void*>(ask), 0, 2);
        ask += 64;
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) step(src, ld, rows, p + q);
    }
    for (; p < count; ++p) step(src, ld, rows, p);
  };
  const T* panel = static_cast<const T*>(g.b);
  if (g.k_in > 0) accumulate(static_cast<const T*>(g.in) + i * g.ldin, g.ldin, g.k_in, panel);
  if (g.k > 0)
    accumulate(static_cast<const T*>(g.a) + i * g.lda, g.lda, g.k, panel + g.k_in * V * width);
}

/// Rows [0, R) of a tile: c[r] = (x[r] + bias) + (sum_q in[r][q] panel[q] + sum_p a[r][p]
/// panel[k_in + p]) (panel_sums, 2 vectors); without x, c[r] = bias + the sums.
template <class Arch, class T, int R>
[[gnu::always_inline]] inline void gate_tile(const GatePanelArgs& g, std::int64_t i,
                                             std::uintptr_t ask, std::uintptr_t ask_end) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  B acc[2][R];
  panel_sums<Arch, T, R, 2>(acc, g, i, ask, ask_end);
  const T* x = g.x != nullptr ? static_cast<const T*>(g.x) + i * g.ldx : nullptr;
  T* c = static_cast<T*>(g.c) + i * g.ldc;
  const T* bias = static_cast<const T*>(g.bias);
  const B bias0 = B::load_unaligned(bias), bias1 = B::load_unaligned(bias + width);
  for (int r = 0; r < R; ++r) {
    T* cr = c + r * g.ldc;
    if (x == nullptr) {
      (bias0 + acc[0][r]).store_unaligned(cr);
      (bias1 + acc[1][r]).store_unaligned(cr + width);
      continue;
    }
    const T* xr = x + r * g.ldx;
    ((B::load_unaligned(xr) + bias0) + acc[0][r]).store_unaligned(cr);
    ((B::load_unaligned(xr + width) + bias1) + acc[1][r]).store_unaligned(cr + width);
  }
}

/// Calls rows(std::integral_constant<int, count>()) for count 1 to Max: a tile's row count as a
/// template argument.
template <int Max, class F>
[[gnu::always_inline]] inline void with_rows(std::int64_t count, F&& rows) {
  static_assert(Max >= 1 && Max <= 8);
  switch (count) {
    case 1:
      return rows(std::integral_constant<int, 1>());
    case 2:
      if constexpr (Max >= 2) return rows(std::integral_constant<int, 2>());
      break;
    case 3:
      if constexpr (Max >= 3) return rows(std::integral_constant<int, 3>());
      break;
    case 4:
      if constexpr (Max >= 4) return rows(std::integral_constant<int, 4>());
      break;
    case 5:
      if constexpr (Max >= 5) return rows(std::integral_constant<int, 5>());
      break;
    case 6:
      if constexpr (Max >= 6) return rows(std::integral_constant<int, 6>());
      break;
    case 7:
      if constexpr (Max >= 7) return rows(std::integral_constant<int, 7>());
      break;
    case 8:
      if constexpr (Max >= 8) return rows(std::integral_constant<int, 8>());
      break;
    default:
      break;
  }
}

/// Runs rows [0, total) in tiles of `tile` rows, calling run(first, count, ask, ask_end) for each
/// and ahead(first) before each full tile. Never a last tile of 1 to 4 rows after a full one (a
/// tile of r rows keeps r accumulators a vector of the panel, and it takes about 10 to cover the
/// latency of a fused multiply-add on two pipes: 2 rows of 2 vectors run at half the speed, 4 at
/// about four fifths): then the last full tile and those rows run as two tiles of about half
/// each (6 + 1 rows as 4 + 3, 6 + 4 as 5 + 5, so a batch of 64 is 9 tiles of 6 and 2 of 5; 8 + 2
/// as 5 + 5). The next panel, [next_b, next_b + next_b_bytes), is asked for into L2 in equal
/// slices, one per tile, a line every 4 of the tile's rows of k: a part's panels outgrow L2
/// (2.6 MiB for an LSTM(512) on two threads), and the first tile of each panel would otherwise
/// wait for it from the last-level cache.
template <std::int64_t tile, class Run, class Ahead>
[[gnu::always_inline]] inline void over_tiles(std::int64_t total, const void* next_b,
                                              std::int64_t next_b_bytes, Run&& run, Ahead&& ahead) {
  const std::int64_t rest = total % tile;
  const bool split_last = total > tile && rest >= 1 && rest <= 4;
  const std::int64_t full = total - rest - (split_last ? tile : 0);
  // The loops below run ceil(total / tile) tiles (a split replaces the last full tile and the
  // rest by two), at least one.
  const std::int64_t tiles = total > tile ? (total + tile - 1) / tile : 1;
  const std::uintptr_t first_line = reinterpret_cast<std::uintptr_t>(next_b);
  const std::uintptr_t end =
      first_line + (next_b != nullptr ? static_cast<std::uintptr_t>(next_b_bytes) : 0);
  const std::uintptr_t lines = (end - first_line + 63) / 64;
  const auto tiles_u = static_cast<std::uintptr_t>(tiles);
  const std::uintptr_t slice = (lines + tiles_u - 1) / tiles_u * 64;  // bytes a tile asks for
  std::uintptr_t ask = first_line;  // the next line no tile has been given
  const auto rows = [&](std::int64_t first, std::int64_t count) {
    const std::uintptr_t to = end - ask < slice ? end : ask + slice;
    run(first, count, ask, to);
    ask = to;
  };
  std::int64_t i = 0;
  for (; i < full; i += tile) {
    ahead(i);
    rows(i, tile);
  }
  const std::int64_t left = total - i;  // 0 to tile + 4
  if (left > tile) {
    rows(i, (left + 1) / 2);
    i += (left + 1) / 2;
  }
  if (total > i) rows(i, total - i);
}

/// GatePanelFn: all g.rows rows in tiles (over_tiles). Where there is an x, the rows of it the
/// next tile adds are asked for while a tile computes (a projection made ahead is read from
/// memory: it is written a whole sequence ahead, by one GEMM over every step).
template <class Arch, class T>
void gate_panel(const GatePanelArgs& g) {
  constexpr std::int64_t tile = gate_tile_rows<Arch>;
  const T* x = static_cast<const T*>(g.x);
  const auto ask_for = [&](const T* rows, std::int64_t count) {
    for (std::int64_t r = 0; r < count; ++r) {
      __builtin_prefetch(rows + r * g.ldx, 0, 3);
      __builtin_prefetch(rows + r * g.ldx + 2 * xsimd::batch<T, Arch>::size - 1, 0, 3);
    }
  };
  const auto ahead = [&](std::int64_t i) {
    if (i + tile < g.rows) {
      if (x != nullptr)
        ask_for(x + (i + tile) * g.ldx, g.rows - i - tile < tile ? g.rows - i - tile : tile);
    } else if (g.next_x != nullptr) {
      ask_for(static_cast<const T*>(g.next_x), g.rows < tile ? g.rows : tile);
    }
  };
  over_tiles<tile>(
      g.rows, g.next_b, g.next_b_bytes,
      [&](std::int64_t first, std::int64_t count, std::uintptr_t ask, std::uintptr_t to) {
        with_rows<static_cast<int>(tile)>(count, [&](auto rows) {
          gate_tile<Arch, T, decltype(rows)::value>(g, first, ask, to);
        });
      },
      ahead);
}

/// Stores a, b, c and d at out and the next three blocks, `stride` elements apart (a cell's
/// saved activations).
template <class B, class T>
[[gnu::always_inline]] inline void store_blocks(const B& a, const B& b, const B& c, const B& d,
                                                T* out, std::int64_t stride) {
  a.store_unaligned(out);
  b.store_unaligned(out + stride);
  c.store_unaligned(out + 2 * stride);
  d.store_unaligned(out + 3 * stride);
}

/// The LSTM cell on one vector of units: z's gate vectors i, f, g, o and c_{t-1} in, c and h
/// stored, and the four activations at gates + k stride when gates is not null. The activations
/// are the sigmoid and tanh rows' own (SigmoidOp, TanhOp), so they are what the scan form's ops
/// compute; f c_{t-1} + i g may round once where the instruction set has fused multiply-adds.
/// lstm_cell's rows and the fused LSTM tiles both run it.
template <class B, class T>
[[gnu::always_inline]] inline void lstm_cell_vector(const B (&z)[4], const B& c_prev, T* c, T* h,
                                                    T* gates, std::int64_t stride) {
  const B i = SigmoidOp::simd(z[0]);
  const B f = SigmoidOp::simd(z[1]);
  const B g = TanhOp::simd(z[2]);
  const B o = SigmoidOp::simd(z[3]);
  const B c_new = f * c_prev + i * g;
  c_new.store_unaligned(c);
  (o * TanhOp::simd(c_new)).store_unaligned(h);
  if (gates != nullptr) store_blocks(i, f, g, o, gates, stride);
}

/// Rows of a full tile of a fused LSTM panel: 4 vectors a row, so 6 rows keep 24 accumulators,
/// with the 4 panel vectors and a broadcast 29 of AVX-512's 32 registers. The 16-register sets
/// have no fused panel (a tile of 4 vectors would fit 2 rows): their LSTM runs gate panels and
/// the cell after them.
constexpr std::int64_t lstm_tile_rows = 6;

/// Rows [0, R) of a fused LSTM tile (LstmPanelFn): the four gates' sums (panel_sums, 4 vectors:
/// i, f, g, o of the panel's units) plus x and the bias as gate_tile adds them, then the cell on
/// them (lstm_cell_vector, as lstm_cell's rows), stored to c, h and (when not null) the gates.
template <class Arch, class T, int R>
[[gnu::always_inline]] inline void lstm_tile(const LstmPanelArgs& g, std::int64_t i,
                                             std::uintptr_t ask, std::uintptr_t ask_end) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  B acc[4][R];
  panel_sums<Arch, T, R, 4>(acc, g, i, ask, ask_end);
  const T* x = static_cast<const T*>(g.x);
  B bias[4];
  for (int gate = 0; gate < 4; ++gate)
    bias[gate] = B::load_unaligned(static_cast<const T*>(g.bias) + gate * width);
  for (int r = 0; r < R; ++r) {
    const std::int64_t row = i + r;
    B z[4];
    for (int gate = 0; gate < 4; ++gate)
      z[gate] = x == nullptr
                    ? bias[gate] + acc[gate][r]
                    : (B::load_unaligned(x + row * g.ldx + gate * g.x_gate_stride) + bias[gate]) +
                          acc[gate][r];
    T* gates = g.gates != nullptr ? static_cast<T*>(g.gates) + row * g.ld_out : nullptr;
    lstm_cell_vector(z, B::load_unaligned(static_cast<const T*>(g.c_prev) + row * g.ld_c_prev),
                     static_cast<T*>(g.c) + row * g.ld_out, static_cast<T*>(g.h) + row * g.ld_out,
                     gates, g.gates_stride);
  }
}

/// LstmPanelFn: all g.rows rows in tiles of lstm_tile_rows (over_tiles).
template <class Arch, class T>
void lstm_panel(const LstmPanelArgs& g) {
  over_tiles<lstm_tile_rows>(
      g.rows, g.next_b, g.next_b_bytes,
      [&](std::int64_t first, std::int64_t count, std::uintptr_t ask, std::uintptr_t to) {
        with_rows<static_cast<int>(lstm_tile_rows)>(count, [&](auto rows) {
          lstm_tile<Arch, T, decltype(rows)::value>(g, first, ask, to);
        });
      },
      [](std::int64_t) {});
}

/// LstmCellFn: the LSTM cell (lstm_cell_vector) on one row of z, a vector of units at a time
/// (the last one through a zero-padded vector).
template <class Arch, class T>
void lstm_cell(const LstmCellArgs& a) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  const T* z = static_cast<const T*>(a.z);
  const T* c_prev = static_cast<const T*>(a.c_prev);
  T* c_out = static_cast<T*>(a.c);
  T* h_out = static_cast<T*>(a.h);
  T* gates = static_cast<T*>(a.gates);
  const std::int64_t zs = a.z_gate_stride, gs = a.gates_stride;
  // The cell on the vectors at z + j (and c_prev + j), stored to c, h and gates at `to` + j.
  const auto cell = [&](const T* zj, std::int64_t z_stride, const T* cj, T* c, T* h, T* g_out,
                        std::int64_t g_stride) {
    const B zv[4] = {B::load_unaligned(zj), B::load_unaligned(zj + z_stride),
                     B::load_unaligned(zj + 2 * z_stride), B::load_unaligned(zj + 3 * z_stride)};
    lstm_cell_vector(zv, B::load_unaligned(cj), c, h, g_out, g_stride);
  };
  std::int64_t j = 0;
  for (; j + width <= a.n; j += width)
    cell(z + j, zs, c_prev + j, c_out + j, h_out + j, gates != nullptr ? gates + j : nullptr, gs);
  if (j == a.n) return;
  const std::int64_t rest = a.n - j;
  T zt[4 * width] = {}, ct[width] = {}, c_new[width], h_new[width], g_new[4 * width];
  for (std::int64_t k = 0; k < rest; ++k) {
    for (std::int64_t gate = 0; gate < 4; ++gate) zt[gate * width + k] = z[gate * zs + j + k];
    ct[k] = c_prev[j + k];
  }
  cell(zt, width, ct, c_new, h_new, g_new, width);
  for (std::int64_t k = 0; k < rest; ++k) {
    c_out[j + k] = c_new[k];
    h_out[j + k] = h_new[k];
    if (gates != nullptr)
      for (std::int64_t gate = 0; gate < 4; ++gate)
        gates[gate * gs + j + k] = g_new[gate * width + k];
  }
}

/// GruCellFn: the GRU cell on one row, a vector of units at a time (the last one through
/// zero-padded vectors), in the order of the row kernels it replaces: (x + b_in) + q for z and
/// r, (x_n + b_n) + r q_n for n, with the sigmoid and tanh rows' own SigmoidOp and TanhOp;
/// z h_prev + (1 - z) n may round once where the instruction set has fused multiply-adds.
template <class Arch, class T>
void gru_cell(const GruCellArgs& a) {
  using B = xsimd::batch<T, Arch>;
  constexpr std::int64_t width = B::size;
  const T* x = static_cast<const T*>(a.x);
  const T* b_in = static_cast<const T*>(a.b_in);
  const T* q = static_cast<const T*>(a.q);
  const T* h_prev = static_cast<const T*>(a.h_prev);
  T* h_out = static_cast<T*>(a.h);
  T* saved = static_cast<T*>(a.saved);
  // The cell on the vectors at xj, bj, qj (each gate `*s` apart) and hj, stored to h and saved.
  const auto cell = [](const T* xj, std::int64_t xs, const T* bj, std::int64_t bs, const T* qj,
                       std::int64_t qs, const T* hj, T* h, T* s_out, std::int64_t ss) {
    const auto xb = [&](std::int64_t gate) {
      return B::load_unaligned(xj + gate * xs) + B::load_unaligned(bj + gate * bs);
    };
    const B z = SigmoidOp::simd(xb(0) + B::load_unaligned(qj));
    const B r = SigmoidOp::simd(xb(1) + B::load_unaligned(qj + qs));
    const B qn = B::load_unaligned(qj + 2 * qs);
    const B n = TanhOp::simd(xb(2) + r * qn);
    (z * B::load_unaligned(hj) + (B(T(1)) - z) * n).store_unaligned(h);
    if (s_out != nullptr) store_blocks(z, r, n, qn, s_out, ss);
  };
  std::int64_t j = 0;
  for (; j + width <= a.n; j += width)
    cell(x + j, a.x_gate_stride, b_in + j, a.b_gate_stride, q + j, a.q_gate_stride, h_prev + j,
         h_out + j, saved != nullptr ? saved + j : nullptr, a.saved_stride);
  if (j == a.n) return;
  const std::int64_t rest = a.n - j;
  T xt[3 * width] = {}, bt[3 * width] = {}, qt[3 * width] = {}, ht[width] = {};
  T h_new[width], s_new[4 * width];
  for (std::int64_t k = 0; k < rest; ++k) {
    for (std::int64_t gate = 0; gate < 3; ++gate) {
      xt[gate * width + k] = x[gate * a.x_gate_stride + j + k];
      bt[gate * width + k] = b_in[gate * a.b_gate_stride + j + k];
      qt[gate * width + k] = q[gate * a.q_gate_stride + j + k];
    }
    ht[k] = h_prev[j + k];
  }
  cell(xt, width, bt, width, qt, width, ht, h_new, s_new, width);
  for (std::int64_t k = 0; k < rest; ++k) {
    h_out[j + k] = h_new[k];
    if (saved != nullptr)
      for (std::int64_t gate = 0; gate < 4; ++gate)
        saved[gate * a.saved_stride + j + k] = s_new[gate * width + k];
  }
}

}  // namespace

}  // namespace kiln::detail

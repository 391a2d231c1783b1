// Kernels of the recurrent family (kernels/recurrent_parts.hpp explains how a step runs): a whole
// LSTM recurrence in one call (lstm_sequence), its backward recurrence (lstm_sequence_grad), and
// the recurrent kernel's gradient of either fused layer (recurrent_weight_grad); the GRU's are in
// recurrent_gru.cpp. The layouts are documented at the front ends, lib/ops/recurrent.hpp.

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "core/fail.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernel.hpp"
#include "kernels/recurrent_parts.hpp"

namespace kiln::detail {

namespace {

using namespace recurrent;  // NOLINT(google-build-using-namespace): this file is its user

// ------------------------------------------------------------------ lstm_sequence

/// One part of an LSTM forward whose steps run in fused LSTM panels (LstmPanelFn: AVX-512):
/// units [u0, u0 + width) in panels of w units (the last one part-filled where w does not divide
/// the width), each panel's weights [k_in + k][4 w] (W_x's rows first; per row the gate blocks
/// i, f, g, o of its units) and bias [4 w], zero past the units. The product's z never reaches
/// memory: each tile runs the cell on its accumulators and stores h and c (and the gates) into
/// the output.
template <class T>
struct FusedLstmPart {
  std::int64_t u0 = 0, width = 0, w = 0, panels = 0, rows = 0, batch = 0, units = 0;
  std::vector<T, PanelAllocator<T>> packed;      // [panels][rows][4 w]
  std::vector<T> bias;                           // [panels][4 w]
  std::vector<T> edge_x, edge_c_prev, edge_out;  // a part-filled panel's rows, zero-padded
  std::int64_t k_in = 0;
  bool recurrent_finite = true;  // every element of the part's columns of W is finite (pack)

  FusedLstmPart(std::int64_t begin, std::int64_t end, std::int64_t panel_units,
                std::int64_t all_units, std::int64_t features, std::int64_t rows_of_batch)
      : u0(begin),
        width(end - begin),
        w(panel_units),
        panels((width + panel_units - 1) / panel_units),
        rows(features + all_units),
        batch(rows_of_batch),
        units(all_units),
        k_in(features) {
    if (width % w != 0) {
      edge_x.resize(static_cast<std::size_t>(batch * 4 * w));
      edge_c_prev.resize(static_cast<std::size_t>(batch * w));
      edge_out.resize(static_cast<std::size_t>(batch * 6 * w));
    }
  }

  /// Packs the part's panels from W [k, 4 U], W_x [k_in, 4 U] (when k_in > 0) and b [4 U], on
  /// the part's thread: row by row of the sources, each gate's run of the part's units read once
  /// and dealt out to the panels. Built for AVX-512, the only instruction set with fused panels: a
  /// panel's gate block is one vector (64 bytes), one load and one store here, where glibc's copy
  /// took a call per block (a one-step LSTM(512) forward ran 0.95 ms with those calls, 0.86 with
  /// the gate panels). All at once: packing four panels at a time as the first step reached
  /// them (as PanelPart packs a gate at a time) measured the same on the Xeon (one-step
  /// LSTM(512) forward 0.77-0.84 ms against 0.78-0.81; T = 50 alike), with more code. On the
  /// way it notes whether the part's columns of W are all finite (recurrent_finite), which a
  /// step from a zero state needs to leave out h_{t-1} W and still give what IEEE arithmetic
  /// would (0 times an infinity is NaN).
  [[gnu::target("avx512f,avx2,fma")]] void pack(const T* w_rec, const T* w_x, const T* b) {
    packed.resize(static_cast<std::size_t>(panels * rows * 4 * w));
    bias.assign(static_cast<std::size_t>(panels * 4 * w), T(0));
    for (std::int64_t j = 0; j < panels; ++j)
      for (std::int64_t gate = 0; gate < 4; ++gate)
        std::copy_n(b + gate * units + u0 + j * w, valid(j), bias.data() + (j * 4 + gate) * w);
    const bool vector_blocks = w * static_cast<std::int64_t>(sizeof(T)) == 64;
    std::int64_t not_finite = 0;  // elements of the part's columns of W (not_finite_count)
    for (std::int64_t row = 0; row < rows; ++row) {
      const bool recurrent = row >= k_in;
      const T* src = recurrent ? w_rec + (row - k_in) * 4 * units : w_x + row * 4 * units;
      for (std::int64_t gate = 0; gate < 4; ++gate)
        for (std::int64_t j = 0; j < panels; ++j) {
          T* to = packed.data() + ((j * rows + row) * 4 + gate) * w;
          const T* from = src + gate * units + u0 + j * w;
          const std::int64_t n = valid(j);
          if (vector_blocks && n == w) {
            std::memcpy(to, from, 64);
          } else {
            std::copy_n(from, n, to);
            std::fill(to + n, to + w, T(0));
          }
          if (recurrent) not_finite += not_finite_count(from, n);
        }
    }
    recurrent_finite = not_finite == 0;
  }

  /// Bytes of the part's buffers.
  [[nodiscard]] std::int64_t bytes() const {
    return static_cast<std::int64_t>(sizeof(T)) *
           (panels * (rows + 1) * 4 * w +
            static_cast<std::int64_t>(edge_x.size() + edge_c_prev.size() + edge_out.size()));
  }

  /// Units of panel j.
  [[nodiscard]] std::int64_t valid(std::int64_t j) const { return std::min(w, width - j * w); }

  /// One step over the part's units: args holds the step's a (h_{t-1}), in (x_t, when the
  /// part projects), rows and k; x is xp's step (or null) with rows ldx apart, c_prev rows
  /// ld_c_prev apart, out the step's output rows (h at 0, c at units, the gates from 2 units
  /// when save_gates), ld_out apart.
  void step(LstmPanelFn fn, LstmPanelArgs args, const T* x, std::int64_t ldx, const T* c_prev,
            std::int64_t ld_c_prev, T* out, std::int64_t ld_out, bool save_gates) {
    const std::int64_t panel_size = rows * 4 * w;
    for (std::int64_t j = 0; j < panels; ++j) {
      const std::int64_t uj = u0 + j * w, n = valid(j);
      args.b = packed.data() + j * panel_size;
      args.next_b = j + 1 < panels ? packed.data() + (j + 1) * panel_size : packed.data();
      args.next_b_bytes = panel_size * static_cast<std::int64_t>(sizeof(T));
      args.bias = bias.data() + j * 4 * w;
      if (n == w) {
        args.x = x != nullptr ? x + uj : nullptr;
        args.ldx = ldx;
        args.x_gate_stride = units;
        args.c_prev = c_prev + uj;
        args.ld_c_prev = ld_c_prev;
        args.h = out + uj;
        args.c = out + units + uj;
        args.gates = save_gates ? out + 2 * units + uj : nullptr;
        args.ld_out = ld_out;
        args.gates_stride = units;
        fn(args);
        continue;
      }
      const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
      for (std::int64_t b = 0; b < batch; ++b) {  // the rest of each edge row stays zero
        if (x != nullptr)
          for (std::int64_t gate = 0; gate < 4; ++gate)
            std::memcpy(edge_x.data() + (b * 4 + gate) * w, x + b * ldx + gate * units + uj, bytes);
        std::memcpy(edge_c_prev.data() + b * w, c_prev + b * ld_c_prev + uj, bytes);
      }
      args.x = x != nullptr ? edge_x.data() : nullptr;
      args.ldx = 4 * w;
      args.x_gate_stride = w;
      args.c_prev = edge_c_prev.data();
      args.ld_c_prev = w;
      args.h = edge_out.data();
      args.c = edge_out.data() + w;
      args.gates = save_gates ? edge_out.data() + 2 * w : nullptr;
      args.ld_out = 6 * w;
      args.gates_stride = w;
      fn(args);
      for (std::int64_t b = 0; b < batch; ++b) {
        const T* from = edge_out.data() + b * 6 * w;
        T* to = out + b * ld_out;
        std::memcpy(to + uj, from, bytes);
        std::memcpy(to + units + uj, from + w, bytes);
        if (save_gates)
          for (std::int64_t gate = 0; gate < 4; ++gate)
            std::memcpy(to + (2 + gate) * units + uj, from + (2 + gate) * w, bytes);
      }
    }
  }
};

/// The inputs an LSTM forward packs: W, b and (when it projects) W_x.
std::span<const int> lstm_weights(bool projects) {
  static constexpr std::array<int, 3> inputs = {3, 4, 5};
  return {inputs.data(), projects ? 3U : 2U};
}

/// lstm_forward in fused LSTM panels (FusedLstmPart), where this process's instruction set has
/// them. In a compiled plan whose weights are variables' values (or constants) the parts are kept
/// in the node's memo and packed once, not per call, for as long as the weights' buffers stay
/// the same (KeptParts): a one-step LSTM(512) forward on the Xeon took 0.15-0.29 ms so, against
/// 0.86-0.91 ms packing per call.
template <class T>
void lstm_forward_fused(const KernelCall& call, LstmPanelFn fn, std::int64_t panel_units) {
  const std::int64_t units = call.inputs[1].shape[1];
  const StepInputs in(call, "lstm_sequence", 4 * units);
  const std::int64_t steps = in.steps, batch = in.batch;
  const T* h0 = call.inputs[1].ptr<const T>();
  const T* c0 = call.inputs[2].ptr<const T>();
  const T* w = call.inputs[3].ptr<const T>();
  const T* bias = call.inputs[4].ptr<const T>();
  const T* w_in = in.projects ? call.inputs[5].ptr<const T>() : nullptr;
  const std::int64_t row_size = call.out.shape[2];  // S U
  const bool save_gates = row_size == 6 * units;
  T* y = call.out.ptr<T>();
  const std::vector<std::int64_t> bounds = part_bounds(steps, batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  KeptParts<FusedLstmPart<T>> kept(call, lstm_weights(in.projects), bounds,
                                   {batch, in.features, panel_units});
  std::vector<FusedLstmPart<T>>& part = kept.parts(0, parts, [&](std::size_t p) {
    return FusedLstmPart<T>(bounds[p], bounds[p + 1], panel_units, units, in.features, batch);
  });
  const bool packed = kept.packed();
  // From a zero state, step 0's sums leave out h0 W, in a part whose W is finite (so IEEE
  // arithmetic would add zeros): 1 / T of the steps' recurrent work. Keras's and PyTorch's layers
  // start from zeros unless given a state.
  const bool zero_state = all_zero(h0, batch * units);
  const auto step = [&](int p, std::int64_t t) {
    FusedLstmPart<T>& q = part[static_cast<std::size_t>(p)];
    if (t == 0 && !packed) q.pack(w, w_in, bias);
    const T* prev = t == 0 ? nullptr : y + (t - 1) * batch * row_size;
    const T* x_t = call.inputs[0].ptr<const T>() + t * in.step;
    LstmPanelArgs args;
    args.a = t == 0 ? h0 : prev;
    args.lda = t == 0 ? units : row_size;
    args.in = in.projects ? x_t : nullptr;
    args.ldin = in.projects ? in.ld : 0;
    args.k_in = in.features;
    args.rows = batch;
    args.k = t == 0 && zero_state && q.recurrent_finite ? 0 : units;
    q.step(fn, args, in.projects ? nullptr : x_t, in.ld, t == 0 ? c0 : prev + units,
           t == 0 ? units : row_size, y + t * batch * row_size, row_size, save_gates);
  };
  PhaseTeam(parts, steps).run(step);
  kept.done();
}

/// Forward. Inputs: xp [T, B, 4U] (each step's x W_x), h0 [B, U], c0 [B, U], w [U, 4U], b [4U],
/// or with a sixth input W_x [F, 4U] the inputs x [T, B, F] in xp's place (batch-major, [B, T, F],
/// where attrs.ints is {1}); output y [T, B, S U], S = 2 (h_t, c_t) or 6 (also the gate
/// activations i, f, g, o).
///
/// Each part's step product z = x_t W_x + b + h_{t-1} W [B, 4 width] runs in gate panels
/// (kernels/recurrent_step_arch.hpp) over the part's weights, packed (per call, or once in a
/// compiled forward: KeptParts) on the part's own thread (with W_x: its rows ahead of W's, so x_t
/// W_x is summed in the same registers and no projection of every step is written or read back);
/// then the LSTM cell (one pass per row, kernels/recurrent_step_arch.hpp) runs over z's rows while
/// they are in cache. Where the instruction set has fused LSTM panels (AVX-512), lstm_forward_fused
/// runs the steps instead: each tile runs the cell on its own sums, and z is never stored.
template <class T>
void lstm_forward(const KernelCall& call) {
  const std::int64_t units = call.inputs[1].shape[1];
  const StepInputs in(call, "lstm_sequence", 4 * units);
  const bool projects = in.projects;
  const std::int64_t steps = in.steps, batch = in.batch;
  const T* h0 = call.inputs[1].ptr<const T>();
  const T* c0 = call.inputs[2].ptr<const T>();
  const T* w = call.inputs[3].ptr<const T>();
  const T* bias = call.inputs[4].ptr<const T>();
  const T* w_in = projects ? call.inputs[5].ptr<const T>() : nullptr;
  const std::int64_t row_size = call.out.shape[2];  // S U
  const bool save_gates = row_size == 6 * units;
  T* y = call.out.ptr<T>();
  if (steps == 0 || batch == 0) return;

  const DType dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  const ElementwiseRowTable& table = elementwise_rows();
  if (const LstmPanelFn fused = table.lstm_panel[dtype_index(dtype)]; fused != nullptr)
    return lstm_forward_fused<T>(call, fused, table.lstm_panel_units[dtype_index(dtype)]);
  const GatePanels panels = GatePanels::of(dtype, units, 4, in.features);
  const std::vector<std::int64_t> bounds = part_bounds(steps, batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  KeptParts<PanelPart<T>> kept(call, lstm_weights(projects), bounds,
                               {batch, in.features, panels.width});
  std::vector<PanelPart<T>>& part = kept.parts(0, parts, [&](std::size_t p) {
    return PanelPart<T>(panels, bounds[p], bounds[p + 1], batch);
  });
  const bool packed = kept.packed();
  const bool zero_state = all_zero(h0, batch * units);  // as in lstm_forward_fused
  const LstmCellFn lstm_cell = elementwise_rows().lstm_cell[dtype_index(dtype)];

  const auto step = [&](int p, std::int64_t t) {
    PanelPart<T>& q = part[static_cast<std::size_t>(p)];
    const std::int64_t wd = q.width, u0 = q.u0;
    if (t == 0 && !packed) q.pack(panels, w, w_in);
    const T* h_prev = t == 0 ? h0 : y + (t - 1) * batch * row_size;
    const T* c_prev = t == 0 ? c0 : y + (t - 1) * batch * row_size + units;
    const std::int64_t prev_ld = t == 0 ? units : row_size;
    const T* x_t = call.inputs[0].ptr<const T>() + t * in.step;
    const bool zero_h = t == 0 && zero_state;  // h0 W left out where W is finite
    if (projects)
      q.product_of(panels, h_prev, prev_ld, nullptr, 0, bias, nullptr, x_t, in.ld, zero_h);
    else
      q.product_of(panels, h_prev, prev_ld, x_t, in.ld, bias,
                   t + 1 < steps ? x_t + in.step : nullptr, nullptr, 0, zero_h);
    LstmCellArgs cell;
    cell.z_gate_stride = wd;
    cell.gates_stride = units;
    cell.n = wd;
    for (std::int64_t b = 0; b < batch; ++b) {
      T* out = y + (t * batch + b) * row_size;
      cell.z = q.product.data() + b * 4 * wd;
      cell.c_prev = c_prev + b * prev_ld + u0;
      cell.c = out + units + u0;
      cell.h = out + u0;
      cell.gates = save_gates ? out + 2 * units + u0 : nullptr;  // i, f, g, o for the backward
      lstm_cell(cell);
    }
  };
  PhaseTeam(parts, steps).run(step);
  kept.done();
}

// ------------------------------------------------------------------ lstm_sequence_grad

/// One row of one part of a backward step (lstm_backward): the gradient of h_s (upstream plus
/// what flows back from step s + 1), the upstream gradient of c_s and the carried one from step
/// s + 1, tanh(c_s), the saved gates of step s, c_{s-1} and h_{s-1}, each at the part's first
/// unit; `out` is the row of r at that unit (dz's gate blocks are `units` apart).
template <class T>
struct BackwardRow {
  const T *dh, *gc, *carry_c, *tanh_c, *i, *f, *g, *o, *c_prev, *h_prev;
  T* out;
  std::int64_t units, width;
};

/// The gate math of lstm's backward step on a row (plain loops, compiled for each instruction
/// set below): c_s = f c_{s-1} + i g and h_s = o tanh(c_s) differentiated.
template <class T>
[[gnu::always_inline]] inline void backward_row(const BackwardRow<T>& a) {
  // No two of these overlap (r's columns, y's, the scratch rows): restrict lets them vectorize.
  const T* __restrict dh_s = a.dh;
  const T* __restrict gc = a.gc;
  const T* __restrict carry_c = a.carry_c;
  const T* __restrict tanh_c = a.tanh_c;
  const T* __restrict gi = a.i;
  const T* __restrict gf = a.f;
  const T* __restrict gg = a.g;
  const T* __restrict go = a.o;
  const T* __restrict c_prev = a.c_prev;
  const T* __restrict h_prev = a.h_prev;
  T* __restrict dzi = a.out;
  T* __restrict dzf = a.out + a.units;
  T* __restrict dzg = a.out + 2 * a.units;
  T* __restrict dzo = a.out + 3 * a.units;
  T* __restrict h_copy = a.out + 4 * a.units;
  T* __restrict dh_prev = a.out + 5 * a.units;
  T* __restrict dc_prev = a.out + 6 * a.units;
#pragma GCC ivdep
  for (std::int64_t j = 0; j < a.width; ++j) {
    const T dh = dh_s[j];
    const T tc = tanh_c[j];
    const T i = gi[j], f = gf[j], g = gg[j], o = go[j];
    const T dc = gc[j] + carry_c[j] + dh * o * (T(1) - tc * tc);
    dzi[j] = dc * g * i * (T(1) - i);
    dzf[j] = dc * c_prev[j] * f * (T(1) - f);
    dzg[j] = dc * i * (T(1) - g * g);
    dzo[j] = dh * tc * o * (T(1) - o);
    h_copy[j] = h_prev[j];
    dh_prev[j] = T(0);  // step 0's is dh_0: the last phase writes it
    dc_prev[j] = dc * f;
  }
}

template <class T>
void lstm_backward(const KernelCall& call) {
  const T* gy = call.inputs[0].ptr<const T>();
  const T* y = call.inputs[1].ptr<const T>();
  const T* h0 = call.inputs[2].ptr<const T>();
  const T* c0 = call.inputs[3].ptr<const T>();
  const T* w = call.inputs[4].ptr<const T>();
  const std::int64_t steps = call.inputs[1].shape[0], batch = call.inputs[1].shape[1];
  const std::int64_t units = call.inputs[2].shape[1], yrow = 6 * units, rrow = 7 * units;
  T* r = call.out.ptr<T>();
  if (steps == 0 || batch == 0) return;

  const DType dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  // dh_s [B, U] = g_s's h columns + dz_{s+1} [B, 4U] w^T, in gate panels of w^T's columns.
  const GatePanels panels = GatePanels::transposed(dtype, units, 4);
  const std::vector<std::int64_t> bounds = part_bounds(steps, batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  std::vector<PanelPart<T>> part;
  std::vector<std::vector<T>> tanh_c;  // per part: [width]
  for (int p = 0; p < parts; ++p) {
    const PanelPart<T>& q = part.emplace_back(panels, bounds[static_cast<std::size_t>(p)],
                                              bounds[static_cast<std::size_t>(p) + 1], batch);
    tanh_c.emplace_back(static_cast<std::size_t>(q.width));
  }
  const std::vector<T> zeros(static_cast<std::size_t>(units), T(0));
  // tanh(c_s) as the row kernels compute it (the forward's cell uses the same TanhOp)
  const auto tanh = reinterpret_cast<UnaryRowFn>(row_kernel(Prim::tanh, dtype, dtype));
  const auto row_math = for_this_isa<BackwardRow<T>, &backward_row<T>>();

  // Phase k: part p's dh_s from step s + 1's dz (k > 0), then the gate math of step
  // s = T - 1 - k; the last phase (k = T) only dh_0, into r's step 0.
  const auto phase = [&](int p, std::int64_t k) {
    PanelPart<T>& q = part[static_cast<std::size_t>(p)];
    const std::int64_t wd = q.width, u0 = q.u0;
    const std::int64_t s = steps - 1 - k;
    if (k == 0) q.pack_transposed(panels, w);
    if (k > 0) {
      const T* dz_next = r + (s + 1) * batch * rrow;
      if (s >= 0)
        q.product_of(panels, dz_next, rrow, gy + s * batch * 2 * units, 2 * units, zeros.data(),
                     nullptr);
      else
        q.product_of(panels, dz_next, rrow, zeros.data(), 0, zeros.data(), nullptr);
    }
    if (s < 0) {
      for (std::int64_t b = 0; b < batch; ++b)
        std::memcpy(r + b * rrow + 5 * units + u0, q.product.data() + b * wd,
                    static_cast<std::size_t>(wd) * sizeof(T));
      return;
    }
    T* const tc = tanh_c[static_cast<std::size_t>(p)].data();
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* yr = y + (s * batch + b) * yrow;
      const T* gr = gy + (s * batch + b) * 2 * units;
      T* rr = r + (s * batch + b) * rrow;
      // dc_s from step s + 1 (none after the last step)
      T* carry_c = k > 0 ? r + ((s + 1) * batch + b) * rrow + 6 * units + u0 : nullptr;
      const T* h_prev = s == 0 ? h0 + b * units : yr - batch * yrow;
      const T* c_prev = s == 0 ? c0 + b * units : yr - batch * yrow + units;
      const T* gates = yr + 2 * units + u0;
      tanh(yr + units + u0, 1, tc, wd);
      const BackwardRow<T> a{k > 0 ? q.product.data() + b * wd : gr + u0,
                             gr + units + u0,
                             carry_c != nullptr ? carry_c : zeros.data(),
                             tc,
                             gates,
                             gates + units,
                             gates + 2 * units,
                             gates + 3 * units,
                             c_prev + u0,
                             h_prev + u0,
                             rr + u0,
                             units,
                             wd};
      row_math(a);
      if (carry_c != nullptr)  // read: zero (r documents only step 0's state gradients)
        std::memset(carry_c, 0, static_cast<std::size_t>(wd) * sizeof(T));
    }
  };
  PhaseTeam(parts, steps + 1).run(phase);
}

/// recurrent_weight_grad: r [T, B, row] (a backward recurrence's output) -> the recurrent
/// kernel's gradient [U, G U] = the sum over steps and rows of r's h_{t-1} columns (U from
/// attrs.ints[2]) transposed times its gate-gradient columns (G U from attrs.ints[3]): one GEMM
/// over T B rows. attrs.ints = {U, G, h column, gate column}.
template <class T>
void recurrent_weight_gradient(const KernelCall& call) {
  const ArrayRef& r = call.inputs[0];
  const std::vector<std::int64_t>& at = call.attrs.ints;
  const std::int64_t rows = r.shape[0] * r.shape[1], units = at[0], n = at[0] * at[1];
  T* out = call.out.ptr<T>();
  if (rows == 0) {
    std::fill(out, out + units * n, T(0));
    return;
  }
  const int ld = to_int(r.shape[2]);
  const GemmShape shape{to_int(units), to_int(n), to_int(rows), true, ld, ld};
  const T* base = r.ptr<const T>();
  Gemm<T>::planned(shape)(base + at[2], base + at[3], out);
}

template <class T>
void run_recurrent_typed(const KernelCall& call) {
  switch (call.prim) {
    case Prim::lstm_sequence:
      return lstm_forward<T>(call);
    case Prim::lstm_sequence_grad:
      return lstm_backward<T>(call);
    case Prim::gru_sequence:
      return gru_forward<T>(call);
    case Prim::gru_sequence_grad:
      return gru_backward<T>(call);
    case Prim::recurrent_weight_grad:
      return recurrent_weight_gradient<T>(call);
    default:
      fail(name(call.prim), "no recurrent kernel");
  }
}

}  // namespace

void run_recurrent(const KernelCall& call) {
  switch (call.out.dtype) {
    case DType::f32:
      return run_recurrent_typed<float>(call);
    case DType::f64:
      return run_recurrent_typed<double>(call);
    default:
      fail(name(call.prim), "needs f32 or f64, got {}", dtype_name(call.out.dtype));
  }
}

}  // namespace kiln::detail

// The fused GRU (gru_sequence and gru_sequence_grad; kernels/recurrent_parts.hpp explains how a
// step runs, lib/ops/recurrent.hpp documents the layouts). Keras's GRU with reset_after: per
// step q = h_{t-1} W + b_rec; z = sigmoid(x_z + q_z); r = sigmoid(x_r + q_r);
// n = tanh(x_n + r q_n); h_t = z h_{t-1} + (1 - z) n.

#include <array>
#include <cstring>
#include <vector>

#include "core/fail.hpp"
#include "kernels/kernel.hpp"
#include "kernels/recurrent_parts.hpp"

namespace kiln::detail::recurrent {

namespace {

DType dtype_of(std::size_t element_size) { return element_size == 4 ? DType::f32 : DType::f64; }

}  // namespace

/// Forward. Inputs: xp [T, B, 3U] (x_t W_in), h0 [B, U], w [U, 3U], b_in [3U], b_rec [3U], or
/// with a sixth input W_in [F, 3U] the inputs x [T, B, F] in xp's place (batch-major, [B, T, F],
/// where attrs.ints is {1}); output y [T, B, S U]: h_t (S = 1) and, saved for the gradient
/// (S = 5), z, r, n and q_n.
template <class T>
void gru_forward(const KernelCall& call) {
  const std::int64_t units = call.inputs[1].shape[1];
  const StepInputs in(call, "gru_sequence", 3 * units);
  const bool projects = in.projects;
  const std::int64_t steps = in.steps, batch = in.batch;
  const T* h0 = call.inputs[1].ptr<const T>();
  const T* w = call.inputs[2].ptr<const T>();
  const T* b_in = call.inputs[3].ptr<const T>();
  const T* b_rec = call.inputs[4].ptr<const T>();
  const T* w_in = projects ? call.inputs[5].ptr<const T>() : nullptr;
  const std::int64_t row_size = call.out.shape[2];
  const bool save = row_size == 5 * units;
  T* y = call.out.ptr<T>();
  if (steps == 0 || batch == 0) return;

  const DType dtype = dtype_of(sizeof(T));
  const GatePanels panels = GatePanels::of(dtype, units, 3);
  const std::vector<std::int64_t> bounds = part_bounds(steps, batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  // Per part: q = h_{t-1} W + b_rec [B, 3 width] in gate panels (without x: the candidate gate
  // needs r (h W_n + b_rec,n) before x is added); then the GRU cell
  // (kernels/recurrent_step_arch.hpp) on each row of q while it is in cache.
  // The parts and their packed weights are kept between a compiled plan's calls (KeptParts).
  static constexpr std::array<int, 2> weight_inputs = {2, 5};  // W and, when it projects, W_in
  KeptParts<PanelPart<T>> kept(call, {weight_inputs.data(), projects ? 2U : 1U}, bounds,
                               {batch, in.features, panels.width});
  std::vector<PanelPart<T>>& part = kept.parts(0, parts, [&](std::size_t p) {
    return PanelPart<T>(panels, bounds[p], bounds[p + 1], batch);
  });
  // With W_in, each part also projects its columns of the step's inputs, x_t W_in + b_in
  // [B, 3 width], in gate panels of W_in alone (K = 0 rows of h): the projection of every step is
  // never written, and the cell reads the part's rows of it (with b_in added: a zero bias then).
  const GatePanels input_panels = GatePanels::inputs(dtype, units, 3, in.features);
  std::vector<PanelPart<T>>& input_part = kept.parts(1, projects ? parts : 0, [&](std::size_t p) {
    return PanelPart<T>(input_panels, bounds[p], bounds[p + 1], batch);
  });
  const bool packed = kept.packed();
  const std::vector<T> zeros(static_cast<std::size_t>(3 * units), T(0));
  const bool zero_state = all_zero(h0, batch * units);
  const GruCellFn gru_cell = elementwise_rows().gru_cell[dtype_index(dtype)];

  const auto step = [&](int p, std::int64_t t) {
    PanelPart<T>& pt = part[static_cast<std::size_t>(p)];
    const std::int64_t wd = pt.width, u0 = pt.u0;
    if (t == 0 && !packed) pt.pack(panels, w);
    const T* h_prev = t == 0 ? h0 : y + (t - 1) * batch * row_size;
    const std::int64_t prev_ld = t == 0 ? units : row_size;
    // q; from a zero state, step 0's is b_rec where W is finite (as in lstm_forward_fused)
    pt.product_of(panels, h_prev, prev_ld, nullptr, 0, b_rec, nullptr, nullptr, 0,
                  t == 0 && zero_state);
    const T* x_t = call.inputs[0].ptr<const T>() + t * in.step;
    if (projects) {
      PanelPart<T>& pin = input_part[static_cast<std::size_t>(p)];
      if (t == 0 && !packed) pin.pack(input_panels, nullptr, w_in);
      pin.product_of(input_panels, nullptr, 0, nullptr, 0, b_in, nullptr, x_t, in.ld);
    }
    GruCellArgs cell;
    cell.x_gate_stride = projects ? wd : units;
    cell.b_in = projects ? zeros.data() : b_in + u0;
    cell.b_gate_stride = units;
    cell.q_gate_stride = wd;
    cell.saved_stride = units;
    cell.n = wd;
    for (std::int64_t b = 0; b < batch; ++b) {
      T* out = y + (t * batch + b) * row_size;
      const T* x = nullptr;
      if (projects) {
        x = input_part[static_cast<std::size_t>(p)].product.data() + b * 3 * wd;
      } else {
        x = x_t + b * 3 * units + u0;
        if (t + 1 < steps) prefetch_row_part(x - u0 + batch * 3 * units, 3, units, u0, wd);
      }
      cell.x = x;
      cell.q = pt.product.data() + b * 3 * wd;
      cell.h_prev = h_prev + b * prev_ld + u0;
      cell.h = out + u0;
      cell.saved = save ? out + units + u0 : nullptr;  // z, r, n, q_n for the backward
      gru_cell(cell);
    }
  };
  PhaseTeam(parts, steps).run(step);
  kept.done();
}

namespace {

/// One row of one part of a GRU backward step: the gradient of h_s (upstream), the carried
/// one (dh_s through step s + 1), the saved z, r, n, q_n of step s and h_{s-1}, each at the
/// part's first unit; `out` is the row of r at that unit.
template <class T>
struct GruBackwardRow {
  const T *gh, *carry_h, *z, *r, *n, *qn, *h_prev;
  T* out;
  std::int64_t units, width;
};

/// h_s = z h_{s-1} + (1 - z) n differentiated: the pre-activation gradients of z, r and n (for
/// x's projection), those of q = h W + b_rec (z, r, r dn), h_{s-1}, and dh_{s-1}'s direct part
/// z dh (the next phase's product adds dq W^T to it).
template <class T>
[[gnu::always_inline]] inline void gru_backward_row(const GruBackwardRow<T>& a) {
  const T* __restrict gh = a.gh;
  const T* __restrict carry_h = a.carry_h;
  const T* __restrict gz = a.z;
  const T* __restrict gr = a.r;
  const T* __restrict gn = a.n;
  const T* __restrict qn = a.qn;
  const T* __restrict h_prev = a.h_prev;
  const std::int64_t u = a.units;
  T* __restrict dxz = a.out;
  T* __restrict dxr = a.out + u;
  T* __restrict dxn = a.out + 2 * u;
  T* __restrict dqz = a.out + 3 * u;
  T* __restrict dqr = a.out + 4 * u;
  T* __restrict dqn = a.out + 5 * u;
  T* __restrict h_copy = a.out + 6 * u;
  T* __restrict dh_prev = a.out + 7 * u;
#pragma GCC ivdep
  for (std::int64_t j = 0; j < a.width; ++j) {
    const T dh = gh[j] + carry_h[j];
    const T z = gz[j], r = gr[j], n = gn[j], hp = h_prev[j];
    const T dn = dh * (T(1) - z) * (T(1) - n * n);
    const T dz = dh * (hp - n) * z * (T(1) - z);
    const T dr = dn * qn[j] * r * (T(1) - r);
    dxz[j] = dz;
    dxr[j] = dr;
    dxn[j] = dn;
    dqz[j] = dz;
    dqr[j] = dr;
    dqn[j] = dn * r;
    h_copy[j] = hp;
    dh_prev[j] = dh * z;
  }
}

}  // namespace

/// Backward. Inputs: g [T, B, U] (the gradient of y's h columns), y [T, B, 5U] (saved), h0, w
/// [U, 3U]. Output r [T, B, 8U]: per step the pre-activation gradients of x's projection (3U),
/// of q = h_{t-1} W + b_rec (3U), h_{t-1} (U) and the gradient of h_{t-1} (U; at t = 0 h0's).
template <class T>
void gru_backward(const KernelCall& call) {
  const T* gy = call.inputs[0].ptr<const T>();
  const T* y = call.inputs[1].ptr<const T>();
  const T* h0 = call.inputs[2].ptr<const T>();
  const T* w = call.inputs[3].ptr<const T>();
  const std::int64_t steps = call.inputs[1].shape[0], batch = call.inputs[1].shape[1];
  const std::int64_t units = call.inputs[2].shape[1], yrow = 5 * units, rrow = 8 * units;
  T* r = call.out.ptr<T>();
  if (steps == 0 || batch == 0) return;

  // The carry dh_s [B, U] = z dh_{s+1} (r's dh column of step s + 1) + dq_{s+1} [B, 3U] w^T, in
  // gate panels of w^T's columns.
  const GatePanels panels = GatePanels::transposed(dtype_of(sizeof(T)), units, 3);
  const std::vector<std::int64_t> bounds = part_bounds(steps, batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  std::vector<PanelPart<T>> part;
  for (int p = 0; p < parts; ++p)
    part.emplace_back(panels, bounds[static_cast<std::size_t>(p)],
                      bounds[static_cast<std::size_t>(p) + 1], batch);
  const std::vector<T> zeros(static_cast<std::size_t>(units), T(0));
  const auto row_math = for_this_isa<GruBackwardRow<T>, &gru_backward_row<T>>();

  // Phase k: part p's carry dh_s from step s + 1 (k > 0), then the gate math of step
  // s = T - 1 - k; the last phase (k = T) only h0's gradient, into r's step 0.
  const auto phase = [&](int p, std::int64_t k) {
    PanelPart<T>& pt = part[static_cast<std::size_t>(p)];
    const std::int64_t u0 = pt.u0, wd = pt.width, s = steps - 1 - k;
    if (k == 0) pt.pack_transposed(panels, w);
    if (k > 0) {
      T* next = r + (s + 1) * batch * rrow;
      pt.product_of(panels, next + 3 * units, rrow, next + 7 * units, rrow, zeros.data(), nullptr);
      // read: zero (r documents only step 0's state gradient); step 0's gets h0's below
      for (std::int64_t b = 0; b < batch; ++b)
        std::memset(next + b * rrow + 7 * units + u0, 0, static_cast<std::size_t>(wd) * sizeof(T));
    }
    if (s < 0) {
      for (std::int64_t b = 0; b < batch; ++b)
        std::memcpy(r + b * rrow + 7 * units + u0, pt.product.data() + b * wd,
                    static_cast<std::size_t>(wd) * sizeof(T));
      return;
    }
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* yr = y + (s * batch + b) * yrow;
      const T* h_prev = s == 0 ? h0 + b * units : yr - batch * yrow;
      const GruBackwardRow<T> a{gy + (s * batch + b) * units + u0,
                                k > 0 ? pt.product.data() + b * wd : zeros.data(),
                                yr + units + u0,
                                yr + 2 * units + u0,
                                yr + 3 * units + u0,
                                yr + 4 * units + u0,
                                h_prev + u0,
                                r + (s * batch + b) * rrow + u0,
                                units,
                                wd};
      row_math(a);
    }
  };
  PhaseTeam(parts, steps + 1).run(phase);
}

template void gru_forward<float>(const KernelCall&);
template void gru_forward<double>(const KernelCall&);
template void gru_backward<float>(const KernelCall&);
template void gru_backward<double>(const KernelCall&);

}  // namespace kiln::detail::recurrent

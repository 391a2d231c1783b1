// Kernels of the recurrent family: a whole LSTM recurrence in one call (lstm_sequence), its
// backward recurrence (lstm_sequence_grad) and the recurrent kernel's gradient
// (lstm_weight_grad). The layouts are documented at the front ends, lib/ops/recurrent.cpp.
//
// Each time step is one GEMM (h_{t-1} times the recurrent kernel) and the gate math on its
// output while that output is still in cache. With several threads the units are cut into
// parts, one per thread: part p owns units [u0, u1) of all four gates, so its GEMM reads only
// its columns of the kernel (packed once per call, contiguous: they stay in that core's cache
// from step to step) and its gate math needs nothing from the other parts. The parts of a step
// need the whole h of the step before, so the threads meet once per step (PhaseTeam).

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/fail.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"

namespace kiln::detail {

namespace {

/// Multiply-adds per time step from which the units are cut into one part per thread: below
/// it a step (a few microseconds) is too short to pay for the threads meeting every step.
constexpr std::int64_t split_step_work = std::int64_t{1} << 19;
/// Units per part at least (a multiple of the widest SIMD vector of f32).
constexpr std::int64_t min_part_units = 32;

/// `parts` parts stepping through `phases` phases together: part p of phase k starts after
/// every part of phase k - 1 has finished. The threads parallel_for gives (however many) run
/// the parts: each first claims the part it claimed before (so the data a part keeps reading
/// stays in one core's cache), then any part of the phase nobody has claimed, then waits for
/// the phase to end. A thread that is late, or never comes (a busy pool runs everything on the
/// caller), leaves its parts to the others: every phase completes whoever runs it.
class PhaseTeam {
 public:
  PhaseTeam(int parts, std::int64_t phases)
      : parts_(parts), phases_(phases), claimed_(static_cast<std::size_t>(parts)) {}

  /// Runs fn(part, phase) for every part and phase. fn must not throw across the team: an
  /// exception is kept, the phase still counts as done, and the first one is rethrown here.
  template <class F>
  void run(F&& fn) {
    auto work = [&](std::int64_t begin, std::int64_t) { join(static_cast<int>(begin), fn); };
    parallel_for(parts_, 1, work);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct alignas(64) Counter {
    std::atomic<std::int64_t> value{0};
  };

  template <class F>
  void join(int first, F& fn) {
    for (std::int64_t k = done_.value.load(std::memory_order_acquire) / parts_; k < phases_; ++k) {
      for (int i = 0; i < parts_; ++i) {
        const int p = (first + i) % parts_;
        std::int64_t expected = k;
        if (!claimed_[static_cast<std::size_t>(p)].value.compare_exchange_strong(
                expected, k + 1, std::memory_order_acq_rel))
          continue;
        try {
          fn(p, k);
        } catch (...) {
          const std::lock_guard lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
        }
        done_.value.fetch_add(1, std::memory_order_acq_rel);
      }
      wait_for(parts_ * (k + 1));
    }
  }

  void wait_for(std::int64_t count) const {
    for (int spins = 0; done_.value.load(std::memory_order_acquire) < count; ++spins) {
      if (spins < 4096)
        __builtin_ia32_pause();
      else
        std::this_thread::yield();  // the thread we wait for may need this core
    }
  }

  const int parts_;
  const std::int64_t phases_;
  std::vector<Counter> claimed_;  // per part: the phases claimed so far
  Counter done_;                  // parts finished, over all phases
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

/// The units [begin, end) of each part: as many parts as threads when a step is long enough,
/// cut at multiples of 16.
std::vector<std::int64_t> part_bounds(std::int64_t batch, std::int64_t units) {
  std::int64_t parts = 1;
  if (batch * units * 4 * units >= split_step_work)
    parts = std::min<std::int64_t>(num_threads(), units / min_part_units);
  parts = std::max<std::int64_t>(parts, 1);
  std::vector<std::int64_t> bounds{0};
  for (std::int64_t p = 1; p < parts; ++p) bounds.push_back(units * p / parts / 16 * 16);
  bounds.push_back(units);
  return bounds;
}

int to_int(std::int64_t v) { return static_cast<int>(v); }

/// The unary row kernel of p for T (sigmoid, tanh), as this process's instruction set runs it.
template <class T>
UnaryRowFn unary_row(Prim p) {
  const DType dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  return reinterpret_cast<UnaryRowFn>(row_kernel(p, dtype, dtype));
}

// ------------------------------------------------------------------ lstm_sequence

/// Forward. Inputs: xp [T, B, 4U] (each step's x W + b), h0 [B, U], c0 [B, U], w [U, 4U];
/// output y [T, B, S U], S = 2 (h_t, c_t) or 6 (also the gate activations i, f, g, o).
template <class T>
void lstm_forward(const KernelCall& call) {
  const ArrayRef& xp = call.inputs[0];
  const T* h0 = call.inputs[1].ptr<const T>();
  const T* c0 = call.inputs[2].ptr<const T>();
  const T* w = call.inputs[3].ptr<const T>();
  const std::int64_t steps = xp.shape[0], batch = xp.shape[1], units = call.inputs[1].shape[1];
  const std::int64_t row = call.out.shape[2];  // S U
  const bool save_gates = row == 6 * units;
  T* y = call.out.ptr<T>();
  if (steps == 0 || batch == 0) return;

  const std::vector<std::int64_t> bounds = part_bounds(batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  struct Part {
    std::int64_t u0 = 0, width = 0;
    std::vector<T> packed;  // w's columns of the part, [U, 4 width] (one part: w itself)
    std::vector<T> z;       // the step's pre-activations [B, 4 width]
    std::vector<T> tanh_c;  // [width]
    std::unique_ptr<Gemm<T>> first, later;  // h0 (rows U apart) and h_{t-1} in y (S U apart)
  };
  std::vector<Part> part(static_cast<std::size_t>(parts));
  for (int p = 0; p < parts; ++p) {
    Part& q = part[static_cast<std::size_t>(p)];
    q.u0 = bounds[static_cast<std::size_t>(p)];
    q.width = bounds[static_cast<std::size_t>(p) + 1] - q.u0;
    const std::int64_t n = 4 * q.width;
    if (parts > 1) {
      q.packed.resize(static_cast<std::size_t>(units * n));
      for (std::int64_t r = 0; r < units; ++r)
        for (std::int64_t g = 0; g < 4; ++g)
          std::memcpy(q.packed.data() + r * n + g * q.width, w + r * 4 * units + g * units + q.u0,
                      static_cast<std::size_t>(q.width) * sizeof(T));
    }
    q.z.resize(static_cast<std::size_t>(batch * n));
    q.tanh_c.resize(static_cast<std::size_t>(q.width));
    const GemmShape shape{to_int(batch), to_int(n), to_int(units), false, to_int(units), to_int(n)};
    q.first = std::make_unique<Gemm<T>>(shape);
    GemmShape later = shape;
    later.lda = to_int(row);
    q.later = std::make_unique<Gemm<T>>(later);
  }
  const UnaryRowFn sigmoid = unary_row<T>(Prim::sigmoid), tanh = unary_row<T>(Prim::tanh);

  const auto step = [&](int p, std::int64_t t) {
    Part& q = part[static_cast<std::size_t>(p)];
    const std::int64_t wd = q.width, u0 = q.u0;
    const T* h_prev = t == 0 ? h0 : y + (t - 1) * batch * row;
    const T* c_prev = t == 0 ? c0 : y + (t - 1) * batch * row + units;
    const std::int64_t prev_ld = t == 0 ? units : row;
    (t == 0 ? *q.first : *q.later)(h_prev, parts > 1 ? q.packed.data() : w, q.z.data());
    for (std::int64_t b = 0; b < batch; ++b) {
      T* z = q.z.data() + b * 4 * wd;
      const T* x = xp.ptr<const T>() + (t * batch + b) * 4 * units;
      for (std::int64_t g = 0; g < 4; ++g)
        for (std::int64_t j = 0; j < wd; ++j) z[g * wd + j] += x[g * units + u0 + j];
      sigmoid(z, 1, z, 2 * wd);  // i, f
      tanh(z + 2 * wd, 1, z + 2 * wd, wd);
      sigmoid(z + 3 * wd, 1, z + 3 * wd, wd);
      const T* cp = c_prev + b * prev_ld + u0;
      T* out = y + (t * batch + b) * row;
      T* c = out + units + u0;
      for (std::int64_t j = 0; j < wd; ++j) c[j] = z[wd + j] * cp[j] + z[j] * z[2 * wd + j];
      tanh(c, 1, q.tanh_c.data(), wd);
      T* h = out + u0;
      for (std::int64_t j = 0; j < wd; ++j)
        h[j] = z[3 * wd + j] * q.tanh_c[static_cast<std::size_t>(j)];
      if (save_gates)
        for (std::int64_t g = 0; g < 4; ++g)
          std::memcpy(out + (2 + g) * units + u0, z + g * wd,
                      static_cast<std::size_t>(wd) * sizeof(T));
    }
  };
  PhaseTeam(parts, steps).run(step);
}

// ------------------------------------------------------------------ lstm_sequence_grad

/// Backward. Inputs: g [T, B, 6U] (the gradient of lstm_sequence's output; its gate columns
/// are ignored), y [T, B, 6U] (that output, gates saved), h0, c0, w [U, 4U]. Output r [T, B,
/// 7U]: per step t, the pre-activation gradient dz_t (4U, gates i, f, g, o), h_{t-1} (U) and
/// the gradients of the state entering step t, dh_{t-1} and dc_{t-1} (U each).
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

  const std::vector<std::int64_t> bounds = part_bounds(batch, units);
  const int parts = static_cast<int>(bounds.size()) - 1;
  struct Part {
    std::int64_t u0 = 0, width = 0;
    std::vector<T> packed;  // w's rows of the part, transposed: [4U, width]
    std::vector<T> tanh_c;  // [width]
    std::unique_ptr<Gemm<T>> gemm;
  };
  std::vector<Part> part(static_cast<std::size_t>(parts));
  for (int p = 0; p < parts; ++p) {
    Part& q = part[static_cast<std::size_t>(p)];
    q.u0 = bounds[static_cast<std::size_t>(p)];
    q.width = bounds[static_cast<std::size_t>(p) + 1] - q.u0;
    q.packed.resize(static_cast<std::size_t>(4 * units * q.width));
    transpose_matrix(q.packed.data(), w + q.u0 * 4 * units, sizeof(T), 4 * units, q.width,
                     4 * units);
    q.tanh_c.resize(static_cast<std::size_t>(q.width));
    // dh_{t-1}[:, part] = dz_t [B, 4U] (rows 7U apart in r) times packed, into r's dh column.
    GemmShape shape{to_int(batch), to_int(q.width), to_int(4 * units),
                    false,         to_int(rrow),    to_int(q.width)};
    shape.ldc = to_int(rrow);
    q.gemm = std::make_unique<Gemm<T>>(shape);
  }
  const UnaryRowFn tanh = unary_row<T>(Prim::tanh);

  // Phase k: part p's dh_{s} from step s + 1's dz (k > 0), then the gate math of step
  // s = T - 1 - k; the last phase (k = T) only the GEMM of step 0.
  const auto phase = [&](int p, std::int64_t k) {
    Part& q = part[static_cast<std::size_t>(p)];
    const std::int64_t wd = q.width, u0 = q.u0;
    const std::int64_t s = steps - 1 - k;
    if (k > 0) {
      T* next = r + (s + 1) * batch * rrow;
      (*q.gemm)(next, q.packed.data(), next + 5 * units + u0);
    }
    if (s < 0) return;
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* yr = y + (s * batch + b) * yrow;
      const T* gr = gy + (s * batch + b) * yrow;
      T* rr = r + (s * batch + b) * rrow;
      const T* carry = k > 0 ? r + ((s + 1) * batch + b) * rrow : nullptr;  // dh_s, dc_s
      const T* h_prev = s == 0 ? h0 + b * units : yr - batch * yrow;
      const T* c_prev = s == 0 ? c0 + b * units : yr - batch * yrow + units;
      const T* gi = yr + 2 * units + u0;
      const T* gf = gi + units;
      const T* gg = gf + units;
      const T* go = gg + units;
      tanh(yr + units + u0, 1, q.tanh_c.data(), wd);
      for (std::int64_t j = 0; j < wd; ++j) {
        const std::int64_t u = u0 + j;
        const T dh = gr[u] + (carry ? carry[5 * units + u] : T(0));
        const T tc = q.tanh_c[static_cast<std::size_t>(j)];
        const T dc =
            gr[units + u] + (carry ? carry[6 * units + u] : T(0)) + dh * go[j] * (T(1) - tc * tc);
        const T i = gi[j], f = gf[j], g = gg[j], o = go[j];
        rr[u] = dc * g * i * (T(1) - i);
        rr[units + u] = dc * c_prev[u] * f * (T(1) - f);
        rr[2 * units + u] = dc * i * (T(1) - g * g);
        rr[3 * units + u] = dh * tc * o * (T(1) - o);
        rr[4 * units + u] = h_prev[u];
        rr[6 * units + u] = dc * f;
      }
    }
  };
  PhaseTeam(parts, steps + 1).run(phase);
}

/// lstm_weight_grad: r [T, B, 7U] (lstm_sequence_grad's output) -> the recurrent kernel's
/// gradient [U, 4U] = the sum over steps and rows of h_{t-1}^T dz_t, one GEMM over T B rows.
template <class T>
void lstm_weight_gradient(const KernelCall& call) {
  const ArrayRef& r = call.inputs[0];
  const std::int64_t rows = r.shape[0] * r.shape[1], units = call.out.shape[0];
  T* out = call.out.ptr<T>();
  if (rows == 0) {
    std::fill(out, out + units * 4 * units, T(0));
    return;
  }
  const GemmShape shape{to_int(units), to_int(4 * units), to_int(rows),
                        true,          to_int(7 * units), to_int(7 * units)};
  const T* base = r.ptr<const T>();
  const Gemm<T> gemm(shape);
  gemm(base + 4 * units, base, out);
}

template <class T>
void run_recurrent_typed(const KernelCall& call) {
  switch (call.prim) {
    case Prim::lstm_sequence:
      return lstm_forward<T>(call);
    case Prim::lstm_sequence_grad:
      return lstm_backward<T>(call);
    case Prim::lstm_weight_grad:
      return lstm_weight_gradient<T>(call);
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

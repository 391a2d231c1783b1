#pragma once
// What the fused recurrences (kernels/recurrent.cpp: LSTM; recurrent_gru.cpp: GRU) share: the
// cut of the units into one part per thread, the team that steps the parts through the time
// steps together, each part's gate panels, and per-instruction-set builds of the plain loops of
// the backward gate math.
//
// Each forward time step is one product (h_{t-1} times the recurrent kernel, in kiln's gate
// panels: PanelPart, kernels/recurrent_step_arch.hpp; the LSTM's adds x_t times the input kernel
// in the same panels) and the gate math on its output while that output is still in cache; a
// backward step is one product (the gate gradients times the kernel transposed, in gate panels
// too) and its gate math. With several threads the units are cut into parts, one per thread:
// part p owns units [u0, u1) of every gate, so its product reads only its columns of the kernel
// (packed contiguous, per call or, in a compiled forward, once: KeptParts; they stay in that
// core's cache from step to step) and its gate math needs nothing from the other parts. The
// parts of a step need the whole h of the step before, so the threads meet once per step
// (PhaseTeam).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/fail.hpp"
#include "core/storage.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"

namespace kiln::detail::recurrent {

/// Multiply-adds per time step from which the units are cut into one part per thread: below
/// it a step (a few microseconds) is too short to pay for the threads meeting every step.
constexpr std::int64_t split_step_work = std::int64_t{1} << 19;
/// Multiply-adds of the whole call from which it is split: waking the pool's thread costs tens
/// of microseconds (an LSTM(64) over 5 steps, batch 32, ran 92 us on one thread and 125 us
/// split).
constexpr std::int64_t split_call_work = std::int64_t{1} << 23;
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
inline std::vector<std::int64_t> part_bounds(std::int64_t steps, std::int64_t batch,
                                             std::int64_t units) {
  std::int64_t parts = 1;
  const std::int64_t step_work = batch * units * 4 * units;
  if (step_work >= split_step_work && steps * step_work >= split_call_work)
    parts = std::min<std::int64_t>(num_threads(), units / min_part_units);
  parts = std::max<std::int64_t>(parts, 1);
  std::vector<std::int64_t> bounds{0};
  for (std::int64_t p = 1; p < parts; ++p) bounds.push_back(units * p / parts / 16 * 16);
  bounds.push_back(units);
  return bounds;
}

inline int to_int(std::int64_t v) { return static_cast<int>(v); }

/// How a fused forward recurrence (Prim::lstm_sequence, gru_sequence) reads its inputs: input 0
/// is either the projection xp [T, B, G U] of every step (5 inputs) or, with the input kernel as
/// a sixth input, the inputs x [T, B, F] (or [B, T, F] where attrs.ints is {1}), which the
/// recurrence projects itself. Step t's rows start at t * step and are ld apart.
struct StepInputs {
  bool projects = false;      // x and its kernel (input 5) in place of xp
  std::int64_t features = 0;  // F, or 0 for xp
  std::int64_t steps = 0, batch = 0;
  std::int64_t step = 0, ld = 0;

  StepInputs(const KernelCall& call, std::string_view op, std::int64_t gate_columns) {
    if (call.inputs.size() != 5 && call.inputs.size() != 6)
      fail(op, "takes 5 or 6 inputs, got {}", call.inputs.size());
    const Shape& shape = call.inputs[0].shape;
    projects = call.inputs.size() == 6;
    const bool batch_major = projects && !call.attrs.ints.empty() && call.attrs.ints[0] == 1;
    features = projects ? shape[2] : 0;
    steps = shape[batch_major ? 1 : 0];
    batch = shape[batch_major ? 0 : 1];
    const std::int64_t row = projects ? features : gate_columns;
    step = batch_major ? row : batch * row;
    ld = batch_major ? steps * row : row;
  }
};

/// Asks for a part's columns [u0, u0 + width) of each of the `gates` blocks (`units` apart) of a
/// row of the input projection xp to be brought into L2. A forward step does this for the next
/// step's row while it works on this one: the whole xp is far larger than the caches, and left
/// to the hardware those reads came from memory while the row's gate math waited for them
/// (the adds of x took 10-12% of an LSTM(256) forward in a profile, 6% with this).
template <class T>
void prefetch_row_part(const T* row, int gates, std::int64_t units, std::int64_t u0,
                       std::int64_t width) {
  constexpr std::int64_t line = 64 / sizeof(T);  // elements per cache line
  for (int g = 0; g < gates; ++g)
    for (std::int64_t j = 0; j < width; j += line)
      __builtin_prefetch(row + g * units + u0 + j, 0, 2);
}

/// The gate panels (kernels/recurrent_step_arch.hpp) of a product with a kernel [k, gates U]
/// (`gates` blocks of `units` columns), in this process's instruction set: its panel function
/// and width.
struct GatePanels {
  GatePanelFn fn = nullptr;
  std::int64_t width = 0;  // columns of a panel
  std::int64_t units = 0;  // U
  int gates = 0;
  std::int64_t k = 0;     // rows of the kernel
  std::int64_t k_in = 0;  // rows of an input kernel ahead of them (0: none)

  /// A forward step's: h_{t-1} [B, U] times the recurrent kernel [U, gates U], after the step's
  /// inputs x_t [B, features] times the input kernel [features, gates U] when `features` > 0.
  static GatePanels of(DType dtype, std::int64_t units, int gates, std::int64_t features = 0) {
    const ElementwiseRowTable& table = elementwise_rows();
    return {table.gate_panel[dtype_index(dtype)],
            table.gate_panel_width[dtype_index(dtype)],
            units,
            gates,
            units,
            features};
  }
  /// A step's inputs x_t [B, features] times the input kernel [features, gates U] alone (no rows
  /// of h: the GRU's, whose candidate gate needs them apart from h W).
  static GatePanels inputs(DType dtype, std::int64_t units, int gates, std::int64_t features) {
    GatePanels g = of(dtype, units, gates, features);
    g.k = 0;
    return g;
  }
  /// Rows of a packed panel.
  [[nodiscard]] std::int64_t panel_rows() const { return k_in + k; }
  /// A backward step's: the gate gradients [B, gates U] times the recurrent kernel [U, gates U]
  /// transposed ([gates U, U], one block).
  static GatePanels transposed(DType dtype, std::int64_t units, int gates) {
    GatePanels g = of(dtype, units, 1);
    g.k = gates * units;
    return g;
  }
};

/// Memory for a part's packed panels: from 2 MiB on, huge-page blocks (allocate_huge_block:
/// 2 MiB-aligned mappings advised MADV_HUGEPAGE, kept for the next call); below, the storage's
/// block cache (allocate_block). A step reads all of its part's panels, 2.6 MiB for an LSTM(512)
/// on two threads; in 4 KiB pages its forward ran 0.5-3% slower (nine interleaved pairs, Zen 2).
/// The blocks were aligned_alloc's until 2026-12-06, freed after every call: each call faulted
/// its panels in again (eight page faults an LSTM(512) forward, about 2.5% of its time on a Zen
/// 4), and once the heap had held other buffers in 4 KiB pages (a train step run before) the
/// panels came back in those, where the advice does not reach.
template <class T>
struct PanelAllocator {
  using value_type = T;
  PanelAllocator() = default;
  template <class U>
  PanelAllocator(const PanelAllocator<U>& /*other*/) {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    void* p = bytes >= huge_page_bytes ? allocate_huge_block(bytes) : allocate_block(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) {
    if (n * sizeof(T) >= huge_page_bytes)
      free_huge_block(p, n * sizeof(T));
    else
      free_block(p, n * sizeof(T));
  }
  /// A resize leaves the new elements uninitialized: the packers write every element a panel
  /// reads (the zero columns past a part's units too), so zeroing them first only cost time (8%
  /// of the samples of a one-step LSTM(512) forward on the Xeon).
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void*>(p)) U;
    else
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const PanelAllocator<U>& /*other*/) const {
    return true;
  }
};

/// How many of the n elements from p are an infinity or a NaN (their exponent bits all ones):
/// integer tests the compiler vectorizes, which a sum of floats (rounded in order) is not.
template <class T>
std::int64_t not_finite_count(const T* p, std::int64_t n) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr auto exponent =
      static_cast<Bits>(sizeof(T) == 4 ? 0x7f800000ULL : 0x7ff0000000000000ULL);
  std::int64_t count = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    Bits bits;
    std::memcpy(&bits, p + e, sizeof bits);
    count += (bits & exponent) == exponent ? 1 : 0;
  }
  return count;
}

/// All n elements from p are zero (either sign): a recurrence's zero initial state.
template <class T>
bool all_zero(const T* p, std::int64_t n) {
  return std::all_of(p, p + n, [](T v) { return v == T(0); });
}

/// One part of a recurrence whose step product z = x + b + (in W_in + a W) runs in gate panels:
/// columns [u0, u0 + width) of every gate block of W_in [k_in, gates U] (when there is one) and
/// W [k, gates U], cut into `blocks` panels per gate (the last one part-filled when the panel
/// width does not divide the part's), their weights packed panel by panel (W_in's rows first),
/// and z [B, gates width] (each gate's columns side by side).
template <class T>
struct PanelPart {
  std::int64_t u0 = 0, width = 0, blocks = 0, batch = 0;
  std::vector<T, PanelAllocator<T>> packed;  // [gates blocks][k][panel width], zero past the units
  const T* source = nullptr;                 // pack()'s w, until every gate is packed
  const T* source_in = nullptr;              // pack()'s w_in
  std::int64_t gates_packed = 0;             // gates [0, gates_packed) are packed
  std::uint32_t finite_gates = 0;            // bit g: gate g's columns of w are all finite
  std::vector<T> product;                    // z
  std::vector<T> edge_x, edge_bias, edge_c;  // a part-filled panel's x, b and z, zero-padded

  PanelPart(const GatePanels& g, std::int64_t begin, std::int64_t end, std::int64_t rows)
      : u0(begin), width(end - begin), blocks((width + g.width - 1) / g.width), batch(rows) {
    product.resize(static_cast<std::size_t>(batch * g.gates * width));
    if (width % g.width != 0) {
      edge_x.resize(static_cast<std::size_t>(batch * g.width));
      edge_bias.resize(static_cast<std::size_t>(g.width));
      edge_c.resize(static_cast<std::size_t>(batch * g.width));
    }
  }

  /// Bytes of the part's buffers.
  [[nodiscard]] std::int64_t bytes() const {
    return static_cast<std::int64_t>(sizeof(T) * (packed.size() + product.size() + edge_x.size() +
                                                  edge_bias.size() + edge_c.size()));
  }

  /// Packs the part's columns of w_in [k_in, gates U] and w [k, gates U] (each read only when it
  /// has rows), on the thread that runs the part, so they land in its core's cache: a gate's
  /// panels at a time, each just before the first product that runs them (product_of), so a
  /// gate's panels (640 KiB for an LSTM(512) on two threads) are still in L2 when its first tile
  /// reads them (packing them all up front wrote more than L2 holds before the first product
  /// read them back; a one-step LSTM(512) forward on the Xeon, batch 64, ran 0.87 ms against
  /// 0.98-1.00 with that and the zero fill of the whole buffer). Row by row of the sources, each
  /// row's run of the part's columns read once, front to back, and dealt out to the panels (copying
  /// a panel's rows one after the other read the sources a panel's width at a time, a row apart:
  /// with the copies' calls, 1.7% of an LSTM(512) forward on the Zen 2).
  void pack(const GatePanels& g, const T* w, const T* w_in = nullptr) {
    packed.resize(static_cast<std::size_t>(g.gates * blocks * g.panel_rows() * g.width));
    source = w;
    source_in = w_in;
    gates_packed = 0;
    finite_gates = 0;
  }

  /// Packs gate `gate`'s panels from the sources pack() named.
  void pack_gate(const GatePanels& g, std::int64_t gate) {
    const std::int64_t nr = g.width, ld = g.gates * g.units, rows = g.panel_rows();
    std::int64_t not_finite = 0;           // of the gate's columns of w (finite_gates)
    const std::int64_t full = width / nr;  // full panels per gate
    const std::int64_t rest = width - full * nr;
    for (std::int64_t row = 0; row < rows; ++row) {
      const T* src = (row < g.k_in ? source_in + row * ld : source + (row - g.k_in) * ld) +
                     gate * g.units + u0;
      T* to = packed.data() + (gate * blocks * rows + row) * nr;
      for (std::int64_t block = 0; block < full; ++block)
        std::copy_n(src + block * nr, nr, to + block * rows * nr);
      if (rest > 0) {
        T* last = to + full * rows * nr;
        std::copy_n(src + full * nr, rest, last);
        std::fill(last + rest, last + nr, T(0));
      }
      if (row >= g.k_in) not_finite |= not_finite_count(src, width);
    }
    if (not_finite == 0) finite_gates |= std::uint32_t{1} << gate;
  }

  /// Packs the part's columns of w^T, w [U, k] (a backward step's panels: g from
  /// GatePanels::transposed), on the thread that runs the part.
  void pack_transposed(const GatePanels& g, const T* w) {
    const std::int64_t nr = g.width;
    packed.resize(static_cast<std::size_t>(blocks * g.k * nr));
    for (std::int64_t block = 0; block < blocks; ++block) {
      const std::int64_t j0 = block * nr, cols = std::min(nr, width - j0);
      T* panel = packed.data() + block * g.k * nr;
      for (std::int64_t j = 0; j < cols; ++j) {
        const T* row = w + (u0 + j0 + j) * g.k;
        for (std::int64_t p = 0; p < g.k; ++p) panel[p * nr + j] = row[p];
      }
      if (cols < nr)
        for (std::int64_t p = 0; p < g.k; ++p)
          std::fill(panel + p * nr + cols, panel + (p + 1) * nr, T(0));
    }
    gates_packed = g.gates;
  }

  /// z = x + b + (in W_in + h W) over the part's columns: h [B, k] with rows ldh apart (read only
  /// when g.k > 0), x the step's [B, gates U] with rows ldx apart (0: one row for all; null: no
  /// x), b [gates U], `in` the step's inputs [B, k_in] with rows ldin apart (read only when
  /// g.k_in > 0); next_x is the next step's x (or null), asked for into the cache while the last
  /// panel runs. `zero_h`: h is all zeros, so h W is left out of each gate whose columns of w are
  /// finite (else 0 times an infinity or a NaN must show as NaN).
  void product_of(const GatePanels& g, const T* h, std::int64_t ldh, const T* x, std::int64_t ldx,
                  const T* bias, const T* next_x, const T* in = nullptr, std::int64_t ldin = 0,
                  bool zero_h = false) {
    const std::int64_t nr = g.width, ldz = g.gates * width, rows = g.panel_rows();
    GatePanelArgs args;
    args.a = h;
    args.lda = ldh;
    args.in = in;
    args.ldin = ldin;
    args.k_in = g.k_in;
    args.rows = batch;
    args.k = g.k;
    for (std::int64_t gate = 0; gate < g.gates; ++gate)
      for (std::int64_t block = 0; block < blocks; ++block) {
        if (gate == gates_packed) pack_gate(g, gates_packed++);
        args.k = zero_h && (finite_gates >> gate & 1U) != 0 ? 0 : g.k;
        const std::int64_t j0 = block * nr, cols = std::min(nr, width - j0);
        const T* xs = x != nullptr ? x + gate * g.units + u0 + j0 : nullptr;
        args.b = packed.data() + (gate * blocks + block) * rows * nr;
        // The panels lie in the order they run: the next one follows, and after the last the
        // first, which the next step runs first.
        const bool last = gate + 1 == g.gates && block + 1 == blocks;
        args.next_b = last ? packed.data() : static_cast<const T*>(args.b) + rows * nr;
        args.next_b_bytes = rows * nr * static_cast<std::int64_t>(sizeof(T));
        args.next_x = x == nullptr         ? nullptr
                      : block + 1 < blocks ? xs + nr
                      : gate + 1 < g.gates ? x + (gate + 1) * g.units + u0
                      : next_x != nullptr  ? next_x + u0
                                           : nullptr;
        T* z = product.data() + gate * width + j0;
        if (cols == nr) {
          args.x = xs;
          args.ldx = ldx;
          args.bias = bias + gate * g.units + u0 + j0;
          args.c = z;
          args.ldc = ldz;
          g.fn(args);
          continue;
        }
        const std::size_t bytes = static_cast<std::size_t>(cols) * sizeof(T);
        if (x != nullptr)
          for (std::int64_t b = 0; b < batch; ++b)
            std::memcpy(edge_x.data() + b * nr, xs + b * ldx, bytes);  // the rest stays zero
        std::memcpy(edge_bias.data(), bias + gate * g.units + u0 + j0, bytes);
        args.x = x != nullptr ? edge_x.data() : nullptr;
        args.ldx = nr;
        args.bias = edge_bias.data();
        args.c = edge_c.data();
        args.ldc = nr;
        g.fn(args);
        for (std::int64_t b = 0; b < batch; ++b)
          std::memcpy(z + b * ldz, edge_c.data() + b * nr, bytes);
      }
  }
};

/// The parts a forward call steps through (one or two sets per thread: the GRU's input
/// projection has its own), and where they live: in a compiled plan whose weights are fixed
/// (KernelCall::fixed: variables' values or constants), in the node's KernelMemo, packed by
/// the first call and kept for the later ones as long as the weights' buffers and the call's
/// sizes stay the same; else made for this call alone. A Part has bytes().
template <class Part>
class KeptParts {
 public:
  /// Parts for `call`, whose inputs `weights` are what the parts pack; `bounds` (the unit cut)
  /// and `more` are everything else they depend on (batch, features, panel width).
  KeptParts(const KernelCall& call, std::span<const int> weights,
            const std::vector<std::int64_t>& bounds, std::initializer_list<std::int64_t> more)
      : memo_(call.memo) {
    std::vector<std::int64_t> sizes = bounds;
    sizes.insert(sizes.end(), more);
    if (memo_ == nullptr || !KernelMemo::all_fixed(call, weights)) return;
    kept_ = dynamic_cast<State*>(memo_->find(call, weights));
    if (kept_ != nullptr && kept_->sizes == sizes) return;
    auto fresh = std::make_unique<State>();
    fresh->sizes = std::move(sizes);
    kept_ = fresh.get();
    memo_->keep(call, weights, std::move(fresh));
  }
  /// Set `set` (0 or 1) of `count` parts: part p is make(p), unless the set was kept whole from
  /// an earlier call (one that failed while making it left it short: it is made again).
  template <class Make>
  std::vector<Part>& parts(int set, int count, Make make) {
    std::vector<Part>& parts =
        (kept_ != nullptr ? kept_->parts : own_)[static_cast<std::size_t>(set)];
    if (static_cast<int>(parts.size()) == count) return parts;
    if (kept_ != nullptr) kept_->packed = false;
    parts.clear();
    for (int p = 0; p < count; ++p) parts.push_back(make(static_cast<std::size_t>(p)));
    return parts;
  }
  /// Whether the parts were packed by an earlier call (their weights are as they were then).
  [[nodiscard]] bool packed() const { return kept_ != nullptr && kept_->packed; }
  /// After a call that packed every part: kept ones are packed from now on (and counted in
  /// memory_stats()).
  void done() {
    if (kept_ == nullptr || kept_->packed) return;
    std::int64_t bytes = 0;
    for (const std::vector<Part>& set : kept_->parts)
      for (const Part& part : set) bytes += part.bytes();
    memo_->count(bytes);
    kept_->packed = true;
  }

 private:
  struct State final : KernelMemo::State {
    std::vector<std::int64_t> sizes;
    std::vector<Part> parts[2];
    bool packed = false;
  };
  KernelMemo* memo_;
  State* kept_ = nullptr;
  std::vector<Part> own_[2];
};

/// A function of the backward gate math, compiled for each instruction set: Body is a plain
/// loop (always_inline) that the compiler vectorizes at the width of the target it is inlined
/// into. for_this_isa picks the build for simd_level() (which KILN_SIMD lowers). Each build is
/// the same arithmetic; with FMA (avx2, avx512) some products and sums round once, not twice.
template <class A, void (*Body)(const A&)>
void on_sse2(const A& a) {
  Body(a);
}
template <class A, void (*Body)(const A&)>
[[gnu::target("avx2,fma")]] void on_avx2(const A& a) {
  Body(a);
}
template <class A, void (*Body)(const A&)>
[[gnu::target("avx512f,avx2,fma")]] void on_avx512(const A& a) {
  Body(a);
}
template <class A, void (*Body)(const A&)>
void (*for_this_isa())(const A&) {
  switch (simd_level()) {
    case SimdLevel::avx512:
      return &on_avx512<A, Body>;
    case SimdLevel::avx2:
      return &on_avx2<A, Body>;
    case SimdLevel::sse2:
      break;
  }
  return &on_sse2<A, Body>;
}

/// The GRU kernels (recurrent_gru.cpp), for float and double.
template <class T>
void gru_forward(const KernelCall& call);
template <class T>
void gru_backward(const KernelCall& call);

}  // namespace kiln::detail::recurrent

#pragma once
// The table of elementwise row kernels that each instruction-set build exports, and how
// the dispatcher (elementwise.cpp) indexes it. Kept free of xsimd so that only the
// per-arch translation units see SIMD code.

#include <cstddef>
#include <cstdint>

#include "kiln/dtype.hpp"
#include "primitives/primitive.hpp"

namespace kiln::detail {

/// The row of each KILN_UNARY and each KILN_BINARY primitive in the row tables, in the order
/// of primitives.def (cast and where have tables of their own).
enum class UnaryRow : std::uint8_t {
#define KILN_UNARY(name, accepts, output, kernel, label, grad) name,
#include "primitives/primitives.def"
};
enum class BinaryRow : std::uint8_t {
#define KILN_BINARY(name, accepts, output, kernel, label, grad) name,
#include "primitives/primitives.def"
};
inline constexpr std::size_t num_unary_rows = 0
#define KILN_UNARY(name, accepts, output, kernel, label, grad) +1
#include "primitives/primitives.def"
    ;
inline constexpr std::size_t num_binary_rows = 0
#define KILN_BINARY(name, accepts, output, kernel, label, grad) +1
#include "primitives/primitives.def"
    ;
/// Primitive -> its row (0 for primitives without one).
struct PrimitiveRows {
  std::uint8_t row[num_primitives];  // a plain array: per-arch units instantiate no std templates
};
inline constexpr PrimitiveRows row_of_primitive = [] {
  PrimitiveRows rows{};
#define KILN_UNARY(name, accepts, output, kernel, label, grad) \
  rows.row[static_cast<std::size_t>(Prim::name)] = static_cast<std::uint8_t>(UnaryRow::name);
#define KILN_BINARY(name, accepts, output, kernel, label, grad) \
  rows.row[static_cast<std::size_t>(Prim::name)] = static_cast<std::uint8_t>(BinaryRow::name);
#include "primitives/primitives.def"
  return rows;
}();

constexpr std::size_t dtype_index(DType t) { return static_cast<std::size_t>(t); }
/// The row of a KILN_UNARY primitive.
constexpr std::size_t unary_row_index(Prim p) {
  return row_of_primitive.row[static_cast<std::size_t>(p)];
}
/// The row of a KILN_BINARY primitive.
constexpr std::size_t binary_row_index(Prim p) {
  return row_of_primitive.row[static_cast<std::size_t>(p)];
}

/// out[i] = f(in[i * in_stride]) for i < n. in_stride is 0 or 1; out is contiguous.
using UnaryRowFn = void (*)(const void* in, std::int64_t in_stride, void* out, std::int64_t n);
/// out[i] = f(a[i * a_stride], b[i * b_stride]); strides are 0 or 1.
using BinaryRowFn = void (*)(const void* a, std::int64_t a_stride, const void* b,
                             std::int64_t b_stride, void* out, std::int64_t n);
/// out[i] = cond[i * cond_stride] ? a[i * a_stride] : b[i * b_stride]; strides are 0 or 1.
using WhereRowFn = void (*)(const void* cond, std::int64_t cond_stride, const void* a,
                            std::int64_t a_stride, const void* b, std::int64_t b_stride, void* out,
                            std::int64_t n);

/// The cast row from dtype type From to dtype type To (kernels/convert.hpp's storage rules) where
/// either is an 8-, 4- or 2-bit dtype's type: scalar integer code, defined and explicitly
/// instantiated in kernels/cast_narrow.cpp only, so every instruction set's table shares the one
/// baseline copy and none is compiled with per-ISA flags.
template <class From, class To>
void narrow_cast_row(const void* in, std::int64_t in_stride, void* out, std::int64_t n);

/// Copies `rows` rows of `row_bytes` bytes: row r from src + r * src_row_stride (in bytes; 0
/// repeats one row) to dst + r * row_bytes. The two ranges do not overlap.
using CopyRowsFn = void (*)(const void* src, std::int64_t src_row_stride, void* dst,
                            std::int64_t row_bytes, std::int64_t rows);
/// Copies `bytes` bytes from src to dst (which do not overlap; any alignment and length) with
/// non-temporal stores of the instruction set's full vector width for the aligned middle of dst
/// and plain stores for its unaligned head and tail. The caller fences (sfence) before the
/// result is read by another thread.
using StreamCopyFn = void (*)(void* dst, const void* src, std::int64_t bytes);
/// out[0, n) = the softmax (or log_softmax) of the row in[0, n), n >= 1 (in may be out), asking
/// for the n elements at next (the caller's next row, or null) on the way, and for those at
/// next_out too (the row the caller writes next, or null), for writing: the softmax and
/// log_softmax primitives' rows, kernels/softmax_rows_arch.hpp.
using SoftmaxRowFn = void (*)(const void* in, void* out, std::int64_t n, const void* next,
                              void* next_out);
/// out[r] = the logsumexp of the row in[r * n, (r + 1) * n) for r < rows, rows >= 1 and n >= 1:
/// the logsumexp primitive's rows, each row's range read while the row before adds its exps
/// (kernels/softmax_rows_arch.hpp).
using LogSumExpRowsFn = void (*)(const void* in, void* out, std::int64_t rows, std::int64_t n);
/// out[0, n) = the row in[0, n) normalized, n >= 1 (in may be out): (x - mean) / sqrt(var +
/// epsilon) for layer_norm, x / sqrt(mean(x^2) + epsilon) for rms_norm, then times gamma[0, n)
/// and plus beta[0, n) where they are not null, asking for the n elements at next (the caller's
/// next row, or null) on the way: the layer_norm and rms_norm primitives' rows,
/// kernels/normalize_rows_arch.hpp.
using NormalizeRowFn = void (*)(const void* in, const void* gamma, const void* beta, void* out,
                                std::int64_t n, double epsilon, const void* next);
/// For each of `count` streams s (1 to max_sum_streams): acc[s][k] = the sum of x[s][r * ld + k]
/// over rows r = 0, 1, ... rows[s] - 1, added in that order, for k < cols (rows[s] >= 1; no acc
/// overlaps anything): the leaves of the pairwise float sums of kernels/reduce.cpp, several read
/// together (kernels/sum_rows_arch.hpp).
using SumRowsFn = void (*)(const void* const* x, const std::int64_t* rows, std::int64_t count,
                           std::int64_t cols, std::int64_t ld, void* const* acc);
inline constexpr std::int64_t max_sum_streams = 4;
/// The index of the extremum of row[0, n) (n >= 1) that argmax or argmin picks: NaN wins, and
/// of equal elements the first (or the last), kernels/arg_extremum_rows_arch.hpp.
using ArgExtremumRowFn = std::int64_t (*)(const void* row, std::int64_t n);
/// What a panel product of a fused recurrent step reads (GatePanelArgs, LstmPanelArgs), in
/// elements of the panel's dtype: for rows r < rows, the sums over q < k_in of in[r][q] b[q] and
/// over p < k of a[r][p] b[k_in + p], in that order, where b is the panel [k_in + k][its width],
/// contiguous. k_in is 0 where the step has no input rows (then `in` is not read), and k 0 where
/// it has no rows of a (then `a` is not read); rows of in and a are ldin and lda apart. next_b is
/// the panel the caller runs next (or null) and next_b_bytes its bytes, asked for into L2 a
/// slice per tile.
struct PanelProductArgs {
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* in = nullptr;
  std::int64_t ldin = 0, k_in = 0;
  const void* b = nullptr;
  std::int64_t rows = 0, k = 0;
  const void* next_b = nullptr;
  std::int64_t next_b_bytes = 0;
};
/// One gate panel of a fused recurrent step (kernels/recurrent_step_arch.hpp): for each row
/// r < rows, c[r][0, w) = (x[r][0, w) + bias[0, w)) + the sums (PanelProductArgs), where w is the
/// table's gate_panel_width of the dtype. x may be null (then c[r] = bias + the sums). Rows of x
/// and c are ldx and ldc apart; c overlaps none of the others. next_x, when not null, is where
/// the caller's next panel's x starts (asked for into the cache on the way).
struct GatePanelArgs : PanelProductArgs {
  const void* x = nullptr;
  std::int64_t ldx = 0;
  const void* bias = nullptr;
  void* c = nullptr;
  std::int64_t ldc = 0;
  const void* next_x = nullptr;
};
using GatePanelFn = void (*)(const GatePanelArgs& args);
/// The LSTM cell on a row of n units (kernels/recurrent_step_arch.hpp): with z's gate blocks
/// i, f, g, o at z + gate * z_gate_stride, c = sigmoid(f) c_prev + sigmoid(i) tanh(g) and
/// h = sigmoid(o) tanh(c); when gates is not null the four activations are stored at
/// gates + gate * gates_stride. Elements of the dtype; c and h overlap nothing else.
struct LstmCellArgs {
  const void* z = nullptr;
  std::int64_t z_gate_stride = 0;
  const void* c_prev = nullptr;
  void* c = nullptr;
  void* h = nullptr;
  void* gates = nullptr;
  std::int64_t gates_stride = 0;
  std::int64_t n = 0;
};
using LstmCellFn = void (*)(const LstmCellArgs& args);
/// One fused LSTM panel (kernels/recurrent_step_arch.hpp): a step's product and cell for the w
/// units of the panel (w = lstm_panel_units of the dtype: a vector) and every row r < rows. With
/// the panel b [k_in + k][4 w] (per row the gate blocks i, f, g, o of the w units, contiguous) and
/// bias [4 w] likewise, z = (x + bias) + the sums (PanelProductArgs), where x's gate blocks are
/// x_gate_stride apart (x may be null: z = bias + the sums); then, as LstmCellArgs's cell,
/// c[r] = sigmoid(z_f) c_prev[r] + sigmoid(z_i) tanh(z_g), h[r] = sigmoid(z_o) tanh(c[r]) and,
/// when gates is not null, the four activations at gates[r] + gate * gates_stride. Each of x,
/// c_prev, c, h and gates holds w elements a row (a gate block) from the pointer; rows are ldx,
/// ld_c_prev and ld_out (c, h and gates) apart, and the outputs overlap no input.
struct LstmPanelArgs : PanelProductArgs {
  const void* x = nullptr;
  std::int64_t ldx = 0, x_gate_stride = 0;
  const void* bias = nullptr;
  const void* c_prev = nullptr;
  std::int64_t ld_c_prev = 0;
  void* c = nullptr;
  void* h = nullptr;
  void* gates = nullptr;
  std::int64_t ld_out = 0, gates_stride = 0;
};
using LstmPanelFn = void (*)(const LstmPanelArgs& args);
/// The GRU cell (Keras's reset_after) on a row of n units (kernels/recurrent_step_arch.hpp): with
/// the gate blocks z, r, n of x (x_t W_in), b_in and q (h_{t-1} W + b_rec) each at its own
/// stride, z = sigmoid(x_z + b_z + q_z), r = sigmoid(x_r + b_r + q_r),
/// n = tanh(x_n + b_n + r q_n) and h = z h_prev + (1 - z) n; when saved is not null, z, r, n and
/// q_n are stored at saved + k * saved_stride. Elements of the dtype; h overlaps nothing else.
struct GruCellArgs {
  const void* x = nullptr;
  std::int64_t x_gate_stride = 0;
  const void* b_in = nullptr;
  std::int64_t b_gate_stride = 0;
  const void* q = nullptr;
  std::int64_t q_gate_stride = 0;
  const void* h_prev = nullptr;
  void* h = nullptr;
  void* saved = nullptr;
  std::int64_t saved_stride = 0;
  std::int64_t n = 0;
};
using GruCellFn = void (*)(const GruCellArgs& args);
/// Row kernels of one instruction set. A null entry means the primitive does not accept
/// that input dtype (front ends reject it first). Plain arrays, not std::array: the
/// per-arch translation units must not instantiate shared std templates (see
/// elementwise_arch.hpp).
struct ElementwiseRowTable {
  const char* isa_name = "";
  UnaryRowFn unary[num_unary_rows][num_dtypes] = {};  // [prim][input dtype]
  UnaryRowFn cast[num_dtypes][num_dtypes] = {};       // [from][to]
  BinaryRowFn binary[num_binary_rows][num_dtypes] = {};
  WhereRowFn where[num_dtypes] = {};               // [dtype of a and b]
  CopyRowsFn copy_rows = nullptr;                  // short rows in full-width vector moves
  StreamCopyFn stream_copy = nullptr;              // large outputs, non-temporal stores
  SoftmaxRowFn softmax_row[num_dtypes] = {};       // floating-point dtypes only
  SoftmaxRowFn log_softmax_row[num_dtypes] = {};   // floating-point dtypes only
  LogSumExpRowsFn logsumexp_rows[num_dtypes] = {};  // floating-point dtypes only
  NormalizeRowFn layer_norm_row[num_dtypes] = {};  // floating-point dtypes only
  NormalizeRowFn rms_norm_row[num_dtypes] = {};    // floating-point dtypes only
  SumRowsFn sum_rows[num_dtypes] = {};             // f32 and f64 only
  /// [dtype][argmax: 1, argmin: 0][the last of equal ones: 1, the first: 0]; the dtypes of 4 and
  /// 8 bytes ops compute in (f32, f64, i32, i64, u64) only.
  ArgExtremumRowFn arg_extremum_row[num_dtypes][2][2] = {};
  GatePanelFn gate_panel[num_dtypes] = {};         // f32 and f64 only
  std::int64_t gate_panel_width[num_dtypes] = {};  // its columns: two vectors of the dtype
  LstmPanelFn lstm_panel[num_dtypes] = {};         // AVX-512's f32 and f64 only
  std::int64_t lstm_panel_units[num_dtypes] = {};  // its units: a vector of the dtype
  LstmCellFn lstm_cell[num_dtypes] = {};           // f32 and f64 only
  GruCellFn gru_cell[num_dtypes] = {};             // f32 and f64 only
};

/// The tables built by elementwise_sse2.cpp, elementwise_avx2.cpp (AVX2 + FMA) and
/// elementwise_avx512.cpp (AVX-512F). Only call one the CPU supports.
const ElementwiseRowTable& elementwise_rows_sse2();
const ElementwiseRowTable& elementwise_rows_avx2();
const ElementwiseRowTable& elementwise_rows_avx512();

/// The instruction sets kiln has kernels for, lowest first. Each table's isa_name is the
/// level's name.
enum class SimdLevel : std::uint8_t { sse2, avx2, avx512 };
const char* simd_level_name(SimdLevel level);
const ElementwiseRowTable& elementwise_rows(SimdLevel level);

/// The highest level this CPU and its operating system can run: avx2 needs AVX2 and FMA,
/// avx512 also AVX-512F, each with the OS saving the wider registers (CPUID and XGETBV, via
/// __builtin_cpu_supports; xsimd 8.1's own check reads CPUID only).
SimdLevel cpu_simd_level();

/// The level KILN_SIMD names exactly (sse2, avx2 or avx512); -1 when it is unset, empty or
/// anything else.
int requested_simd_level();

/// The level every run-time-dispatched kernel uses, chosen once: the CPU's, or a lower one
/// that KILN_SIMD asks for (for testing). A request above the CPU's level gives the CPU's.
/// The elementwise row tables (and with them fused programs and the row copier) follow it,
/// and so does libxsmm's code generation for matmul (lib/kernels/matmul.cpp).
SimdLevel simd_level();

/// elementwise_rows(simd_level()).
const ElementwiseRowTable& elementwise_rows();

}  // namespace kiln::detail

#pragma once
// Generated loops for fused elementwise programs: one loop per program and layout (AVX2 on ymm
// registers, or AVX-512 on zmm registers, the level of the row kernels the process runs), with
// every intermediate value in a register, written at plan time by kiln's own code generator
// (on top of the xbyak assembler). The block interpreter of kernels/fused.hpp passes each
// instruction's results through L1 scratch and calls one row kernel per instruction and block;
// a generated loop reads each input once, computes the whole program on one vector and stores
// it. Each instruction is emitted as the same arithmetic as the row kernel it replaces (the
// formulas of kernels/elementwise_ops_arch.hpp, with their FMAs where the source has them), so
// a loop gives the row kernels' bits; tests/test_fused_loop.cpp holds it to that for every
// instruction it covers, at each level the CPU has.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/elementwise_table.hpp"

namespace kiln::detail {

struct FusedProgram;
struct FusedLayout;
struct FusedLoop;

/// The loop for `program` over `layout`, or null when the generator does not cover them:
/// an instruction other than f32 neg, abs, square, relu, sqrt, rsqrt, tanh, sigmoid, add, sub,
/// mul, div, maximum, minimum, the six comparisons (whose bool results, lane masks in a
/// register, only where and a cast to f32 may read) and where; an input or output that is not
/// f32; a gathered input other than a contiguous row or one value per row of a matrix (a bias
/// down the rows, a per-row scale: the generated code steps from row to row); more live values
/// than the vector registers hold (16 ymm, 32 zmm); `level` below avx2 or above what this CPU
/// runs (cpu_simd_level()). The loop computes vectors of `level`'s width, held to the row
/// kernels of that level: the program's own row functions may be of any level. Used by
/// run_fused only through fused_loop_for.
std::shared_ptr<const FusedLoop> generate_fused_loop(const FusedProgram& program,
                                                     const FusedLayout& layout, SimdLevel level);

/// Rows shorter than this keep the interpreter's blocks of whole rows. The generated code
/// walks the rows itself, but a row's last few elements (masked loads and a masked store,
/// slow on the Zen 3) and the step to the next row cost about as much as the row's own work
/// when rows are short. Measured on the Zen 3, tanh(a*c+b)*0.5 with a bias b, one thread, time
/// with the loop over time with the interpreter: rows of 20 (two vectors and a tail of 4)
/// 1.5x, 24 (three vectors) about 1.0, 40 0.85, 64 0.8, 128 to 4,096 0.6-0.8.
inline constexpr std::int64_t min_fused_loop_row = 64;

/// generate_fused_loop at simd_level(), the level of the row kernels this process runs, when
/// that is avx2 or avx512, KILN_FUSED_LOOPS is not 0 and the loop would not run rows shorter
/// than min_fused_loop_row; null otherwise (sse2 keeps the interpreter).
std::shared_ptr<const FusedLoop> fused_loop_for(const FusedProgram& program,
                                                const FusedLayout& layout);

/// How far ahead the loop's vector code asks for its streams, in bytes: loop_prefetch_bytes
/// (kernels/streaming.hpp) for a layout whose data comes from beyond the L2 caches (one in
/// short blocks) unless KILN_LOOP_PREFETCH is 0, 0 otherwise.
std::int64_t fused_loop_prefetch_bytes(const FusedLoop& loop);

/// How many generated loop codes are alive. Loops with the same program and the same inputs
/// held in registers share one code (written once per process while some plan uses it), so
/// rebuilding or retracing a function does not add any.
std::size_t live_fused_loop_codes();

/// How run_fused splits a loop's work between threads: `units` pieces of `unit_elements`
/// output elements each (the last may be shorter): blocks of a flat run, or rows of a matrix.
struct FusedLoopWork {
  std::int64_t units = 0;
  std::int64_t unit_elements = 0;
};
FusedLoopWork fused_loop_work(const FusedLoop& loop, const FusedLayout& layout);

/// Runs the loop over units [begin, end) of fused_loop_work: inputs[k] is input k's first
/// element, out the output's first (run_fused splits the units between threads and fences the
/// non-temporal stores of a streamed layout).
void run_fused_loop_range(const FusedLoop& loop, const FusedLayout& layout,
                          const void* const* inputs, void* out, std::int64_t begin,
                          std::int64_t end);

}  // namespace kiln::detail

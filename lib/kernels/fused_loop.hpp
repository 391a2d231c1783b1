#pragma once
// Generated loops for fused elementwise programs: one AVX2 loop per program and layout, with
// every intermediate value in a register, written at plan time by kiln's own code generator
// (on top of the xbyak assembler). The block interpreter of kernels/fused.hpp passes each
// instruction's results through L1 scratch and calls one row kernel per instruction and block;
// a generated loop reads each input once, computes the whole program on one vector and stores
// it. Each instruction is emitted as the same sequence of vector instructions as the AVX2 row
// kernel it replaces (the formulas of kernels/elementwise_ops_arch.hpp, with their FMAs where
// the source has them), so a loop gives the row kernels' bits; tests/test_fused_loop.cpp holds
// it to that for every instruction it covers.

#include <cstddef>
#include <cstdint>
#include <memory>

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
/// than the 16 vector registers hold; or no AVX2 and FMA on this CPU. Made for any instruction
/// set level; used by run_fused only through fused_loop_for.
std::shared_ptr<const FusedLoop> generate_fused_loop(const FusedProgram& program,
                                                     const FusedLayout& layout);

/// Rows shorter than this keep the interpreter's blocks of whole rows. The generated code
/// walks the rows itself, but a row's last few elements (masked loads and a masked store,
/// slow on the Zen 3) and the step to the next row cost about as much as the row's own work
/// when rows are short. Measured on the Zen 3, tanh(a*c+b)*0.5 with a bias b, one thread, time
/// with the loop over time with the interpreter: rows of 20 (two vectors and a tail of 4)
/// 1.5x, 24 (three vectors) about 1.0, 40 0.85, 64 0.8, 128 to 4,096 0.6-0.8.
inline constexpr std::int64_t min_fused_loop_row = 64;

/// generate_fused_loop when this process runs the AVX2 row kernels (simd_level() is avx2),
/// KILN_FUSED_LOOPS is not 0 and the loop would not run rows shorter than min_fused_loop_row;
/// null otherwise. The other levels keep the interpreter, whose bits a loop of another width
/// would not be held to.
std::shared_ptr<const FusedLoop> fused_loop_for(const FusedProgram& program,
                                                const FusedLayout& layout);

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

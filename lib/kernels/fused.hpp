#pragma once
// Fused elementwise kernels: a chain or tree of elementwise primitives over one output shape,
// run as a small register program over blocks of the output. Each block of up to
// fused_block elements stays in L1-resident scratch slots while every instruction runs the
// instruction set's row kernel on it, so each input is read once and the output written once.
// Where the AVX2 row kernels run, a compiled plan replaces this interpreter with one generated
// loop per program and layout (kernels/fused_loop.hpp) when the generator covers them.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "kernels/strided_loop.hpp"

namespace kiln::detail {

struct ElementwiseRowTable;
struct FusedLoop;

inline constexpr std::size_t max_fused_inputs = 8;
inline constexpr std::size_t max_fused_slots = 8;
inline constexpr std::size_t max_fused_ops = 48;
inline constexpr std::int64_t fused_block = 1024;
/// At most this many outputs besides the last instruction's (FusedOp::store): a group's loop.
inline constexpr std::size_t max_fused_extra_outputs = 4;
/// The data pointers a generated loop takes: its inputs', then its extra outputs'.
inline constexpr std::size_t max_fused_pointers = max_fused_inputs + max_fused_extra_outputs;

/// One instruction. An operand >= 0 is external input k; an operand < 0 is scratch slot
/// -(operand + 1). The last instruction writes the kernel's output (result_slot unused).
struct FusedOp {
  Prim prim = Prim::add;
  DType in_dtype = DType::f32;   // what the row kernel reads (a and b of where)
  DType out_dtype = DType::f32;  // what it writes
  std::array<std::int16_t, 3> operands{};
  std::int16_t result_slot = 0;
  /// >= 0: the result is also written to extra output `store`, element by element like the
  /// output (the loop of a group of fused steps, jit/plan_groups.cpp; generated loops only).
  std::int16_t store = -1;
  void (*fn)() = nullptr;  // the resolved row kernel, cast back to its type when run
};

/// How many operands an instruction of this primitive reads: 1 (unary), 2 (binary) or 3
/// (where).
inline std::size_t operand_count(Prim prim) {
  switch (info(prim).family) {
    case Family::unary:
      return 1;
    case Family::binary:
      return 2;
    default:
      return 3;
  }
}

struct FusedProgram {
  std::size_t num_inputs = 0;
  std::size_t num_slots = 0;
  /// Outputs written by instructions' `store` (their pointers follow the inputs'). Only a
  /// generated loop runs a program that has any: run_fused's interpreter does not write them.
  std::size_t num_extra_outputs = 0;
  std::vector<FusedOp> ops;
  /// The expression, for graph listings: "sigmoid(in0) * in1".
  std::string text;
};

/// Looks up each instruction's row kernel for this CPU. Throws if a dtype has no kernel.
void resolve_fused_program(FusedProgram& program);
/// The same from one instruction set's table (tests hold generated loops to the AVX2 rows).
void resolve_fused_program(FusedProgram& program, const ElementwiseRowTable& rows);

/// How a fused kernel reads one input over a block of output elements.
enum class FusedRead : std::uint8_t { flat, broadcast, gathered };

/// How run_fused walks one set of input and output layouts (shapes, strides and dtypes; not
/// addresses). A compiled plan computes it once per fused step, so a call only supplies data
/// pointers.
struct FusedLayout {
  enum class Mode : std::uint8_t {
    blocks,      // blocks of fused_block elements; strided inputs gathered per element run
    whole_rows,  // a matrix with rows of at most fused_block: blocks of whole rows
    long_rows,   // rows of 2,048 or more with strided inputs: walked row by row (needs refs)
  };
  Mode mode = Mode::blocks;
  std::int64_t total = 0;     // output elements
  std::int64_t out_size = 0;  // output element bytes
  std::size_t num_inputs = 0;
  std::size_t num_gathered = 0;
  bool stream_output = false;  // output larger than the last-level cache: non-temporal stores
  bool short_blocks = false;   // data beyond the L2 caches: blocks of 128 elements (blocks mode)
  CoalescedDims<max_fused_inputs + 1> dims;  // [0] the output's strides, [k + 1] input k's
  std::array<FusedRead, max_fused_inputs> how{};
  std::array<std::int64_t, max_fused_inputs> size{};  // input element bytes
  std::array<std::size_t, max_fused_inputs> gathered_inputs{};
  /// The generated loop of the program this layout was made for (kernels/fused_loop.hpp), set
  /// by whoever holds both (a compiled plan); null runs the block interpreter.
  std::shared_ptr<const FusedLoop> loop;
};

/// The layout of a fused kernel over these inputs (broadcast to out.shape, stride 0 on
/// broadcast dims, as the elementwise families receive them) and a contiguous out.
FusedLayout layout_fused(std::span<const ArrayRef> inputs, const ArrayRef& out);

/// Runs the program on data laid out as `layout` says: inputs[k] is input k's first element,
/// out the output's, and, for a program with extra outputs (whose layout has a generated loop),
/// inputs[num_inputs + e] extra output e's. The layout's mode must not be long_rows.
void run_fused(const FusedProgram& program, const FusedLayout& layout, const void* const* inputs,
               void* out);

/// Runs the program: layout_fused, then the run above (or the row walk of long_rows).
void run_fused(const FusedProgram& program, std::span<const ArrayRef> inputs, const ArrayRef& out);

/// Output elements per chunk of run_fused_group: each kernel of a group runs on one chunk before
/// the next kernel runs on it, so what one writes and the next reads is still in the core's L2
/// (64 KiB of f32 per input or output: Adam's group reads four and writes three). Adam's
/// updates of four [4096, 1024] variables (Zen 4, two threads, p10 of four rounds) took about
/// 11 ms in chunks of 8,192 to 32,768 elements, 11.8-12.2 in chunks of 4,096 and 13.9-14.4
/// ungrouped (docs/performance.md, "Optimizer updates in groups").
inline constexpr std::int64_t fused_group_chunk = 16 * fused_block;

/// Whether run_fused_group can run a layout: blocks mode with every input flat or one element,
/// and, with a generated loop, one flat run of elements (not rows).
bool runs_in_element_ranges(const FusedLayout& layout);

/// One fused kernel of a group: its program, layout (runs_in_element_ranges) and data.
struct FusedGroupMember {
  const FusedProgram* program = nullptr;
  const FusedLayout* layout = nullptr;
  std::array<const void*, max_fused_inputs> inputs{};
  void* out = nullptr;
};

/// Runs fused kernels over the same number of output elements as if one after the other, but
/// chunk by chunk (fused_group_chunk elements): chunk c of every member, in order, then chunk
/// c + 1. The result is that of running them in order when a member reads what another member
/// writes only at the element it computes (the caller's to ensure: jit/plan_groups.cpp). Each
/// input is read from memory once where separate runs read an earlier kernel's output back;
/// the optimizer updates of a variable and its slots are such a group. Chunks are split
/// between threads when the kernels are large.
void run_fused_group(std::span<const FusedGroupMember> members);

}  // namespace kiln::detail

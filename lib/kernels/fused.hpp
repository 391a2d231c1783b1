#pragma once
// Fused elementwise kernels: a chain or tree of elementwise primitives over one output shape,
// run as a small register program over blocks of the output. Each block of up to
// fused_block elements stays in L1-resident scratch slots while every instruction runs the
// instruction set's row kernel on it, so each input is read once and the output written once.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"

namespace kiln::detail {

inline constexpr std::size_t max_fused_inputs = 8;
inline constexpr std::size_t max_fused_slots = 8;
inline constexpr std::size_t max_fused_ops = 48;
inline constexpr std::int64_t fused_block = 1024;

/// One instruction. An operand >= 0 is external input k; an operand < 0 is scratch slot
/// -(operand + 1). The last instruction writes the kernel's output (result_slot unused).
struct FusedOp {
  Prim prim = Prim::add;
  DType in_dtype = DType::f32;   // what the row kernel reads (a and b of where)
  DType out_dtype = DType::f32;  // what it writes
  std::array<std::int16_t, 3> operands{};
  std::int16_t result_slot = 0;
  void (*fn)() = nullptr;  // the resolved row kernel, cast back to its type when run
};

struct FusedProgram {
  std::size_t num_inputs = 0;
  std::size_t num_slots = 0;
  std::vector<FusedOp> ops;
  /// The expression, for graph listings: "sigmoid(in0) * in1".
  std::string text;
};

/// Looks up each instruction's row kernel for this CPU. Throws if a dtype has no kernel.
void resolve_fused_program(FusedProgram& program);

/// Runs the program: inputs are broadcast to out.shape (stride 0 on broadcast dims), as the
/// elementwise families receive them; out is contiguous.
void run_fused(const FusedProgram& program, std::span<const ArrayRef> inputs, const ArrayRef& out);

}  // namespace kiln::detail

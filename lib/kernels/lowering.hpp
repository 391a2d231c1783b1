#pragma once
// How a primitive application becomes a kernel call: the rules that eager execution
// (ops/dispatch.cpp, run_kernel) and compiled plans (jit/plan.cpp, add_primitive) share, written
// once so that a fast path serves both modes.

#include <cstddef>
#include <cstdint>

#include "core/tensor_impl.hpp"
#include "kernels/kernel.hpp"

namespace kiln::detail {

/// How a kernel call reads input i of p.
enum class InputRead {
  as_is,       // the input's own layout (elementwise kernels take any strides, broadcast ones too)
  contiguous,  // a contiguous copy first (most non-elementwise kernels)
};

/// The read of input `which` of p, whose layout is `in` (data pointer not needed).
inline InputRead input_read(Prim p, std::size_t which, const ArrayRef& in) {
  if (is_elementwise(p) || p == Prim::dim_size) return InputRead::as_is;  // dim_size reads no data
  if (p == Prim::matmul && which < 2 && matmul_reads_in_place(in, static_cast<int>(which)))
    return InputRead::as_is;
  return is_contiguous_layout(in.shape, in.strides) ? InputRead::as_is : InputRead::contiguous;
}

/// Whether p over n output elements may run as one flat row-kernel call (when every input is
/// contiguous in the output's shape or a single element): small elementwise work.
inline bool flat_elementwise_candidate(Prim p, std::int64_t n, std::size_t num_inputs) {
  return is_elementwise(p) && n < flat_elementwise_limit && num_inputs <= 3;
}

/// The input whose dtype the flat row kernel runs in: where's condition is boolean, so its
/// value inputs decide.
inline std::size_t flat_dtype_input(std::size_t num_inputs) { return num_inputs == 3 ? 1 : 0; }

/// A flat row kernel's stride for an input of `in_numel` elements whose layout is contiguous
/// in the output's shape (`same_layout`): 0 for one broadcast element, 1 for a contiguous
/// input, or -1 when the call cannot be flat.
inline std::int64_t flat_stride(std::int64_t in_numel, bool same_layout) {
  if (in_numel == 1) return 0;
  return same_layout ? 1 : -1;
}

}  // namespace kiln::detail

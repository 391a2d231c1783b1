#pragma once
// The one lowering of a primitive application: how `p(inputs) -> out` becomes kernel calls.
//
// Eager execution (ops/dispatch.cpp) and the plan builder (jit/plan.cpp) both call lower() with
// a target of their own. The target answers what the inputs look like and carries out what
// lower() decides: the output is a view of input 0, or one flat row-kernel call, or a kernel
// call on strided refs (after contiguous copies of the inputs that need them). The eager target
// runs each decision at once on the tensors' memory, allocating only the output (and any
// copies); the plan target records it as a step whose addresses are bound at call time. Every
// rule lives here, so a new fast path is written once and serves both modes.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/tensor_impl.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"

namespace kiln::detail {

/// Where an input's elements are, without their address: what lowering decides from.
struct InputLayout {
  DType dtype = DType::f32;
  const Shape* shape = nullptr;
  const Shape* strides = nullptr;
  std::int64_t offset = 0;  // elements from the buffer's first element (views only)
};

/// Strides that let a tensor of (in_shape, in_strides) be read as out_shape (NumPy
/// broadcasting: stride 0 on broadcast dims).
Shape broadcast_strides(const Shape& in_shape, const Shape& in_strides, const Shape& out_shape);

/// Strides and element offset of a view.
struct ViewLayout {
  Shape strides;
  std::int64_t offset = 0;
};
/// The layout of movement primitive p's result as a view of an input laid out as (in_shape,
/// in_strides, in_offset), or nullopt when p has to copy (a reshape of a non-contiguous
/// group of dims, or a primitive that is never a view).
std::optional<ViewLayout> view_layout(Prim p, const Shape& in_shape, const Shape& in_strides,
                                      std::int64_t in_offset, const Attrs& attrs,
                                      const Shape& out_shape);

/// One elementwise row-kernel call over `count` contiguous output elements: input k is `count`
/// contiguous elements (stride 1) or one broadcast element (stride 0).
struct FlatCall {
  RowKernel fn = nullptr;  // row_kernel(p, ...): a UnaryRowFn, BinaryRowFn or WhereRowFn
  std::int32_t arity = 0;
  std::int64_t count = 0;
  std::array<std::int64_t, 3> strides{};
};

/// Runs a flat call on the inputs' first elements and the output's.
inline void run_flat(const FlatCall& call, const void* const* in, void* out) {
  const std::int64_t* st = call.strides.data();
  switch (call.arity) {
    case 1:
      reinterpret_cast<UnaryRowFn>(call.fn)(in[0], st[0], out, call.count);
      return;
    case 2:
      reinterpret_cast<BinaryRowFn>(call.fn)(in[0], st[0], in[1], st[1], out, call.count);
      return;
    default:
      reinterpret_cast<WhereRowFn>(call.fn)(in[0], st[0], in[1], st[1], in[2], st[2], out,
                                            call.count);
      return;
  }
}

/// Whether a kernel call reads input `which` of p (laid out as `in`) where it is, or needs a
/// contiguous copy first. Elementwise kernels take any strides, broadcast ones too; dim_size
/// reads no data; matmul reads some strided matrices in place (matmul_reads_in_place), and
/// reductions some strided rows (reduce_reads_in_place); every other kernel needs contiguous
/// inputs.
inline bool reads_in_place(Prim p, const Attrs& attrs, std::size_t which, const InputLayout& in) {
  if (is_elementwise(p) || p == Prim::dim_size) return true;
  if (is_contiguous_layout(*in.shape, *in.strides)) return true;
  const ArrayRef ref{nullptr, in.dtype, *in.shape, *in.strides};
  if (p == Prim::matmul) return which < 2 && matmul_reads_in_place(ref, static_cast<int>(which));
  return info(p).family == Family::reduce && reduce_reads_in_place(p, ref, attrs);
}

/// The layout a kernel reads an input in: broadcast to the output's shape for elementwise
/// kernels, the input's own otherwise (see KernelCall).
inline ArrayRef kernel_input_ref(Prim p, void* data, const InputLayout& in,
                                 const Shape& out_shape) {
  if (!is_elementwise(p) || *in.shape == out_shape)
    return ArrayRef{data, in.dtype, *in.shape, *in.strides};
  return ArrayRef{data, in.dtype, out_shape, broadcast_strides(*in.shape, *in.strides, out_shape)};
}

/// Lowers p(inputs) with attrs to an output of (out_dtype, out_shape), contiguous, through
/// `target`, which provides
///   std::size_t num_inputs() const;
///   InputLayout input(std::size_t i) const;    // input i as it is now (after copies)
///   R view(const ViewLayout& layout);           // the result is a view of input 0
///   R flat(const FlatCall& call);                // one row-kernel call
///   void make_contiguous(std::size_t i);         // read input i from a contiguous copy
///   R kernel();                                  // kernel_for(p) on kernel_input_ref of
///                                                // each input, then the output
/// exactly one of view, flat and kernel is called, and lower() returns what it returns (the
/// eager target returns the output tensor, so it is built in place).
template <class Target>
auto lower(Prim p, const Attrs& attrs, DType out_dtype, const Shape& out_shape, Target& target)
    -> decltype(target.kernel()) {
  const std::size_t count = target.num_inputs();
  if (info(p).family == Family::movement && count == 1) {
    const InputLayout in = target.input(0);
    if (std::optional<ViewLayout> layout =
            view_layout(p, *in.shape, *in.strides, in.offset, attrs, out_shape)) {
      return target.view(*layout);
    }
  }
  if (is_elementwise(p) && count <= 3) {
    const std::int64_t n = out_shape.numel();
    if (n < flat_elementwise_limit) {
      // Small work whose inputs are each contiguous in the output's shape or a single element:
      // one row kernel call, no stride bookkeeping.
      FlatCall call{nullptr, static_cast<std::int32_t>(count), n, {}};
      DType in_dtype = DType::f32;  // the row kernel's: where's value inputs', else input 0's
      bool flat = true;
      for (std::size_t i = 0; i < count && flat; ++i) {
        const InputLayout in = target.input(i);
        if (i == (count == 3 ? 1 : 0)) in_dtype = in.dtype;
        if (*in.shape == out_shape && is_contiguous_layout(*in.shape, *in.strides))
          call.strides[i] = 1;
        else if (in.shape->numel() == 1)
          call.strides[i] = 0;  // one element, broadcast
        else
          flat = false;
      }
      if (flat) {
        call.fn = row_kernel(p, in_dtype, out_dtype);
        return target.flat(call);
      }
    }
  }
  for (std::size_t i = 0; i < count; ++i)
    if (!reads_in_place(p, attrs, i, target.input(i))) target.make_contiguous(i);
  return target.kernel();
}

}  // namespace kiln::detail

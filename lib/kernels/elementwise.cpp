// The elementwise families (unary, binary, where): walk the broadcast inputs row by row
// and hand each row to the row kernel of the instruction set chosen for this CPU.

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <xsimd/config/xsimd_config.hpp>
#include <xsimd/config/xsimd_cpuid.hpp>

#include "core/fail.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"
#include "kernels/strided_loop.hpp"

namespace kiln::detail {

namespace {

/// Elements gathered from a non-unit-stride input per row-kernel call.
constexpr std::int64_t gather_block = 256;
/// Below this many output elements everything runs on the calling thread.
constexpr std::int64_t parallel_min_elements = std::int64_t{1} << 18;
/// Smallest piece of work worth handing to another thread.
constexpr std::int64_t parallel_grain = std::int64_t{1} << 16;

const ElementwiseRowTable& choose_rows() {
  const auto cpu = xsimd::available_architectures();
  const char* env = std::getenv("KILN_SIMD");
  const std::string_view requested = env != nullptr ? env : "";
  const bool allow_avx512 = requested.empty() || requested == "avx512";
  const bool allow_avx2 = allow_avx512 || requested == "avx2";
  if (allow_avx512 && cpu.avx512f && cpu.fma3_avx2) return elementwise_rows_avx512();
  if (allow_avx2 && cpu.fma3_avx2) return elementwise_rows_avx2();
  return elementwise_rows_sse2();
}

void gather(const char* src, std::int64_t stride, std::size_t element_size, void* dst,
            std::int64_t n) {
  switch (element_size) {
    case 1:
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::uint8_t*>(dst)[i] = reinterpret_cast<const std::uint8_t*>(src)[i * stride];
      break;
    case 4:
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::uint32_t*>(dst)[i] =
            reinterpret_cast<const std::uint32_t*>(src)[i * stride];
      break;
    default:
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::uint64_t*>(dst)[i] =
            reinterpret_cast<const std::uint64_t*>(src)[i * stride];
      break;
  }
}

/// Runs row(inputs, input_strides, out, n) over the whole output: inputs with inner
/// stride 0 or 1 are passed straight through, others are gathered into a stack buffer
/// first. Large outputs are split along their outermost dim across the thread pool.
template <std::size_t N, class Row>
void run_elementwise(const KernelCall& call, const Row& row) {
  const ArrayRef& out = call.out;
  const std::int64_t total = out.numel();
  if (total == 0) return;

  std::array<const Shape*, N + 1> strides{};
  std::array<std::size_t, N + 1> sizes{};
  std::array<char*, N + 1> bases{};
  strides[0] = &out.strides;
  sizes[0] = dtype_size(out.dtype);
  bases[0] = static_cast<char*>(out.data);
  for (std::size_t k = 0; k < N; ++k) {
    strides[k + 1] = &call.inputs[k].strides;
    sizes[k + 1] = dtype_size(call.inputs[k].dtype);
    bases[k + 1] = static_cast<char*>(call.inputs[k].data);
  }
  const CoalescedDims<N + 1> dims = coalesce<N + 1>(out.shape, strides);

  auto run_block = [&](const CoalescedDims<N + 1>& block_dims,
                       const std::array<char*, N + 1>& block_bases) {
    const std::size_t inner = block_dims.rank - 1;
    for_each_row(block_dims, [&](const std::array<std::int64_t, N + 1>& offsets, std::int64_t n) {
      std::array<const void*, N> in{};
      std::array<std::int64_t, N> in_strides{};
      bool direct = true;
      for (std::size_t k = 0; k < N; ++k) {
        in[k] = block_bases[k + 1] + offsets[k + 1] * static_cast<std::int64_t>(sizes[k + 1]);
        in_strides[k] = block_dims.strides[k + 1][inner];
        direct = direct && (in_strides[k] == 0 || in_strides[k] == 1);
      }
      char* out_row = block_bases[0] + offsets[0] * static_cast<std::int64_t>(sizes[0]);
      if (direct) {
        row(in, in_strides, out_row, n);
        return;
      }
      alignas(64) std::array<std::array<std::uint64_t, gather_block>, N> buffers;
      for (std::int64_t start = 0; start < n; start += gather_block) {
        const std::int64_t count = n - start < gather_block ? n - start : gather_block;
        std::array<const void*, N> part{};
        std::array<std::int64_t, N> part_strides{};
        for (std::size_t k = 0; k < N; ++k) {
          const char* src = static_cast<const char*>(in[k]) +
                            start * in_strides[k] * static_cast<std::int64_t>(sizes[k + 1]);
          if (in_strides[k] == 0 || in_strides[k] == 1) {
            part[k] = src;
            part_strides[k] = in_strides[k];
          } else {
            gather(src, in_strides[k], sizes[k + 1], buffers[k].data(), count);
            part[k] = buffers[k].data();
            part_strides[k] = 1;
          }
        }
        row(part, part_strides, out_row + start * static_cast<std::int64_t>(sizes[0]), count);
      }
    });
  };

  if (total < parallel_min_elements || num_threads() == 1) {
    run_block(dims, bases);
    return;
  }
  const std::int64_t outer = dims.shape[0];
  const std::int64_t outer_grain = std::max<std::int64_t>(1, parallel_grain / (total / outer));
  parallel_for(outer, outer_grain, [&](std::int64_t begin, std::int64_t end) {
    CoalescedDims<N + 1> part = dims;
    part.shape[0] = end - begin;
    std::array<char*, N + 1> part_bases = bases;
    for (std::size_t k = 0; k <= N; ++k)
      part_bases[k] += begin * dims.strides[k][0] * static_cast<std::int64_t>(sizes[k]);
    run_block(part, part_bases);
  });
}

[[noreturn]] void fail_no_kernel(const KernelCall& call, DType dtype) {
  fail(name(call.prim), "no kernel for dtype {}", dtype_name(dtype));
}

}  // namespace

const ElementwiseRowTable& elementwise_rows() {
  static const ElementwiseRowTable& rows = choose_rows();
  return rows;
}

void run_elementwise_flat(Prim p, const void* const* in, const std::int64_t* strides,
                          DType in_dtype, void* out, DType out_dtype, std::int64_t n) {
  const ElementwiseRowTable& rows = elementwise_rows();
  switch (info(p).family) {
    case Family::unary: {
      const UnaryRowFn fn = p == Prim::cast
                                ? rows.cast[dtype_index(in_dtype)][dtype_index(out_dtype)]
                                : rows.unary[unary_row_index(p)][dtype_index(in_dtype)];
      if (fn == nullptr) fail(name(p), "no kernel for dtype {}", dtype_name(in_dtype));
      fn(in[0], strides[0], out, n);
      return;
    }
    case Family::binary: {
      const BinaryRowFn fn = rows.binary[binary_row_index(p)][dtype_index(in_dtype)];
      if (fn == nullptr) fail(name(p), "no kernel for dtype {}", dtype_name(in_dtype));
      fn(in[0], strides[0], in[1], strides[1], out, n);
      return;
    }
    default: {
      const WhereRowFn fn = rows.where[dtype_index(in_dtype)];
      if (fn == nullptr) fail(name(p), "no kernel for dtype {}", dtype_name(in_dtype));
      fn(in[0], strides[0], in[1], strides[1], in[2], strides[2], out, n);
      return;
    }
  }
}

void run_unary(const KernelCall& call) {
  const DType in_dtype = call.inputs[0].dtype;
  const UnaryRowFn fn =
      call.prim == Prim::cast
          ? elementwise_rows().cast[dtype_index(in_dtype)][dtype_index(call.out.dtype)]
          : elementwise_rows().unary[unary_row_index(call.prim)][dtype_index(in_dtype)];
  if (fn == nullptr) fail_no_kernel(call, in_dtype);
  run_elementwise<1>(
      call, [fn](const std::array<const void*, 1>& in, const std::array<std::int64_t, 1>& strides,
                 void* out, std::int64_t n) { fn(in[0], strides[0], out, n); });
}

void run_binary(const KernelCall& call) {
  const DType dtype = call.inputs[0].dtype;
  const BinaryRowFn fn = elementwise_rows().binary[binary_row_index(call.prim)][dtype_index(dtype)];
  if (fn == nullptr || call.inputs[1].dtype != dtype) fail_no_kernel(call, dtype);
  run_elementwise<2>(
      call, [fn](const std::array<const void*, 2>& in, const std::array<std::int64_t, 2>& strides,
                 void* out, std::int64_t n) { fn(in[0], strides[0], in[1], strides[1], out, n); });
}

void run_ternary(const KernelCall& call) {
  const DType dtype = call.inputs[1].dtype;
  const WhereRowFn fn = elementwise_rows().where[dtype_index(dtype)];
  if (call.inputs[0].dtype != DType::boolean || call.inputs[2].dtype != dtype)
    fail_no_kernel(call, dtype);
  run_elementwise<3>(
      call, [fn](const std::array<const void*, 3>& in, const std::array<std::int64_t, 3>& strides,
                 void* out, std::int64_t n) {
        fn(in[0], strides[0], in[1], strides[1], in[2], strides[2], out, n);
      });
}

}  // namespace kiln::detail

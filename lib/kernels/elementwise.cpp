// The elementwise families (unary, binary, where): walk the broadcast inputs row by row
// and hand each row to the row kernel of the instruction set chosen for this CPU.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string_view>

#include "core/fail.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/fused.hpp"
#include "kernels/fused_loop.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"
#include "kernels/streaming.hpp"
#include "kernels/strided_loop.hpp"

namespace kiln::detail {

namespace {

/// Elements gathered from a non-unit-stride input per row-kernel call.
constexpr std::int64_t gather_block = 256;
/// Below this many output elements everything runs on the calling thread.
constexpr std::int64_t parallel_min_elements = std::int64_t{1} << 18;
/// Smallest piece of work worth handing to another thread.
constexpr std::int64_t parallel_grain = std::int64_t{1} << 16;

void gather(const char* src, std::int64_t stride, std::size_t element_size, void* dst,
            std::int64_t n) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * element_size);
    return;
  }
  switch (element_size) {
    case 1:
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::uint8_t*>(dst)[i] = reinterpret_cast<const std::uint8_t*>(src)[i * stride];
      break;
    case 2:
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(dst)[i] =
            reinterpret_cast<const std::uint16_t*>(src)[i * stride];
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

/// Copies n elements of element_size bytes, `stride` elements apart, to contiguous dst:
/// gather() for the short runs of fused kernels.
inline void copy_run(const char* src, std::int64_t stride, std::int64_t element_size, void* dst,
                     std::int64_t n) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(n * element_size));
    return;
  }
  gather(src, stride, static_cast<std::size_t>(element_size), dst, n);
}

/// Kernels that move at least this many bytes (output and inputs) run in short blocks (see
/// stream_block): their data comes from beyond the L2 caches.
constexpr std::int64_t short_block_bytes = std::int64_t{4} << 20;

/// The bound set by set_stream_output_bytes (0: none).
std::atomic<std::int64_t> stream_bytes_override{0};

/// Orders a thread's non-temporal stores before the work that follows (when `active`).
struct StreamFence {
  bool active;
  ~StreamFence() {
#if defined(__SSE2__)
    if (active) _mm_sfence();
#endif
  }
};

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
  parallel_for_balanced(outer, outer_grain, [&](std::int64_t begin, std::int64_t end) {
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

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::sse2:
      return "sse2";
    case SimdLevel::avx2:
      return "avx2";
    case SimdLevel::avx512:
      return "avx512";
  }
  return "";
}

const ElementwiseRowTable& elementwise_rows(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512:
      return elementwise_rows_avx512();
    case SimdLevel::avx2:
      return elementwise_rows_avx2();
    case SimdLevel::sse2:
      break;
  }
  return elementwise_rows_sse2();
}

SimdLevel cpu_simd_level() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
    return avx2 ? SimdLevel::avx2 : SimdLevel::sse2;
  }();
  return level;
}

int requested_simd_level() {
  const char* env = std::getenv("KILN_SIMD");
  const std::string_view requested = env != nullptr ? env : "";
  for (SimdLevel level : {SimdLevel::sse2, SimdLevel::avx2, SimdLevel::avx512})
    if (requested == simd_level_name(level)) return static_cast<int>(level);
  return -1;
}

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const SimdLevel cpu = cpu_simd_level();
    const int requested = requested_simd_level();
    return requested >= 0 && requested < static_cast<int>(cpu) ? static_cast<SimdLevel>(requested)
                                                               : cpu;
  }();
  return level;
}

const ElementwiseRowTable& elementwise_rows() {
  static const ElementwiseRowTable& rows = elementwise_rows(simd_level());
  return rows;
}

RowKernel row_kernel(Prim p, DType in_dtype, DType out_dtype) {
  const ElementwiseRowTable& rows = elementwise_rows();
  RowKernel fn = nullptr;
  switch (info(p).family) {
    case Family::unary:
      fn = reinterpret_cast<RowKernel>(
          p == Prim::cast ? rows.cast[dtype_index(in_dtype)][dtype_index(out_dtype)]
                          : rows.unary[unary_row_index(p)][dtype_index(in_dtype)]);
      break;
    case Family::binary:
      fn = reinterpret_cast<RowKernel>(rows.binary[binary_row_index(p)][dtype_index(in_dtype)]);
      break;
    default:
      fn = reinterpret_cast<RowKernel>(rows.where[dtype_index(in_dtype)]);
      break;
  }
  if (fn == nullptr) fail(name(p), "no kernel for dtype {}", dtype_name(in_dtype));
  return fn;
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

void resolve_fused_program(FusedProgram& program) {
  resolve_fused_program(program, elementwise_rows());
}

void resolve_fused_program(FusedProgram& program, const ElementwiseRowTable& rows) {
  for (FusedOp& op : program.ops) {
    const std::size_t in = dtype_index(op.in_dtype);
    switch (info(op.prim).family) {
      case Family::unary:
        op.fn = op.prim == Prim::cast
                    ? reinterpret_cast<void (*)()>(rows.cast[in][dtype_index(op.out_dtype)])
                    : reinterpret_cast<void (*)()>(rows.unary[unary_row_index(op.prim)][in]);
        break;
      case Family::binary:
        op.fn = reinterpret_cast<void (*)()>(rows.binary[binary_row_index(op.prim)][in]);
        break;
      case Family::ternary:
        op.fn = reinterpret_cast<void (*)()>(rows.where[in]);
        break;
      default:
        fail(name(op.prim), "is not elementwise and cannot be fused");
    }
    if (op.fn == nullptr) fail(name(op.prim), "no kernel for dtype {}", dtype_name(op.in_dtype));
  }
}

FusedLayout layout_fused(std::span<const ArrayRef> inputs, const ArrayRef& out) {
  constexpr std::size_t N = max_fused_inputs;
  FusedLayout l;
  l.total = out.numel();
  l.num_inputs = inputs.size();
  l.out_size = static_cast<std::int64_t>(dtype_size(out.dtype));
  // Coalesce the output with its inputs (unused positions repeat the output's strides).
  std::array<const Shape*, N + 1> stride_sets{};
  stride_sets[0] = &out.strides;
  for (std::size_t k = 0; k < N; ++k)
    stride_sets[k + 1] = k < l.num_inputs ? &inputs[k].strides : &out.strides;
  l.dims = coalesce<N + 1>(out.shape, stride_sets);
  const std::size_t rank = l.dims.rank;
  for (std::size_t k = 0; k < l.num_inputs; ++k) {
    l.size[k] = static_cast<std::int64_t>(dtype_size(inputs[k].dtype));
    bool flat = true, broadcast = true;
    for (std::size_t d = 0; d < rank; ++d) {
      flat = flat && l.dims.strides[k + 1][d] == l.dims.strides[0][d];
      broadcast = broadcast && l.dims.strides[k + 1][d] == 0;
    }
    l.how[k] = flat ? FusedRead::flat : broadcast ? FusedRead::broadcast : FusedRead::gathered;
    if (l.how[k] == FusedRead::gathered) l.gathered_inputs[l.num_gathered++] = k;
  }
  l.stream_output = l.total * l.out_size > stream_output_bytes();
  std::int64_t moved = l.total * l.out_size;
  for (std::size_t k = 0; k < l.num_inputs; ++k)
    if (l.how[k] != FusedRead::broadcast) moved += l.total * l.size[k];
  l.short_blocks = moved >= short_block_bytes;
  // Very long rows with inputs that are neither flat nor a single broadcast value are walked
  // row by row (run_elementwise reads inner stride 0 or 1 in place and gathers others),
  // saving the copies of blocked mode. Shorter rows go blockwise: walking rows costs a few
  // hundred instructions per row, more than gathering a short row. Matrices with rows of at
  // most fused_block elements (the gate slices of an LSTM, a bias broadcast over rows) go in
  // blocks of whole rows.
  constexpr std::int64_t long_row = 2048;
  if (l.total == 0 || l.num_gathered == 0)
    l.mode = FusedLayout::Mode::blocks;
  else if (l.dims.shape[rank - 1] >= long_row)
    l.mode = FusedLayout::Mode::long_rows;
  else if (rank == 2 && l.dims.shape[1] <= fused_block)
    l.mode = FusedLayout::Mode::whole_rows;
  else
    l.mode = FusedLayout::Mode::blocks;
  return l;
}

namespace {

constexpr std::size_t N = max_fused_inputs;

/// Runs every instruction over `count` (<= fused_block) elements whose inputs are read at
/// ptr[k] with element stride stride[k] (0 or 1), writing the output at dst_out.
void run_ops(const FusedProgram& program, const std::array<const void*, N>& ptr,
             const std::array<std::int64_t, N>& stride, void* dst_out, std::int64_t count) {
  alignas(64) std::uint64_t slots[max_fused_slots][fused_block];
  const auto operand = [&](std::int16_t a, std::int64_t& s) -> const void* {
    if (a < 0) {
      s = 1;
      return slots[-a - 1];
    }
    s = stride[static_cast<std::size_t>(a)];
    return ptr[static_cast<std::size_t>(a)];
  };
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const FusedOp& op = program.ops[i];
    void* dst = i + 1 == program.ops.size() ? dst_out : static_cast<void*>(slots[op.result_slot]);
    std::int64_t s0 = 0, s1 = 0, s2 = 0;
    switch (info(op.prim).family) {
      case Family::unary: {
        const void* a = operand(op.operands[0], s0);
        reinterpret_cast<UnaryRowFn>(op.fn)(a, s0, dst, count);
        break;
      }
      case Family::binary: {
        const void* a = operand(op.operands[0], s0);
        const void* b = operand(op.operands[1], s1);
        reinterpret_cast<BinaryRowFn>(op.fn)(a, s0, b, s1, dst, count);
        break;
      }
      default: {
        const void* c = operand(op.operands[0], s0);
        const void* a = operand(op.operands[1], s1);
        const void* b = operand(op.operands[2], s2);
        reinterpret_cast<WhereRowFn>(op.fn)(c, s0, a, s1, b, s2, dst, count);
        break;
      }
    }
  }
}

/// FusedLayout::Mode::long_rows: each output row handed to the program by run_elementwise.
void run_fused_long_rows(const FusedProgram& program, const FusedLayout& l,
                         std::span<const ArrayRef> inputs, const ArrayRef& out) {
  std::array<ArrayRef, N> padded;
  for (std::size_t k = 0; k < N; ++k) padded[k] = inputs[k < l.num_inputs ? k : 0];
  const Attrs no_attrs;
  const KernelCall call{Prim::add, std::span<const ArrayRef>(padded), out, no_attrs};
  run_elementwise<N>(
      call, [&](const std::array<const void*, N>& in, const std::array<std::int64_t, N>& strides,
                void* out_row, std::int64_t n) {
        for (std::int64_t first = 0; first < n; first += fused_block) {
          std::array<const void*, N> ptr{};
          for (std::size_t k = 0; k < l.num_inputs; ++k)
            ptr[k] = static_cast<const char*>(in[k]) + first * strides[k] * l.size[k];
          run_ops(program, ptr, strides, static_cast<char*>(out_row) + first * l.out_size,
                  std::min(fused_block, n - first));
        }
      });
}

/// FusedLayout::Mode::whole_rows: blocks of whole rows, each gathered input copied row by row
/// in vector moves (CopyRowsFn). Cheaper than the general walk of run_fused_blocks, which
/// tracks an index per element run.
void run_fused_whole_rows(const FusedProgram& program, const FusedLayout& l,
                          const void* const* inputs, char* out_base) {
  const CoalescedDims<N + 1>& dims = l.dims;
  const std::int64_t row_length = dims.shape[1];
  const std::int64_t rows_per_block = fused_block / row_length;
  const std::int64_t num_rows = dims.shape[0];
  const CopyRowsFn copy_rows = elementwise_rows().copy_rows;
  // Per range (one per thread): scratch for gathered rows, and how many rows of each
  // row-broadcast input are already in it.
  const auto run_rows = [&](std::uint64_t(&gathered)[N][fused_block],
                            std::array<std::int64_t, N>& filled_rows, std::int64_t first_row,
                            std::int64_t count_rows) {
    std::array<const void*, N> ptr{};
    std::array<std::int64_t, N> stride{};
    const std::int64_t first = first_row * row_length;
    for (std::size_t k = 0; k < l.num_inputs; ++k) {
      const char* base = static_cast<const char*>(inputs[k]);
      stride[k] = l.how[k] == FusedRead::broadcast ? 0 : 1;
      switch (l.how[k]) {
        case FusedRead::flat:
          ptr[k] = base + first * l.size[k];
          break;
        case FusedRead::broadcast:
          ptr[k] = base;
          break;
        default: {
          // A row broadcast over rows (a bias) holds the same block every time: fill once.
          const std::int64_t outer = dims.strides[k + 1][0] * l.size[k];
          if (outer == 0 && filled_rows[k] >= count_rows) {
            ptr[k] = gathered[k];
            break;
          }
          const std::int64_t step = dims.strides[k + 1][1];
          const char* src = base + first_row * outer;
          char* dst = reinterpret_cast<char*>(gathered[k]);
          if (step == 1) {
            copy_rows(src, outer, dst, row_length * l.size[k], count_rows);
          } else {
            for (std::int64_t r = 0; r < count_rows; ++r, src += outer)
              copy_run(src, step, l.size[k], dst + r * row_length * l.size[k], row_length);
          }
          filled_rows[k] = count_rows;
          ptr[k] = gathered[k];
          break;
        }
      }
    }
    run_ops(program, ptr, stride, out_base + first * l.out_size, count_rows * row_length);
  };
  auto run_row_range = [&](std::int64_t begin_block, std::int64_t end_block) {
    alignas(64) std::uint64_t gathered[N][fused_block];
    std::array<std::int64_t, N> filled_rows{};
    for (std::int64_t b = begin_block; b < end_block; ++b) {
      const std::int64_t first_row = b * rows_per_block;
      run_rows(gathered, filled_rows, first_row, std::min(rows_per_block, num_rows - first_row));
    }
  };
  const std::int64_t blocks = (num_rows + rows_per_block - 1) / rows_per_block;
  if (l.total < parallel_min_elements || num_threads() == 1)
    run_row_range(0, blocks);
  else
    parallel_for_balanced(blocks, std::max<std::int64_t>(1, parallel_grain / fused_block),
                          run_row_range);
}

/// One instruction bound to addresses for a run of blocks: operand j is read at
/// src[j] + first * advance[j] (first: the block's first output element) with element stride
/// stride[j], the result written at dst + first * dst_advance. Binding once per thread's range
/// leaves a few instructions of dispatch per instruction and block.
struct BoundOp {
  void (*fn)() = nullptr;
  Family family = Family::unary;
  std::array<const char*, 3> src{};
  std::array<std::int64_t, 3> advance{};
  std::array<std::int64_t, 3> stride{};
  char* dst = nullptr;
  std::int64_t dst_advance = 0;
};

/// Runs the bound program over the `count` output elements from `first`.
void run_bound(const BoundOp* ops, std::size_t num_ops, std::int64_t first, std::int64_t count) {
  for (std::size_t i = 0; i < num_ops; ++i) {
    const BoundOp& op = ops[i];
    const auto at = [&](std::size_t j) { return op.src[j] + first * op.advance[j]; };
    char* dst = op.dst + first * op.dst_advance;
    switch (op.family) {
      case Family::unary:
        reinterpret_cast<UnaryRowFn>(op.fn)(at(0), op.stride[0], dst, count);
        break;
      case Family::binary:
        reinterpret_cast<BinaryRowFn>(op.fn)(at(0), op.stride[0], at(1), op.stride[1], dst, count);
        break;
      default:
        reinterpret_cast<WhereRowFn>(op.fn)(at(0), op.stride[0], at(1), op.stride[1], at(2),
                                            op.stride[2], dst, count);
        break;
    }
  }
}

/// Blocks of kernels that move more data than the L2 caches hold, in elements. Far shorter than
/// fused_block: within a block, the instructions that read no input (tanh over scratch) issue
/// no loads, and memory idles unless the next block's loads are close enough for the core to
/// start them early. Short blocks keep the input streams and the output stream busy.
constexpr std::int64_t stream_block = 128;

/// FusedLayout::Mode::blocks: output elements [first, last) in blocks of fused_block (short
/// blocks: stream_block) elements in row-major order (across rows of other ranks), with strided
/// inputs gathered into contiguous scratch first. `first` is a multiple of fused_block; the
/// blocks are split between threads when `split` and the range is large enough.
void run_fused_blocks(const FusedProgram& program, const FusedLayout& l, const void* const* inputs,
                      char* out_base, std::int64_t first_element, std::int64_t last_element,
                      bool split) {
  const CoalescedDims<N + 1>& dims = l.dims;
  const std::size_t rank = dims.rank;
  const auto base = [&](std::size_t k) { return static_cast<const char*>(inputs[k]); };
  // Gathers input elements [first, first + count) of every gathered input into its scratch.
  const auto gather_block = [&](std::uint64_t(&gathered)[N][fused_block], std::int64_t first,
                                std::int64_t count) {
    // Walk the block's elements row by row; each gathered input keeps a pointer to the start
    // of its current row, moved by one outer stride per row (recomputed only on a carry).
    std::array<std::int64_t, Shape::max_rank> index{};
    std::int64_t rest = first;
    for (std::size_t d = rank; d-- > 0;) {
      index[d] = rest % dims.shape[d];
      rest /= dims.shape[d];
    }
    const std::size_t inner = rank - 1;
    std::array<const char*, N> row{};
    const auto find_rows = [&] {
      for (std::size_t g = 0; g < l.num_gathered; ++g) {
        const std::size_t k = l.gathered_inputs[g];
        std::int64_t offset = 0;
        for (std::size_t d = 0; d < inner; ++d) offset += index[d] * dims.strides[k + 1][d];
        row[k] = base(k) + offset * l.size[k];
      }
    };
    find_rows();
    for (std::int64_t done = 0; done < count;) {
      const std::int64_t run = std::min(dims.shape[inner] - index[inner], count - done);
      for (std::size_t g = 0; g < l.num_gathered; ++g) {
        const std::size_t k = l.gathered_inputs[g];
        const std::int64_t step = dims.strides[k + 1][inner];
        copy_run(row[k] + index[inner] * step * l.size[k], step, l.size[k],
                 reinterpret_cast<char*>(gathered[k]) + done * l.size[k], run);
      }
      done += run;
      index[inner] += run;
      if (index[inner] < dims.shape[inner] || done == count) continue;
      index[inner] = 0;
      std::size_t d = inner;
      while (d > 0 && ++index[d - 1] == dims.shape[d - 1]) index[--d] = 0;
      if (inner > 0 && d == inner) {
        for (std::size_t g = 0; g < l.num_gathered; ++g) {
          const std::size_t k = l.gathered_inputs[g];
          row[k] += dims.strides[k + 1][inner - 1] * l.size[k];
        }
      } else {
        find_rows();
      }
    }
  };
  const std::int64_t block = l.short_blocks ? stream_block : fused_block;
  const StreamCopyFn stream_copy = elementwise_rows().stream_copy;
  auto run_range = [&](std::int64_t begin_block, std::int64_t end_block) {
    // This thread's scratch: gathered inputs, instruction results, and the block of a streamed
    // output before its non-temporal copy.
    alignas(64) std::uint64_t gathered[N][fused_block];
    alignas(64) std::uint64_t slots[max_fused_slots][fused_block];
    alignas(64) std::uint64_t staged[fused_block];
    std::array<BoundOp, max_fused_ops> ops;
    const std::size_t num_ops = program.ops.size();
    for (std::size_t i = 0; i < num_ops; ++i) {
      const FusedOp& op = program.ops[i];
      BoundOp& b = ops[i];
      b.fn = op.fn;
      b.family = info(op.prim).family;
      for (std::size_t j = 0; j < 3; ++j) {
        const std::int16_t a = op.operands[j];
        if (a < 0) {
          b.src[j] = reinterpret_cast<const char*>(slots[-a - 1]);
          b.stride[j] = 1;
          continue;
        }
        const auto k = static_cast<std::size_t>(a);
        if (k >= l.num_inputs) continue;  // an operand the instruction does not have
        switch (l.how[k]) {
          case FusedRead::flat:
            b.src[j] = base(k);
            b.advance[j] = l.size[k];
            b.stride[j] = 1;
            break;
          case FusedRead::broadcast:
            b.src[j] = base(k);
            break;
          default:
            b.src[j] = reinterpret_cast<const char*>(gathered[k]);
            b.stride[j] = 1;
            break;
        }
      }
      if (i + 1 < num_ops) {
        b.dst = reinterpret_cast<char*>(slots[op.result_slot]);
      } else if (l.stream_output) {
        // An output far larger than the caches is written with non-temporal stores: no read
        // of the destination lines before they are overwritten, and no eviction of the
        // inputs' lines.
        b.dst = reinterpret_cast<char*>(staged);
      } else {
        b.dst = out_base;
        b.dst_advance = l.out_size;
      }
    }
    StreamFence fence{l.stream_output};
    for (std::int64_t b = begin_block; b < end_block; ++b) {
      const std::int64_t first = b * block;
      const std::int64_t count = std::min(block, last_element - first);
      if (l.num_gathered > 0) gather_block(gathered, first, count);
      if (l.short_blocks) {
        for (std::size_t k = 0; k < l.num_inputs; ++k)
          if (l.how[k] == FusedRead::flat)
            prefetch_stream(base(k), (first * l.size[k]) + stream_prefetch_bytes, count * l.size[k],
                            l.total * l.size[k], false);
        if (!l.stream_output)
          prefetch_stream(out_base, (first * l.out_size) + stream_prefetch_bytes,
                          count * l.out_size, l.total * l.out_size, true);
      }
      run_bound(ops.data(), num_ops, first, count);
      if (l.stream_output) stream_copy(out_base + first * l.out_size, staged, count * l.out_size);
    }
  };
  const std::int64_t first_block = first_element / block;
  const std::int64_t blocks = (last_element + block - 1) / block - first_block;
  if (!split || last_element - first_element < parallel_min_elements || num_threads() == 1)
    run_range(first_block, first_block + blocks);
  else
    parallel_for_balanced(blocks, std::max<std::int64_t>(1, parallel_grain / block),
                          [&](std::int64_t begin, std::int64_t end) {
                            run_range(first_block + begin, first_block + end);
                          });
}

/// A layout with a generated loop: its units of work (blocks or rows) split between threads.
void run_fused_with_loop(const FusedLayout& l, const void* const* inputs, void* out) {
  const FusedLoopWork work = fused_loop_work(*l.loop, l);
  auto run_range = [&](std::int64_t begin, std::int64_t end) {
    StreamFence fence{l.stream_output};
    run_fused_loop_range(*l.loop, l, inputs, out, begin, end);
  };
  if (l.total < parallel_min_elements || num_threads() == 1)
    run_range(0, work.units);
  else
    parallel_for_balanced(
        work.units, std::max<std::int64_t>(1, parallel_grain / work.unit_elements), run_range);
}

/// Output elements [first, last) of a layout runs_in_element_ranges accepts, on the calling
/// thread (`first` a multiple of fused_block).
void run_fused_range(const FusedProgram& program, const FusedLayout& l, const void* const* inputs,
                     void* out, std::int64_t first, std::int64_t last) {
  if (l.loop == nullptr) {
    run_fused_blocks(program, l, inputs, static_cast<char*>(out), first, last, false);
    return;
  }
  StreamFence fence{l.stream_output};
  run_fused_loop_range(*l.loop, l, inputs, out, first / fused_block,
                       (last + fused_block - 1) / fused_block);
}

}  // namespace

void run_fused_group(std::span<const FusedGroupMember> members) {
  if (members.empty()) return;
  const std::int64_t total = members.front().layout->total;
  for (const FusedGroupMember& m : members)
    if (m.layout->total != total || !runs_in_element_ranges(*m.layout))
      fail("fused", "a group's kernels must run flat over the same number of elements");
  const std::int64_t chunks = (total + fused_group_chunk - 1) / fused_group_chunk;
  auto run_chunks = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const std::int64_t first = c * fused_group_chunk;
      const std::int64_t last = std::min(total, first + fused_group_chunk);
      for (const FusedGroupMember& m : members)
        run_fused_range(*m.program, *m.layout, m.inputs.data(), m.out, first, last);
    }
  };
  if (total < parallel_min_elements || num_threads() == 1)
    run_chunks(0, chunks);
  else
    parallel_for_balanced(chunks, std::max<std::int64_t>(1, parallel_grain / fused_group_chunk),
                          run_chunks);
}

void run_fused(const FusedProgram& program, const FusedLayout& layout, const void* const* inputs,
               void* out) {
  if (layout.total == 0) return;
  if (layout.loop != nullptr) {
    run_fused_with_loop(layout, inputs, out);
    return;
  }
  switch (layout.mode) {
    case FusedLayout::Mode::whole_rows:
      run_fused_whole_rows(program, layout, inputs, static_cast<char*>(out));
      break;
    case FusedLayout::Mode::blocks:
      run_fused_blocks(program, layout, inputs, static_cast<char*>(out), 0, layout.total, true);
      break;
    case FusedLayout::Mode::long_rows:
      fail("fused", "a long-row layout needs the inputs' layouts: call run_fused with ArrayRefs");
  }
}

void run_fused(const FusedProgram& program, std::span<const ArrayRef> inputs, const ArrayRef& out) {
  const FusedLayout layout = layout_fused(inputs, out);
  if (layout.total == 0) return;
  if (layout.mode == FusedLayout::Mode::long_rows) {
    run_fused_long_rows(program, layout, inputs, out);
    return;
  }
  std::array<const void*, N> data{};
  for (std::size_t k = 0; k < inputs.size(); ++k) data[k] = inputs[k].data;
  run_fused(program, layout, data.data(), out.data);
}

std::int64_t last_level_cache_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t largest = 0;
    for (int index = 0; index < 16; ++index) {
      std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) +
                       "/size");
      std::int64_t size = 0;
      char unit = 0;
      if (!(in >> size)) continue;
      in >> unit;
      if (unit == 'K') size <<= 10;
      if (unit == 'M') size <<= 20;
      largest = std::max(largest, size);
    }
    return largest > 0 ? largest : std::int64_t{32} << 20;
  }();
  return bytes;
}

std::int64_t stream_output_bytes() {
  const std::int64_t set = stream_bytes_override.load(std::memory_order_relaxed);
  return set > 0 ? set : last_level_cache_bytes();
}

void set_stream_output_bytes(std::int64_t bytes) {
  stream_bytes_override.store(bytes, std::memory_order_relaxed);
}

}  // namespace kiln::detail

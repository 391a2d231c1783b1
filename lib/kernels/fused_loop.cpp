// Generated loops for fused programs (kernels/fused_loop.hpp): the code shared between plans,
// the plans' policy, and running a loop over a layout's rows or blocks. The code generator
// itself is kernels/fused_loop_writer.hpp.

#include "kernels/fused_loop.hpp"

#include <xbyak/xbyak.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/environment.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/fused.hpp"
#include "kernels/fused_loop_writer.hpp"
#include "kernels/streaming.hpp"

namespace kiln::detail {

namespace {

bool loops_allowed_by_environment() {
  static const bool allowed = switched_on_by_environment("KILN_FUSED_LOOPS");
  return allowed;
}

/// KILN_LOOP_PREFETCH=0 keeps loops from asking ahead (for A/B measurements on a new CPU).
bool loop_prefetch_allowed_by_environment() {
  static const bool allowed = switched_on_by_environment("KILN_LOOP_PREFETCH");
  return allowed;
}

/// Writes the code of a loop: the plain function, the streamed one when asked for, then the
/// constants. Null when the program needs more registers than there are, or when no
/// executable memory can be had (a hardened kernel): the interpreter runs those.
std::shared_ptr<const LoopCode> write_loop_code(const FusedProgram& program, const FusedLoop& loop,
                                                std::int64_t width, bool streamed,
                                                std::int64_t ahead) {
  try {
    auto code = std::make_shared<LoopCode>();
    code->width = width;
    code->ahead = ahead;
    auto writer = std::make_unique<LoopWriter>(program, loop, width, ahead);
    const std::size_t plain = writer->write_function(false);
    const std::size_t streamed_at = streamed ? writer->write_function(true) : 0;
    writer->write_constants();
    writer->ready(Xbyak::CodeArray::PROTECT_RE);
    // The code is read-only executable memory; a function pointer into it goes through an
    // address (clang refuses a cast from const bytes straight to a function pointer).
    const auto start = reinterpret_cast<std::uintptr_t>(writer->getCode());
    code->plain = reinterpret_cast<LoopFn>(start + plain);
    if (streamed) code->streamed = reinterpret_cast<LoopFn>(start + streamed_at);
    code->writer = std::move(writer);
    return code;
  } catch (const OutOfRegisters&) {
    return nullptr;
  } catch (const Xbyak::Error&) {
    return nullptr;
  }
}

/// Loop code shared between layouts and plans: a train step's backward repeats the same few
/// programs over many shapes, and rebuilding or retracing a function writes the same loops
/// again. Writing one costs a page of executable memory and two system calls (map, protect),
/// which at a few hundred fused steps made a first call a third slower. The key is everything
/// the code depends on: each instruction (primitive, dtypes, operands, result slot), which
/// inputs are held in registers, the vector width, whether a streamed function is written and
/// how far ahead the loop asks for its streams; not shapes, strides or row steps, which
/// run_fused_loop_range applies. The cache holds weak references,
/// so code lives as long as some plan uses it, and entries whose code is gone are swept as the
/// table grows: nothing here outlives the plans.
class LoopCodeCache {
 public:
  std::shared_ptr<const LoopCode> get(const FusedProgram& program, const FusedLoop& loop,
                                      std::int64_t width, bool streamed, std::int64_t ahead) {
    const std::string key = key_of(program, loop, width, streamed, ahead);
    std::lock_guard lock(mutex_);
    if (auto it = codes_.find(key); it != codes_.end())
      if (auto code = it->second.lock()) return code;
    auto code = write_loop_code(program, loop, width, streamed, ahead);
    if (code == nullptr) return nullptr;
    codes_[key] = code;
    if (codes_.size() >= 2 * swept_size_) {
      std::erase_if(codes_, [](const auto& entry) { return entry.second.expired(); });
      swept_size_ = std::max<std::size_t>(codes_.size(), 32);
    }
    return code;
  }

  std::size_t live() {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count_if(
        codes_.begin(), codes_.end(), [](const auto& entry) { return !entry.second.expired(); }));
  }

 private:
  static std::string key_of(const FusedProgram& program, const FusedLoop& loop, std::int64_t width,
                            bool streamed, std::int64_t ahead) {
    std::string key;
    const auto put = [&](auto value) {
      key.append(reinterpret_cast<const char*>(&value), sizeof value);
    };
    put(width);
    put(streamed);
    put(ahead);
    put(loop.num_inputs);
    for (std::size_t k = 0; k < loop.num_inputs; ++k) put(loop.scalar[k]);
    for (const FusedOp& op : program.ops) {
      put(op.prim);
      put(op.in_dtype);
      put(op.out_dtype);
      put(op.operands);
      put(op.result_slot);
      put(op.store);
    }
    return key;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<const LoopCode>> codes_;
  std::size_t swept_size_ = 32;
};

LoopCodeCache& loop_code_cache() {
  static LoopCodeCache cache;
  return cache;
}

std::shared_ptr<const LoopCode> loop_code_for(const FusedProgram& program, const FusedLoop& loop,
                                              std::int64_t width, bool streamed,
                                              std::int64_t ahead) {
  return loop_code_cache().get(program, loop, width, streamed, ahead);
}

}  // namespace

std::shared_ptr<const FusedLoop> generate_fused_loop(const FusedProgram& program,
                                                     const FusedLayout& layout, SimdLevel level) {
  if (level < SimdLevel::avx2 || cpu_simd_level() < level) return nullptr;
  if (layout.total == 0 || layout.out_size != 4 || program.ops.empty()) return nullptr;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const FusedOp& op = program.ops[i];
    if (!covered(op, i + 1 == program.ops.size())) return nullptr;
    // An extra output holds f32 values (a comparison's lane mask never goes to memory).
    if (op.store >= 0 && op.out_dtype != DType::f32) return nullptr;
    for (std::size_t j = 0; j < operand_count(op.prim); ++j)
      if (op.operands[j] >= static_cast<std::int16_t>(layout.num_inputs)) return nullptr;
  }
  // Extra outputs are written flat, element by element like the output: no row walk.
  if (program.num_extra_outputs > max_fused_extra_outputs ||
      (program.num_extra_outputs > 0 && layout.num_gathered > 0))
    return nullptr;
  auto loop = std::make_shared<FusedLoop>();
  loop->num_inputs = layout.num_inputs + program.num_extra_outputs;
  // Rows of a matrix when an input is broadcast along one dim of it (a bias down the rows, a
  // per-row scale): each input's row is contiguous or one value.
  const CoalescedDims<max_fused_inputs + 1>& dims = layout.dims;
  loop->by_rows = layout.num_gathered > 0;
  if (loop->by_rows) {
    if (dims.rank != 2 || dims.strides[0][1] != 1 || dims.strides[0][0] != dims.shape[1])
      return nullptr;
    loop->num_rows = dims.shape[0];
    loop->row_length = dims.shape[1];
  }
  for (std::size_t k = 0; k < layout.num_inputs; ++k) {
    if (layout.size[k] != 4) return nullptr;
    if (!loop->by_rows) {
      loop->scalar[k] = layout.how[k] == FusedRead::broadcast;
      continue;
    }
    const std::int64_t inner = dims.strides[k + 1][1];
    if (inner != 0 && inner != 1) return nullptr;
    loop->scalar[k] = inner == 0;
    loop->row_step[k] = dims.strides[k + 1][0] * 4;
  }
  // Data from beyond the L2 caches is asked for ahead of the vector being computed.
  const std::int64_t ahead =
      layout.short_blocks && loop_prefetch_allowed_by_environment() ? loop_prefetch_bytes : 0;
  loop->code = loop_code_for(program, *loop, level == SimdLevel::avx512 ? 16 : 8,
                             layout.stream_output, ahead);
  return loop->code != nullptr ? loop : nullptr;
}

std::shared_ptr<const FusedLoop> fused_loop_for(const FusedProgram& program,
                                                const FusedLayout& layout) {
  if (simd_level() < SimdLevel::avx2 || !loops_allowed_by_environment()) return nullptr;
  if (layout.num_gathered > 0 && layout.dims.rank == 2 && layout.dims.shape[1] < min_fused_loop_row)
    return nullptr;
  return generate_fused_loop(program, layout, simd_level());
}

std::int64_t fused_loop_prefetch_bytes(const FusedLoop& loop) { return loop.code->ahead; }

std::size_t live_fused_loop_codes() { return loop_code_cache().live(); }

namespace {

/// The walk of one flat run of `count` elements: one row, no steps.
using Walk = std::array<std::int64_t, 2 + max_fused_pointers>;

/// Runs the loop over one flat run of `count` elements: at[k] is input k there (its value, for
/// a scalar one), out the output there. A streamed loop's non-temporal stores need 32-byte
/// aligned addresses (32 bytes for ymm, 64 for zmm): the elements before the first one run
/// with plain stores.
void run_span(const FusedLoop& loop, std::array<const char*, max_fused_pointers> at, char* out,
              std::int64_t count) {
  const LoopCode& code = *loop.code;
  Walk walk{};
  if (code.streamed != nullptr && reinterpret_cast<std::uintptr_t>(out) % 4 == 0) {
    const auto address = reinterpret_cast<std::uintptr_t>(out);
    const auto bytes = static_cast<std::uintptr_t>(code.width * 4);
    const std::int64_t head =
        std::min(static_cast<std::int64_t>(((bytes - address % bytes) % bytes) / 4), count);
    if (head > 0) {
      walk[0] = head;
      code.plain(at.data(), out, 1, walk.data());
      for (std::size_t k = 0; k < loop.num_inputs; ++k)
        if (!loop.scalar[k]) at[k] += head * 4;
      out += head * 4;
      count -= head;
    }
    walk[0] = count;
    if (count > 0) code.streamed(at.data(), out, 1, walk.data());
    return;
  }
  walk[0] = count;
  code.plain(at.data(), out, 1, walk.data());
}

}  // namespace

bool runs_in_element_ranges(const FusedLayout& layout) {
  return layout.mode == FusedLayout::Mode::blocks && layout.num_gathered == 0 &&
         (layout.loop == nullptr || !layout.loop->by_rows);
}

FusedLoopWork fused_loop_work(const FusedLoop& loop, const FusedLayout& layout) {
  if (loop.by_rows) return {loop.num_rows, loop.row_length};
  return {(layout.total + fused_block - 1) / fused_block, fused_block};
}

void run_fused_loop_range(const FusedLoop& loop, const FusedLayout& layout,
                          const void* const* inputs, void* out, std::int64_t begin,
                          std::int64_t end) {
  std::array<const char*, max_fused_pointers> at{};
  if (!loop.by_rows) {
    const std::int64_t first = begin * fused_block;
    for (std::size_t k = 0; k < loop.num_inputs; ++k)
      at[k] = static_cast<const char*>(inputs[k]) + (loop.scalar[k] ? 0 : first * 4);
    run_span(loop, at, static_cast<char*>(out) + first * 4,
             std::min(end * fused_block, layout.total) - first);
    return;
  }
  char* const out_row = static_cast<char*>(out) + begin * loop.row_length * 4;
  for (std::size_t k = 0; k < loop.num_inputs; ++k)
    at[k] = static_cast<const char*>(inputs[k]) + begin * loop.row_step[k];
  if (loop.code->streamed != nullptr) {
    // Each row's stores are aligned apart: one call per row.
    for (std::int64_t row = 0; row < end - begin; ++row) {
      std::array<const char*, max_fused_pointers> row_at{};
      for (std::size_t k = 0; k < loop.num_inputs; ++k) row_at[k] = at[k] + row * loop.row_step[k];
      run_span(loop, row_at, out_row + row * loop.row_length * 4, loop.row_length);
    }
    return;
  }
  // The rows in one call: the generated code steps from row to row.
  Walk walk{};
  walk[0] = loop.row_length;
  walk[1] = loop.row_length * 4;
  for (std::size_t k = 0; k < loop.num_inputs; ++k) walk[2 + k] = loop.row_step[k];
  loop.code->plain(at.data(), out_row, end - begin, walk.data());
}

}  // namespace kiln::detail

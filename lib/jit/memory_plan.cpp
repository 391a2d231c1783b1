#include "jit/memory_plan.hpp"

#include <algorithm>
#include <utility>

#include "core/fail.hpp"

namespace kiln::detail {

std::int64_t arena_block_bytes(std::int64_t bytes) {
  const std::int64_t b = std::max<std::int64_t>(bytes, 1);
  return (b + arena_alignment - 1) / arena_alignment * arena_alignment;
}

namespace {

/// A piece of the arena: one buffer, or an in-place chain of them, alive over steps
/// [first, last].
struct Block {
  std::int64_t bytes, first, last, offset = 0;
};

void check_buffer(std::int32_t b, std::size_t num_buffers, std::size_t step) {
  if (b < -1 || (b >= 0 && static_cast<std::size_t>(b) >= num_buffers))
    fail("plan_memory", "step {} names buffer {}, but there are {} buffers", step, b, num_buffers);
}

/// Each block at the lowest offset free of every placed block whose lifetime overlaps its own,
/// largest first; returns the arena's size.
std::int64_t place_blocks(std::vector<Block>& blocks) {
  std::vector<std::size_t> order(blocks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::int64_t, std::int64_t>> taken;  // [offset, end) of overlapping
  std::int64_t arena_end = 0;
  for (std::size_t b : order) {
    Block& block = blocks[b];
    taken.clear();
    for (std::size_t p : placed) {
      const Block& other = blocks[p];
      if (other.first <= block.last && block.first <= other.last)
        taken.emplace_back(other.offset, other.offset + other.bytes);
    }
    std::sort(taken.begin(), taken.end());
    std::int64_t offset = 0;
    for (const auto& [from, to] : taken) {
      if (from - offset >= block.bytes) break;
      offset = std::max(offset, to);
    }
    block.offset = offset;
    arena_end = std::max(arena_end, offset + block.bytes);
    placed.push_back(b);
  }
  return arena_end;
}

}  // namespace

MemoryPlan plan_memory(std::span<const std::int64_t> buffer_bytes,
                       std::span<const BufferStep> steps) {
  const std::size_t n = buffer_bytes.size();
  for (std::size_t b = 0; b < n; ++b)
    if (buffer_bytes[b] < 0)
      fail("plan_memory", "buffer {} has a negative size ({} bytes)", b, buffer_bytes[b]);
  std::vector<std::int64_t> last_read(n, -1), last_write(n, -1);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const BufferStep& step = steps[s];
    check_buffer(step.writes, n, s);
    for (std::int32_t b : step.reads) {
      check_buffer(b, n, s);
      if (b >= 0) last_read[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(s);
    }
    for (std::int32_t b : step.donors) check_buffer(b, n, s);
    if (step.writes >= 0)
      last_write[static_cast<std::size_t>(step.writes)] = static_cast<std::int64_t>(s);
  }

  MemoryPlan plan;
  plan.offsets.assign(n, 0);
  plan.block.assign(n, -1);
  plan.donor.assign(n, -1);
  std::vector<Block> blocks;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const BufferStep& step = steps[s];
    if (step.writes < 0) continue;
    const auto w = static_cast<std::size_t>(step.writes);
    const auto here = static_cast<std::int64_t>(s);
    const std::int64_t end = std::max(last_read[w], here);
    if (plan.block[w] >= 0) {  // written again: same block, lives at least until this step
      Block& block = blocks[static_cast<std::size_t>(plan.block[w])];
      block.last = std::max(block.last, end);
      continue;
    }
    const std::int64_t bytes = arena_block_bytes(buffer_bytes[w]);
    const auto donor = std::find_if(step.donors.begin(), step.donors.end(), [&](std::int32_t d) {
      if (d < 0) return false;
      const auto i = static_cast<std::size_t>(d);
      return plan.block[i] >= 0 && last_read[i] == here && last_write[i] < here;
    });
    if (donor != step.donors.end()) {
      plan.donor[w] = *donor;
      plan.block[w] = plan.block[static_cast<std::size_t>(*donor)];
      Block& block = blocks[static_cast<std::size_t>(plan.block[w])];
      block.bytes = std::max(block.bytes, bytes);
      block.last = std::max(block.last, end);
    } else {
      plan.block[w] = static_cast<std::int32_t>(blocks.size());
      blocks.push_back(Block{bytes, here, end});
    }
  }

  plan.arena_bytes = place_blocks(blocks);
  for (std::size_t b = 0; b < n; ++b)
    if (plan.block[b] >= 0)
      plan.offsets[b] = blocks[static_cast<std::size_t>(plan.block[b])].offset;
  return plan;
}

}  // namespace kiln::detail

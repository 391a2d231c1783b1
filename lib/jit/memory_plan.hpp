#pragma once
// Arena memory planning on abstract buffers and steps (the same job as ggml-alloc): where in one
// arena each intermediate buffer of a program lives, from the buffers' lifetimes, with buffers
// whose lifetimes do not overlap sharing memory and an elementwise step writing over an input
// that dies there (in place). It knows nothing about plans, graphs or tensors: build_plan
// (jit/plan.cpp) describes its arena roots as buffers and its steps as BufferSteps.
//
// The rules, in the order plan_memory applies them:
//  1. Lifetimes. A buffer lives from the first step that writes it to the last step that reads
//     or writes it (inclusive: a step's inputs and its output are alive together). A buffer
//     written by several steps (a matmul epilogue accumulates one output over several GEMMs)
//     keeps the block of its first write; every later write extends its lifetime to
//     max(its last read, that step) and ignores the step's donors.
//  2. In place. A step writing a buffer for the first time takes over the block of its first
//     donor (in the order given) that already has a block and whose lifetime ends at this step:
//     it is read here for the last time and written by no later step. The block is then the
//     donor's and the new buffer's (a chain a -> b -> c is one block), and lives until the new
//     buffer dies. A donor's lifetime ends at one step, and a step writes one buffer, so each
//     donor gives its block at most once.
//  3. Placement. Each block is as large as its largest buffer (arena_block_bytes: at least 1
//     byte, rounded up to arena_alignment). Blocks are placed largest first (a stable sort:
//     equal sizes in the order their first buffer was written), each at the lowest offset where
//     it overlaps no already placed block whose lifetime overlaps its own (first fit). Greedy by
//     size packs far tighter than allocating in program order.
//
// The split of the in-place conditions: the caller lists as donors only what may be overwritten
// as far as the data is concerned: inputs of an elementwise step (each output element depends
// only on the input elements at its own position), in the arena, read by that step only with
// the output's exact layout and with the output's block size. The planner checks only what
// depends on lifetimes (rule 2). A donor must be among the step's reads to be read there last,
// so a donor that is not read there is never taken.

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::detail {

/// Every arena offset and arena size is a multiple of this (a cache line).
inline constexpr std::int64_t arena_alignment = 64;

/// The arena block `bytes` needs: its bytes (at least 1) rounded up to arena_alignment.
std::int64_t arena_block_bytes(std::int64_t bytes);

/// What one step of the program (steps are given in program order) does with arena buffers.
/// Buffer indices are into plan_memory's buffer_bytes; -1 (a buffer outside the arena) is
/// ignored everywhere.
struct BufferStep {
  std::int32_t writes = -1;         // the buffer the step writes, or -1
  std::vector<std::int32_t> reads;  // the buffers it reads (repeats allowed)
  /// Reads whose memory `writes` may take over, best first; the caller has checked that the
  /// data allows it (elementwise step, exact layout, same block size; see the file comment).
  std::vector<std::int32_t> donors;
};

/// Where each buffer lives in the arena.
struct MemoryPlan {
  std::vector<std::int64_t> offsets;  // per buffer: byte offset in the arena (never written: 0)
  /// Per buffer: its block (blocks are numbered in the order they were created), shared by the
  /// buffers of one in-place chain; -1 if no step writes the buffer.
  std::vector<std::int32_t> block;
  std::vector<std::int32_t> donor;  // per buffer: the buffer whose block it took over, or -1
  std::int64_t arena_bytes = 0;     // the end of the highest block (0: no buffer is written)
};

/// Plans the arena for buffers of buffer_bytes[b] bytes each (any size >= 0; rounded up by
/// arena_block_bytes) used by `steps`, by the rules in the file comment. Throws kiln::Error on
/// a negative size or a buffer index out of range.
MemoryPlan plan_memory(std::span<const std::int64_t> buffer_bytes,
                       std::span<const BufferStep> steps);

}  // namespace kiln::detail

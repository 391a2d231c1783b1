// The arena memory planner on its own (jit/memory_plan.hpp): lifetimes, alignment, in-place
// donation, buffers written by several steps, placement largest first, and a randomized check
// of its rules. build_plan's use of it is covered by test_plan.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "jit/memory_plan.hpp"

using kiln::detail::arena_block_bytes;
using kiln::detail::BufferStep;
using kiln::detail::MemoryPlan;
using kiln::detail::plan_memory;

namespace {

/// A step writing `w` (-1: none), reading `r`, offering donors `d`.
BufferStep step(std::int32_t w, std::vector<std::int32_t> r = {},
                std::vector<std::int32_t> d = {}) {
  return BufferStep{w, std::move(r), std::move(d)};
}

/// The planner's rules checked from the outside (lifetimes recomputed here): the first rule
/// broken, or "" if the plan keeps them all.
std::string broken_rule(const std::vector<std::int64_t>& bytes,
                        const std::vector<BufferStep>& steps, const MemoryPlan& plan) {
  const std::size_t n = bytes.size();
  if (plan.offsets.size() != n || plan.block.size() != n || plan.donor.size() != n)
    return "a result vector does not have one entry per buffer";
  std::vector<std::int64_t> first_write(n, -1), last_read(n, -1), last_write(n, -1);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const auto here = static_cast<std::int64_t>(s);
    for (std::int32_t r : steps[s].reads)
      if (r >= 0) last_read[static_cast<std::size_t>(r)] = here;
    if (const std::int32_t w = steps[s].writes; w >= 0) {
      auto& first = first_write[static_cast<std::size_t>(w)];
      if (first < 0) first = here;
      last_write[static_cast<std::size_t>(w)] = here;
    }
  }
  const auto end = [&](std::size_t b) { return std::max(last_read[b], last_write[b]); };
  const auto size = [&](std::size_t b) { return arena_block_bytes(bytes[b]); };
  // Whether buffer d could give its block to the buffer first written at step s.
  const auto may_donate = [&](std::int32_t d, std::int64_t s) {
    if (d < 0) return false;
    const auto i = static_cast<std::size_t>(d);
    return first_write[i] >= 0 && first_write[i] < s && last_read[i] == s && last_write[i] < s;
  };
  std::vector<int> donations(n, 0);
  std::int64_t top = 0;
  for (std::size_t b = 0; b < n; ++b) {
    const std::string name = "buffer " + std::to_string(b);
    if (first_write[b] < 0) {
      if (plan.offsets[b] != 0 || plan.block[b] != -1 || plan.donor[b] != -1)
        return name + " is never written but has a place";
      continue;
    }
    if (plan.block[b] < 0) return name + " is written but has no block";
    if (plan.offsets[b] % 64 != 0) return name + " is not 64-byte aligned";
    if (plan.offsets[b] + size(b) > plan.arena_bytes) return name + " ends past the arena";
    top = std::max(top, plan.offsets[b] + size(b));
    const std::vector<std::int32_t>& donors =
        steps[static_cast<std::size_t>(first_write[b])].donors;
    const auto taken =
        plan.donor[b] < 0 ? donors.end() : std::find(donors.begin(), donors.end(), plan.donor[b]);
    if (std::any_of(donors.begin(), taken,
                    [&](std::int32_t d) { return may_donate(d, first_write[b]); }))
      return name + " passed over a donor that dies where it is first written";
    if (plan.donor[b] < 0) continue;
    const auto a = static_cast<std::size_t>(plan.donor[b]);
    if (taken == donors.end()) return name + " took a block from a buffer not among its donors";
    if (!may_donate(plan.donor[b], first_write[b]))
      return name + " took the block of a buffer that does not die where it is first written";
    if (plan.block[a] != plan.block[b] || plan.offsets[a] != plan.offsets[b])
      return name + " does not share its donor's block";
    if (++donations[a] > 1) return "buffer " + std::to_string(a) + " gave its block twice";
  }
  if (top != plan.arena_bytes) return "the arena is larger than its highest buffer";
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a + 1; b < n; ++b) {
      if (first_write[a] < 0 || first_write[b] < 0 || plan.block[a] == plan.block[b]) continue;
      const bool alive_together = first_write[a] <= end(b) && first_write[b] <= end(a);
      const bool apart = plan.offsets[a] + size(a) <= plan.offsets[b] ||
                         plan.offsets[b] + size(b) <= plan.offsets[a];
      if (alive_together && !apart)
        return "buffers " + std::to_string(a) + " and " + std::to_string(b) +
               " are alive together and overlap in memory";
    }
  }
  return "";
}

/// One planned program and what it must give.
struct Case {
  const char* name;
  std::vector<std::int64_t> bytes;
  std::vector<BufferStep> steps;
  std::vector<std::int64_t> offsets;
  std::int64_t arena_bytes;
  std::vector<std::int32_t> donor = {};  // empty: no buffer takes another's block
};

void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    INFO(c.name);
    const MemoryPlan plan = plan_memory(c.bytes, c.steps);
    CHECK(plan.offsets == c.offsets);
    CHECK(plan.arena_bytes == c.arena_bytes);
    const std::vector<std::int32_t> no_donors(c.bytes.size(), -1);
    CHECK(plan.donor == (c.donor.empty() ? no_donors : c.donor));
    CHECK(broken_rule(c.bytes, c.steps, plan) == "");
  }
}

}  // namespace

TEST_CASE("memory plan: buffers alive at different steps share memory, others do not",
          "[memory_plan]") {
  check_cases({
      {"disjoint lifetimes share offset 0",
       {128, 128},
       {step(0), step(-1, {0}), step(1), step(-1, {1})},
       {0, 0},
       128},
      {"overlapping lifetimes get disjoint ranges",
       {128, 128},
       {step(0), step(1), step(-1, {0, 1})},
       {0, 128},
       256},
      {"a step's input and output are alive together",
       {128, 128},
       {step(0), step(1, {0})},
       {0, 128},
       256},
      {"a buffer overlapping two that do not overlap each other",
       {128, 64, 128},
       {step(0), step(1, {0}), step(2, {1}), step(-1, {2})},
       {0, 128, 0},
       192},
      {"a buffer never read lives at its step only", {128, 128}, {step(0), step(1)}, {0, 0}, 128},
      {"a buffer never written has no place", {128}, {step(-1, {0})}, {0}, 0},
      {"no buffers", {}, {}, {}, 0},
  });
  const MemoryPlan unwritten = plan_memory(std::vector<std::int64_t>{128}, {});
  CHECK(unwritten.block == std::vector<std::int32_t>{-1});
}

TEST_CASE("memory plan: blocks are at least 1 byte, rounded up to 64", "[memory_plan]") {
  STATIC_REQUIRE(kiln::detail::arena_alignment == 64);
  const std::vector<std::pair<std::int64_t, std::int64_t>> sizes = {
      {0, 64}, {1, 64}, {63, 64}, {64, 64}, {65, 128}, {4000, 4032}};
  for (const auto& [bytes, block] : sizes) {
    INFO(bytes << " bytes");
    CHECK(arena_block_bytes(bytes) == block);
  }
  check_cases({
      {"a 0-byte and a 1-byte buffer take 64 each",
       {0, 1, 100},
       {step(0), step(1), step(2), step(-1, {0, 1, 2})},
       {128, 192, 0},
       256},
      {"odd sizes stay aligned",
       {65, 1000, 3},
       {step(0), step(1), step(2), step(-1, {0, 1, 2})},
       {1024, 0, 1152},
       1216},
  });
}

TEST_CASE("memory plan: an output takes the block of a donor that dies where it is written",
          "[memory_plan]") {
  check_cases({
      {"a donor read last at the writing step gives its block",
       {256, 256},
       {step(0), step(1, {0}, {0}), step(-1, {1})},
       {0, 0},
       256,
       {-1, 0}},
      {"a donor read later keeps its block",
       {256, 256},
       {step(0), step(1, {0}, {0}), step(-1, {0, 1})},
       {0, 256},
       512},
      {"a donor written again later keeps its block",
       {256, 256},
       {step(0), step(1, {0}, {0}), step(0), step(-1, {1})},
       {0, 256},
       512},
      {"a donor that died before the step is not taken (its memory is free anyway)",
       {256, 256},
       {step(0), step(-1, {0}), step(1, {}, {0}), step(-1, {1})},
       {0, 0},
       256},
      {"a donor never written has no block to give",
       {256, 256},
       {step(1, {0}, {0}), step(-1, {1})},
       {0, 0},
       256},
      {"the first donor in preference order that dies here is taken",
       {256, 256, 256},
       {step(0), step(1), step(2, {0, 1}, {1, 0}), step(-1, {2})},
       {0, 256, 256},
       512,
       {-1, -1, 1}},
      {"a donor that does not die here is passed over for the next",
       {256, 256, 256},
       {step(0), step(1), step(2, {0, 1}, {0, 1}), step(-1, {0, 2})},
       {0, 256, 256},
       512,
       {-1, -1, 1}},
      {"one donor per output: the other dying donor's memory goes to a later block",
       {256, 256, 256, 256},
       {step(0), step(1), step(2, {0, 1}, {0, 1}), step(3), step(-1, {2, 3})},
       {0, 256, 0, 256},
       512,
       {-1, -1, 0, -1}},
      {"a donor listed twice gives its block once",
       {256, 256},
       {step(0), step(1, {0, 0}, {0, 0}), step(-1, {1})},
       {0, 0},
       256,
       {-1, 0}},
      {"a chain a -> b -> c is one block",
       {256, 256, 256},
       {step(0), step(1, {0}, {0}), step(2, {1}, {1}), step(-1, {2})},
       {0, 0, 0},
       256,
       {-1, 0, 1}},
      {"a block is as large as its largest buffer",
       {64, 256, 64},
       {step(0), step(2), step(1, {0}, {0}), step(-1, {1, 2})},
       {0, 0, 256},
       320,
       {-1, 0, -1}},
  });
  const std::vector<BufferStep> chain = {step(0), step(1, {0}, {0}), step(2, {1}, {1}),
                                         step(-1, {2})};
  const MemoryPlan plan = plan_memory(std::vector<std::int64_t>{256, 256, 256}, chain);
  CHECK(plan.block == std::vector<std::int32_t>{0, 0, 0});
}

TEST_CASE("memory plan: a buffer written by several steps keeps one block", "[memory_plan]") {
  // A matmul epilogue: the bias is copied into the sum's buffer, then each GEMM accumulates.
  const std::vector<std::int64_t> bytes = {256, 256, 256};
  const std::vector<BufferStep> epilogue = {
      step(0),       step(1), step(0, {1}, {1}),  // written again; donors ignored
      step(-1, {0}), step(2), step(-1, {2})};
  const MemoryPlan plan = plan_memory(bytes, epilogue);
  CHECK(plan.block == std::vector<std::int32_t>{0, 1, 2});  // no new block for the second write
  check_cases({
      {"lives from its first write to its last read; a later write ignores its donors",
       bytes,
       epilogue,
       {0, 256, 0},
       512},
      {"written again after its last read, it lives until that write",
       {256, 256},
       {step(0), step(-1, {0}), step(1), step(0), step(-1, {1})},
       {0, 256},
       512},
  });
}

TEST_CASE("memory plan: blocks are placed largest first, each at the lowest free offset",
          "[memory_plan]") {
  check_cases({
      // Lifetimes 0: [0,1], 2: [1,2], 1: [2,3]. In program order (0, 2, 1) first fit puts 0 at
      // 0, 2 at 64 and 1 at 256: 384 bytes. Largest first: 2 at 0, 1 and 0 both at 192.
      {"largest first beats program order",
       {64, 128, 192},
       {step(0), step(2, {0}), step(1, {2}), step(-1, {1})},
       {192, 192, 0},
       320},
      // 0: [0,4] at 0, 1: [1,2] at 128, 2: [2,4] at 256; 3: [3,4] fits in the hole 1 left.
      {"a block goes into the lowest hole it fits",
       {128, 128, 128, 64},
       {step(0), step(1), step(2, {1}), step(3), step(-1, {0, 2, 3})},
       {0, 128, 256, 128},
       384},
      {"equal sizes are placed in the order they were first written, not by index",
       {128, 128},
       {step(1), step(0), step(-1, {0, 1})},
       {128, 0},
       256},
  });
}

TEST_CASE("memory plan: sizes and buffer indices are checked", "[memory_plan]") {
  const std::vector<std::int64_t> two = {64, 64};
  const std::vector<std::vector<BufferStep>> bad = {
      {step(2)}, {step(0, {2})}, {step(0, {0}, {-2})}, {step(-3)}};
  for (const auto& steps : bad) CHECK_THROWS_AS(plan_memory(two, steps), kiln::Error);
  CHECK_THROWS_AS(plan_memory(std::vector<std::int64_t>{-1}, {}), kiln::Error);
  CHECK_NOTHROW(plan_memory(two, std::vector<BufferStep>{step(-1, {-1}, {-1})}));
}

TEST_CASE("memory plan: random programs keep every rule", "[memory_plan]") {
  std::mt19937 rng(20240611);  // fixed: the same programs every run
  const auto pick = [&](std::uint32_t n) { return static_cast<std::int32_t>(rng() % n); };
  const std::vector<std::int64_t> sizes = {0, 1, 64, 65, 128, 200, 256, 1000};
  int donations = 0, shared_memory = 0;
  for (int round = 0; round < 400; ++round) {
    const auto n = static_cast<std::uint32_t>(1 + pick(10));
    std::vector<std::int64_t> bytes(n);
    for (auto& b : bytes) b = sizes[static_cast<std::size_t>(pick(8))];
    std::vector<BufferStep> steps(static_cast<std::size_t>(1 + pick(16)));
    std::vector<std::int32_t> written;  // reads mostly of buffers already written
    for (BufferStep& s : steps) {
      for (int i = pick(4); i > 0; --i) {
        std::int32_t r = -1;
        if (pick(8) != 0)
          r = written.empty() || pick(4) == 0 ? pick(n)
                                              : written[static_cast<std::size_t>(pick(
                                                    static_cast<std::uint32_t>(written.size())))];
        s.reads.push_back(r);
        if (pick(2) == 0) s.donors.push_back(r);
      }
      if (pick(8) == 0) s.donors.push_back(pick(n));     // not necessarily read here
      for (std::size_t i = s.donors.size(); i > 1; --i)  // shuffled (std::shuffle is not portable)
        std::swap(s.donors[i - 1],
                  s.donors[static_cast<std::size_t>(pick(static_cast<std::uint32_t>(i)))]);
      s.writes = pick(5) == 0 ? -1 : pick(n);
      if (s.writes >= 0) written.push_back(s.writes);
    }
    const MemoryPlan plan = plan_memory(bytes, steps);
    INFO("round " << round);
    CHECK(broken_rule(bytes, steps, plan) == "");
    for (std::size_t b = 0; b < n; ++b) {
      donations += plan.donor[b] >= 0;
      for (std::size_t c = b + 1; c < n; ++c)
        shared_memory += plan.block[b] >= 0 && plan.block[c] >= 0 &&
                         plan.block[b] != plan.block[c] && plan.offsets[b] == plan.offsets[c];
    }
  }
  // The programs exercise what the rules are about.
  CHECK(donations > 100);
  CHECK(shared_memory > 100);
}

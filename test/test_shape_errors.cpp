// Shape and data-movement ops: every bad argument is a kiln::Error naming the op.
#include <catch2/catch.hpp>

#include <limits>

#include "shape_test_support.hpp"

using namespace shape_test;

TEST_CASE("shape ops reject bad arguments with the op's name", "[shape]") {
  const Tensor m = iota({2, 3});
  const Tensor v5 = iota({5});
  const Tensor s = iota({});
  const Tensor undefined;
  const std::int64_t big = std::int64_t{1} << 40;
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  struct Case {
    std::string message;
    std::function<void()> run;
  };
  const std::vector<Case> cases = {
      // clang-format off
      // reshape
      {"[reshape] argument 0 is an undefined tensor", [&] { kiln::reshape(undefined, {1}); }},
      {"[reshape] cannot reshape [2,3] (6 elements) into [4,2]", [&] { kiln::reshape(m, {4, 2}); }},
      {"[reshape] cannot reshape [2,3] (6 elements) into [4,-1]",
       [&] { kiln::reshape(m, {4, -1}); }},
      {"[reshape] cannot reshape [0,3] (0 elements) into [0,-1]",
       [&] { kiln::reshape(iota({0, 3}), {0, -1}); }},
      {"[reshape] shape [1099511627776,1099511627776,0] has too many elements",
       [&] { kiln::reshape(iota({0}), {big, big, 0}); }},
      {"[broadcast_to] shape [1099511627776,1099511627776,0] has too many elements",
       [&] { kiln::broadcast_to(iota({0}), {big, big, 0}); }},
      {"[reshape] more than one -1 in shape [-1,-1]", [&] { kiln::reshape(m, {-1, -1}); }},
      {"[reshape] negative dimension -2 in shape [-2,-3]", [&] { kiln::reshape(m, {-2, -3}); }},
      {"[reshape] shape [1099511627776,1099511627776,1099511627776] has too many elements",
       [&] { kiln::reshape(m, {big, big, big}); }},
      // transpose
      {"[transpose] argument 0 is an undefined tensor", [&] { kiln::transpose(undefined); }},
      {"[transpose] permutation [0] has 1 entries, but [2,3] has rank 2",
       [&] { kiln::transpose(m, {0}); }},
      {"[transpose] axis 0 appears twice in permutation [0,-2]",
       [&] { kiln::transpose(m, {0, -2}); }},
      {"[transpose] axis 2 out of range for rank 2", [&] { kiln::transpose(m, {0, 2}); }},
      // expand_dims, squeeze
      {"[expand_dims] axis 3 out of range [-3, 2] for a new axis at rank 2",
       [&] { kiln::expand_dims(m, 3); }},
      {"[expand_dims] axis -4 out of range [-3, 2] for a new axis at rank 2",
       [&] { kiln::expand_dims(m, -4); }},
      {"[expand_dims] result rank 9 exceeds the maximum rank 8",
       [&] { kiln::expand_dims(iota({1, 1, 1, 1, 1, 1, 1, 1}), 0); }},
      {"[expand_dims] argument 0 is an undefined tensor", [&] { kiln::expand_dims(undefined, 0); }},
      {"[squeeze] cannot squeeze axis 1 of size 2 in shape [1,2,1]",
       [&] { kiln::squeeze(iota({1, 2, 1}), {1}); }},
      {"[squeeze] axis 0 listed twice in [0,-3]", [&] { kiln::squeeze(iota({1, 2, 1}), {0, -3}); }},
      {"[squeeze] axis 3 out of range for rank 3", [&] { kiln::squeeze(iota({1, 2, 1}), {3}); }},
      {"[squeeze] argument 0 is an undefined tensor", [&] { kiln::squeeze(undefined); }},
      // broadcast_to
      {"[broadcast_to] cannot broadcast [2,3] to [3]: the target has lower rank",
       [&] { kiln::broadcast_to(m, {3}); }},
      {"[broadcast_to] cannot broadcast [2,3] to [2,4]: axis 1 has size 3, not 1 or 4",
       [&] { kiln::broadcast_to(m, {2, 4}); }},
      {"[broadcast_to] negative dimension -1 in shape [-1,3]",
       [&] { kiln::broadcast_to(m, {-1, 3}); }},
      {"[broadcast_to] shape [1099511627776,1099511627776] has too many elements",
       [&] { kiln::broadcast_to(s, {big, big}); }},
      {"[broadcast_to] argument 0 is an undefined tensor",
       [&] { kiln::broadcast_to(undefined, {1}); }},
      // concat, stack
      {"[concat] needs at least one tensor", [&] { kiln::concat({}); }},
      {"[concat] argument 1 is an undefined tensor", [&] { kiln::concat({m, undefined}); }},
      {"[concat] cannot join rank-0 tensors (use stack)", [&] { kiln::concat({s, s}); }},
      {"[concat] dtypes differ: f32 (tensor 0) vs i32 (tensor 1; use kiln::cast)",
       [&] { kiln::concat({m, iota({2, 3}, kiln::i32)}); }},
      {"[concat] shapes [2,3] (tensor 0) and [3,3] (tensor 1) differ outside axis 1",
       [&] { kiln::concat({m, iota({3, 3})}, 1); }},
      {"[concat] shapes [2,3] (tensor 0) and [6] (tensor 2) differ outside axis 0",
       [&] { kiln::concat({m, m, iota({6})}); }},
      {"[concat] axis 2 out of range for rank 2", [&] { kiln::concat({m, m}, 2); }},
      {"[concat] result has too many elements along axis 0",
       [&] { const Tensor huge = kiln::broadcast_to(s, {max}); kiln::concat({huge, huge}); }},
      {"[concat] result [4611686018427387904] of f64 is too large to allocate",
       [&] {
         const Tensor huge = kiln::broadcast_to(kiln::scalar(1.0), {std::int64_t{1} << 61});
         kiln::concat({huge, huge});
       }},
      {"[gather] result [3,2305843009213693952] of f64 is too large to allocate",
       [&] {
         const Tensor huge = kiln::broadcast_to(kiln::scalar(1.0), {2, std::int64_t{1} << 61});
         kiln::gather(huge, kiln::tensor<std::int32_t>({0, 1, 0}));
       }},
      {"[tile] result [4611686018427387904] of f32 is too large to allocate",
       [&] { kiln::tile(kiln::broadcast_to(s, {std::int64_t{1} << 61}), {2}); }},
      {"[one_hot] result [2,2305843009213693951] of f64 is too large to allocate",
       [&] { kiln::one_hot(iota({2}, kiln::i32), max / 4, kiln::f64); }},
      {"[stack] needs at least one tensor", [&] { kiln::stack({}); }},
      {"[stack] argument 1 is an undefined tensor", [&] { kiln::stack({v5, undefined}); }},
      {"[stack] shapes differ: [5] (tensor 0) vs [4] (tensor 1)",
       [&] { kiln::stack({v5, iota({4})}); }},
      {"[stack] dtypes differ: f32 (tensor 0) vs i64 (tensor 1; use kiln::cast)",
       [&] { kiln::stack({v5, iota({5}, kiln::i64)}); }},
      {"[stack] axis 2 out of range [-2, 1] for a new axis at rank 1",
       [&] { kiln::stack({v5}, 2); }},
      {"[stack] result rank 9 exceeds the maximum rank 8",
       [&] { kiln::stack({iota({1, 1, 1, 1, 1, 1, 1, 1})}); }},
      // unstack, split
      {"[unstack] axis 0 out of range for rank 0", [&] { kiln::unstack(s); }},
      {"[unstack] argument 0 is an undefined tensor", [&] { kiln::unstack(undefined); }},
      {"[split] axis 0 of size 5 cannot be split into 2 equal sections",
       [&] { kiln::split(v5, 2); }},
      {"[split] sections must be positive, got 0", [&] { kiln::split(v5, 0); }},
      {"[split] sections must be positive, got -1", [&] { kiln::split(v5, -1); }},
      {"[split] sizes [2,2] add up to 4, but axis 0 of [5] has size 5",
       [&] { kiln::split(v5, std::vector<std::int64_t>{2, 2}); }},
      {"[split] negative size -1 in sizes [-1,6]",
       [&] { kiln::split(v5, std::vector<std::int64_t>{-1, 6}); }},
      {"[split] sizes [9223372036854775807,9223372036854775807] add up to more than an "
       "axis can hold",
       [&] { kiln::split(v5, std::vector<std::int64_t>{max, max}); }},
      {"[split] axis 2 out of range for rank 2", [&] { kiln::split(m, 1, 2); }},
      {"[split] argument 0 is an undefined tensor", [&] { kiln::split(undefined, 1); }},
      // slice
      {"[slice] step is 0 for axis 0", [&] { kiln::slice(v5, 0, 0, 5, 0); }},
      {"[slice] start 6 out of range for axis 0 of size 5 (step 1)",
       [&] { kiln::slice(v5, 0, 6, none); }},
      {"[slice] start -6 out of range for axis 0 of size 5 (step 1)",
       [&] { kiln::slice(v5, 0, -6, none); }},
      {"[slice] stop 6 out of range for axis 0 of size 5 (step 1)",
       [&] { kiln::slice(v5, 0, 0, 6); }},
      {"[slice] start 5 out of range for axis 0 of size 5 (step -1)",
       [&] { kiln::slice(v5, 0, 5, none, -1); }},
      {"[slice] stop -7 out of range for axis 0 of size 5 (step -1)",
       [&] { kiln::slice(v5, 0, 4, -7, -1); }},
      {"[slice] stop 4 out of range for axis 1 of size 3 (step 1)",
       [&] { kiln::slice(m, {{0, 1, 1}, {0, 4, 1}}); }},
      {"[slice] 3 slices for shape [2,3] of rank 2", [&] { kiln::slice(m, {{}, {}, {}}); }},
      {"[slice] 1 slices for shape [] of rank 0", [&] { kiln::slice(s, {{}}); }},
      {"[slice] axis 2 out of range for rank 2", [&] { kiln::slice(m, 2, 0, 1); }},
      {"[slice] argument 0 is an undefined tensor", [&] { kiln::slice(undefined, {}); }},
      // gather
      {"[gather] index 7 out of range for axis 0 of size 5",
       [&] { kiln::gather(v5, kiln::tensor<std::int64_t>({1, 7})); }},
      {"[gather] index -6 out of range for axis 0 of size 5",
       [&] { kiln::gather(v5, kiln::tensor<std::int32_t>({-6})); }},
      {"[gather] index 3 out of range for axis 1 of size 3",
       [&] { kiln::gather(m, kiln::tensor<std::int32_t>({3}), -1); }},
      {"[gather] index 0 out of range for axis 0 of size 0",
       [&] { kiln::gather(iota({0, 2}), kiln::tensor<std::int32_t>({0})); }},
      {"[gather] indices must be i32 or i64, got f32", [&] { kiln::gather(v5, iota({1})); }},
      {"[gather] axis 2 out of range for rank 2",
       [&] { kiln::gather(m, kiln::tensor<std::int32_t>({0}), 2); }},
      {"[gather] axis 0 out of range for rank 0",
       [&] { kiln::gather(s, kiln::tensor<std::int32_t>({0})); }},
      {"[gather] result rank 9 exceeds the maximum rank 8",
       [&] { kiln::gather(m, iota({1, 1, 1, 1, 1, 1, 1, 1}, kiln::i32)); }},
      {"[gather] argument 1 is an undefined tensor", [&] { kiln::gather(v5, undefined); }},
      {"[gather] argument 0 is an undefined tensor", [&] { kiln::gather(undefined, v5); }},
      // one_hot
      {"[one_hot] indices must be i32 or i64, got f32", [&] { kiln::one_hot(v5, 3); }},
      {"[one_hot] depth -1 is negative", [&] { kiln::one_hot(iota({2}, kiln::i32), -1); }},
      {"[one_hot] result rank 9 exceeds the maximum rank 8",
       [&] { kiln::one_hot(iota({1, 1, 1, 1, 1, 1, 1, 1}, kiln::i32), 2); }},
      {"[one_hot] argument 0 is an undefined tensor", [&] { kiln::one_hot(undefined, 2); }},
      // pad
      {"[pad] 1 widths given for shape [2,3] of rank 2", [&] { kiln::pad(m, {{1, 1}}); }},
      {"[pad] negative width (-1, 0) for axis 0", [&] { kiln::pad(m, {{-1, 0}, {0, 0}}); }},
      {"[pad] negative width (0, -2) for axis 1", [&] { kiln::pad(m, {{0, 0}, {0, -2}}); }},
      {"[pad] widths (9223372036854775807, 0) make axis 0 too large",
       [&] { kiln::pad(m, {{max, 0}, {0, 0}}); }},
      {"[pad] shape [1099511627778,1099511627779] has too many elements",
       [&] { kiln::pad(m, {{big, 0}, {big, 0}}); }},
      {"[pad] argument 0 is an undefined tensor", [&] { kiln::pad(undefined, {}); }},
      // tile
      {"[tile] 1 reps given for shape [2,3] of rank 2", [&] { kiln::tile(m, {2}); }},
      {"[tile] negative repetition -1 for axis 1", [&] { kiln::tile(m, {1, -1}); }},
      {"[tile] repeating [2,3] by [9223372036854775807,1] makes axis 0 too large",
       [&] { kiln::tile(m, {max, 1}); }},
      {"[tile] shape [2199023255552,3298534883328] has too many elements",
       [&] { kiln::tile(m, {big, big}); }},
      {"[tile] argument 0 is an undefined tensor", [&] { kiln::tile(undefined, {}); }},
      // clang-format on
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": expecting " << cases[i].message);
    CHECK(error_of(cases[i].run) == cases[i].message);
  }
}

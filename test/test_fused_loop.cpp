// Generated fused loops (kernels/fused_loop.hpp) against the block interpreter running the row
// kernels of the same level, at each level the CPU has (AVX2 on ymm registers; AVX-512 on zmm
// registers where the CPU has AVX-512F): every instruction the generator covers, alone and in
// programs, with flat and broadcast inputs, lengths around the vector width, special values,
// outputs streamed at every alignment, and the two-thread split; the bits must be the same (any
// NaN for a NaN). Programs the generator does not cover must come back without a loop. On a CPU
// without AVX2 and FMA nothing here can run (no loop is generated there), which the first check
// says.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "core/environment.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/fused.hpp"
#include "kernels/fused_loop.hpp"
#include "kernels/kernel.hpp"
#include "kernels/streaming.hpp"

namespace {

using kiln::Shape;
using kiln::detail::ArrayRef;
using kiln::detail::FusedLayout;
using kiln::detail::FusedOp;
using kiln::detail::FusedProgram;
using kiln::detail::Prim;
using kiln::detail::SimdLevel;

bool cpu_runs_loops() { return kiln::detail::cpu_simd_level() >= SimdLevel::avx2; }

/// The levels loops are written for that this CPU runs: avx2, and avx512 with AVX-512F.
std::vector<SimdLevel> loop_levels() {
  std::vector<SimdLevel> levels{SimdLevel::avx2};
  if (kiln::detail::cpu_simd_level() >= SimdLevel::avx512) levels.push_back(SimdLevel::avx512);
  return levels;
}

/// The level the running test case checks: programs are resolved against its row kernels and
/// loops are written for it. Each case picks it with GENERATE, so it runs once per level.
SimdLevel tested_level = SimdLevel::avx2;

/// Picks the level for the rest of a test case (call it through GENERATE's value).
void test_at(SimdLevel level) {
  tested_level = level;
  UNSCOPED_INFO("loops at " << kiln::detail::simd_level_name(level));
}

/// An instruction of a test program: operands >= 0 are inputs, < 0 scratch slots.
FusedOp instruction(Prim prim, std::int16_t a, std::int16_t b = 0, std::int16_t slot = 0) {
  FusedOp op;
  op.prim = prim;
  op.operands = {a, b, 0};
  op.result_slot = slot;
  return op;
}

FusedProgram program_of(std::size_t num_inputs, std::size_t num_slots, std::vector<FusedOp> ops) {
  FusedProgram program;
  program.num_inputs = num_inputs;
  program.num_slots = num_slots;
  program.ops = std::move(ops);
  kiln::detail::resolve_fused_program(program, kiln::detail::elementwise_rows(tested_level));
  return program;
}

/// tanh(in0 * in1 + in2) * in3: the chain of workload 2 with its 0.5 as an input.
FusedProgram chain_program() {
  FusedProgram chain =
      program_of(4, 1,
                 {instruction(Prim::mul, 0, 1, 0), instruction(Prim::add, -1, 2, 0),
                  instruction(Prim::tanh, -1, 0, 0), instruction(Prim::mul, -1, 3)});
  chain.text = "tanh(in0 * in1 + in2) * in3";
  return chain;
}

/// Values every instruction must get right: signed zeros, infinities, NaN, subnormals, the
/// clamp points of tanh and sigmoid and their neighbours, then a spread of ordinary values.
std::vector<float> test_values(std::size_t n, std::uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {
      0.0f,   -0.0f,   1.0f,   -1.0f,  inf,    -inf,    std::numeric_limits<float>::quiet_NaN(),
      1e-40f, -1e-40f, 1e-30f, 9.0f,   -9.0f,  8.9f,    -8.9f,
      88.8f,  -88.8f,  87.4f,  -87.4f, 100.0f, -100.0f, 0.5f,
      2.0f,   1e20f,   -3.5f,  0.3f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = i < special.size() ? special[i] : wide(rng);
  // Shuffle so the special values land in vector bodies and tails alike.
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

/// Runs `program` over inputs of `n` elements (a null pointer in `broadcast` marks a flat input;
/// a scalar's value otherwise) through the interpreter and through a generated loop, and checks
/// the two outputs bit for bit, and the loop's guard elements. Returns false when no loop was
/// generated.
bool loop_matches_interpreter(const FusedProgram& program, std::int64_t n,
                              const std::vector<const float*>& broadcast,
                              std::size_t output_offset = 0) {
  const std::size_t count = static_cast<std::size_t>(n);
  std::vector<std::vector<float>> data;
  std::vector<ArrayRef> in;
  for (std::size_t k = 0; k < program.num_inputs; ++k) {
    if (broadcast[k] != nullptr) {
      in.push_back({const_cast<float*>(broadcast[k]), kiln::f32, Shape{n}, Shape{0}});
    } else {
      data.push_back(test_values(count, static_cast<std::uint32_t>(k + 17 * count)));
      in.push_back({data.back().data(), kiln::f32, Shape{n}, Shape{1}});
    }
  }
  std::vector<float> expected(count + 2 * 8 + output_offset, -7.0f);
  std::vector<float> actual = expected;
  const ArrayRef expected_ref{expected.data() + 8 + output_offset, kiln::f32, Shape{n}, Shape{1}};
  const ArrayRef actual_ref{actual.data() + 8 + output_offset, kiln::f32, Shape{n}, Shape{1}};
  FusedLayout layout = kiln::detail::layout_fused(in, expected_ref);
  REQUIRE(layout.loop == nullptr);
  std::vector<const void*> pointers;
  for (const ArrayRef& r : in) pointers.push_back(r.data);
  kiln::detail::run_fused(program, layout, pointers.data(), expected_ref.data);
  layout.loop = kiln::detail::generate_fused_loop(program, layout, tested_level);
  if (layout.loop == nullptr) return false;
  kiln::detail::run_fused(program, layout, pointers.data(), actual_ref.data);
  std::size_t mismatches = 0;
  std::size_t first = 0;
  // Bits, but any NaN for a NaN: where both operands of a commutative instruction are NaN the
  // result is one of them, and the compiler may order the row kernel's operands either way (in
  // its vector body and its tail alike), so not even the row kernels pin the NaN's sign.
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const bool same =
        std::bit_cast<std::uint32_t>(expected[i]) == std::bit_cast<std::uint32_t>(actual[i]) ||
        (std::isnan(expected[i]) && std::isnan(actual[i]));
    if (!same && mismatches++ == 0) first = i;
  }
  INFO(program.text << " over " << n << " elements, output offset " << output_offset << ": "
                    << mismatches << " elements differ, the first at " << first);
  if (mismatches > 0) INFO("interpreter " << expected[first] << ", loop " << actual[first]);
  CHECK(mismatches == 0);
  return true;
}

const std::int64_t lengths[] = {1, 3, 7, 8, 9, 15, 16, 23, 31, 64, 1000, 4099};

}  // namespace

TEST_CASE("generated fused loops: this CPU runs them", "[fused_loop]") {
  if (!cpu_runs_loops())
    WARN("no AVX2 and FMA on this CPU: no fused loop is generated, nothing below runs one");
  SUCCEED();
}

TEST_CASE("generated fused loops give the row kernels' bits, instruction by instruction",
          "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  const Prim unary[] = {Prim::neg,  Prim::abs,   Prim::square, Prim::relu,
                        Prim::sqrt, Prim::rsqrt, Prim::tanh,   Prim::sigmoid};
  for (Prim prim : unary) {
    FusedProgram program = program_of(1, 0, {instruction(prim, 0)});
    program.text = kiln::detail::name(prim);
    for (std::int64_t n : lengths) REQUIRE(loop_matches_interpreter(program, n, {nullptr}));
    const float scalar = -2.75f;
    REQUIRE(loop_matches_interpreter(program, 37, {&scalar}));
  }
  const Prim binary[] = {Prim::add, Prim::sub, Prim::mul, Prim::div, Prim::maximum, Prim::minimum};
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float scalars[] = {0.5f, -0.0f, 0.0f, nan, inf};
  for (Prim prim : binary) {
    FusedProgram program = program_of(2, 0, {instruction(prim, 0, 1)});
    program.text = kiln::detail::name(prim);
    for (std::int64_t n : lengths)
      REQUIRE(loop_matches_interpreter(program, n, {nullptr, nullptr}));
    for (const float& s : scalars) {
      CAPTURE(s);
      REQUIRE(loop_matches_interpreter(program, 29, {&s, nullptr}));
      REQUIRE(loop_matches_interpreter(program, 29, {nullptr, &s}));
    }
    // The same input on both sides (one load for both operands).
    FusedProgram same = program_of(1, 0, {instruction(prim, 0, 0)});
    same.text = program.text + "(x, x)";
    REQUIRE(loop_matches_interpreter(same, 40, {nullptr}));
  }
}

TEST_CASE("generated fused loops give the row kernels' bits for comparisons, where and casts",
          "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  const Prim comparisons[] = {Prim::equal,      Prim::not_equal, Prim::less,
                              Prim::less_equal, Prim::greater,   Prim::greater_equal};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float scalars[] = {0.0f, -0.0f, nan, 1.0f};
  for (Prim prim : comparisons) {
    FusedOp compare = instruction(prim, 0, 1, 0);
    compare.out_dtype = kiln::DType::boolean;
    // cast<f32>(a op b), as a loss's accuracy count reads it.
    FusedOp cast = instruction(Prim::cast, -1);
    cast.in_dtype = kiln::DType::boolean;
    FusedProgram counted = program_of(2, 1, {compare, cast});
    counted.text = "cast<f32>(" + std::string(kiln::detail::name(prim)) + ")";
    // where(a op b, c, a), as relu's gradient reads it (a third input, and an input twice).
    FusedOp where = instruction(Prim::where, -1, 2);
    where.operands[2] = 0;
    FusedProgram selected = program_of(3, 1, {compare, where});
    selected.text = "where(" + std::string(kiln::detail::name(prim)) + ", in2, in0)";
    for (std::int64_t n : lengths) {
      REQUIRE(loop_matches_interpreter(counted, n, {nullptr, nullptr}));
      REQUIRE(loop_matches_interpreter(selected, n, {nullptr, nullptr, nullptr}));
    }
    for (const float& s : scalars) {
      CAPTURE(s);
      REQUIRE(loop_matches_interpreter(counted, 29, {nullptr, &s}));
      REQUIRE(loop_matches_interpreter(selected, 29, {nullptr, &s, &s}));
    }
  }
}

TEST_CASE("generated fused loops run whole programs: the chain, silu, shared and dead values",
          "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  const float half = 0.5f;
  const FusedProgram chain = chain_program();
  for (std::int64_t n : lengths)
    REQUIRE(loop_matches_interpreter(chain, n, {nullptr, nullptr, nullptr, &half}));
  // x * sigmoid(x): an input read by two instructions.
  FusedProgram silu =
      program_of(1, 1, {instruction(Prim::sigmoid, 0, 0, 0), instruction(Prim::mul, 0, -1)});
  silu.text = "in0 * sigmoid(in0)";
  for (std::int64_t n : lengths) REQUIRE(loop_matches_interpreter(silu, n, {nullptr}));
  // A slot read twice by one instruction and later by another; a result nobody reads; slots
  // written again after their last read.
  FusedProgram shared =
      program_of(2, 3,
                 {instruction(Prim::sub, 0, 1, 0), instruction(Prim::mul, -1, -1, 1),
                  instruction(Prim::relu, 1, 0, 2), instruction(Prim::maximum, -2, -1, 2),
                  instruction(Prim::sigmoid, -3, 0, 0), instruction(Prim::minimum, -1, -3)});
  shared.text = "min(sigmoid(max((a - b)^2, a - b)), max(...))";
  for (std::int64_t n : lengths) REQUIRE(loop_matches_interpreter(shared, n, {nullptr, nullptr}));
  // Two threads split the output (more than 2^18 elements), with a tail of 5. Its 8 MiB come
  // from beyond the L2 caches: the loop asks for its streams ahead, and a smaller run's does not.
  const std::int64_t large = (std::int64_t{1} << 19) + 5;
  REQUIRE(loop_matches_interpreter(chain, large, {nullptr, nullptr, nullptr, &half}));
  const auto prefetch_bytes_at = [&](std::int64_t n) {
    const ArrayRef flat{nullptr, kiln::f32, Shape{n}, Shape{1}};
    const ArrayRef scalar{nullptr, kiln::f32, Shape{n}, Shape{0}};
    const ArrayRef in[4] = {flat, flat, flat, scalar};
    const FusedLayout layout = kiln::detail::layout_fused(in, flat);
    const auto loop = kiln::detail::generate_fused_loop(chain, layout, tested_level);
    REQUIRE(loop != nullptr);
    return kiln::detail::fused_loop_prefetch_bytes(*loop);
  };
  const bool asks = kiln::detail::switched_on_by_environment("KILN_LOOP_PREFETCH");
  CHECK(prefetch_bytes_at(large) == (asks ? kiln::detail::loop_prefetch_bytes : 0));
  CHECK(prefetch_bytes_at(4099) == 0);
}

namespace {

/// How a matrix test input is read: the output's layout, a row repeated down the rows (a bias),
/// one value per row (a column), one value, or rows of a wider matrix.
enum class MatrixRead { flat, row, column, scalar, wider };

/// Runs `program` over [rows, columns] inputs read as `reads` says, through the interpreter
/// (from the refs: every layout mode) and through a generated loop, which must exist and
/// give the same bits (any NaN for a NaN).
void check_matrix_program(const FusedProgram& program, std::int64_t rows, std::int64_t columns,
                          const std::vector<MatrixRead>& reads) {
  const Shape shape{rows, columns};
  std::vector<std::vector<float>> data;
  std::vector<ArrayRef> in;
  for (std::size_t k = 0; k < reads.size(); ++k) {
    const std::int64_t pitch = reads[k] == MatrixRead::wider ? columns + 5 : columns;
    data.push_back(test_values(static_cast<std::size_t>(rows * pitch), 31 + k));
    float* base = data.back().data();
    switch (reads[k]) {
      case MatrixRead::flat:
      case MatrixRead::wider:
        in.push_back({base, kiln::f32, shape, Shape{pitch, 1}});
        break;
      case MatrixRead::row:
        in.push_back({base, kiln::f32, shape, Shape{0, 1}});
        break;
      case MatrixRead::column:
        in.push_back({base, kiln::f32, shape, Shape{1, 0}});
        break;
      case MatrixRead::scalar:
        in.push_back({base, kiln::f32, shape, Shape{0, 0}});
        break;
    }
  }
  const std::size_t count = static_cast<std::size_t>(rows * columns);
  std::vector<float> expected(count), actual(count);
  const ArrayRef expected_ref{expected.data(), kiln::f32, shape, Shape{columns, 1}};
  const ArrayRef actual_ref{actual.data(), kiln::f32, shape, Shape{columns, 1}};
  kiln::detail::run_fused(program, in, expected_ref);
  FusedLayout layout = kiln::detail::layout_fused(in, actual_ref);
  layout.loop = kiln::detail::generate_fused_loop(program, layout, tested_level);
  INFO(program.text << " over " << rows << " x " << columns);
  REQUIRE(layout.loop != nullptr);
  std::vector<const void*> pointers;
  for (const ArrayRef& r : in) pointers.push_back(r.data);
  kiln::detail::run_fused(program, layout, pointers.data(), actual.data());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (std::bit_cast<std::uint32_t>(expected[i]) != std::bit_cast<std::uint32_t>(actual[i]) &&
        !(std::isnan(expected[i]) && std::isnan(actual[i])))
      ++mismatches;
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("generated fused loops walk matrices row by row: biases, per-row values, wider rows",
          "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  // tanh(x * scale + bias) with the bias a row, the scale one value per row; then a program
  // that reads rows of a wider matrix and a scalar.
  FusedProgram affine = program_of(3, 1,
                                   {instruction(Prim::mul, 0, 1, 0),
                                    instruction(Prim::add, -1, 2, 0), instruction(Prim::tanh, -1)});
  affine.text = "tanh(x * per_row + bias)";
  FusedProgram clipped =
      program_of(2, 1, {instruction(Prim::maximum, 0, 1, 0), instruction(Prim::sub, -1, 0)});
  clipped.text = "max(wide, scalar) - wide";
  // Rows of 3 (all tail), 8, 13, 1,000 (whole-row blocks), 1,030 (blocks across rows) and
  // 3,000 (long rows); enough rows to split between two threads at the larger sizes.
  const std::int64_t shapes[][2] = {{7, 3}, {5, 8}, {9, 13}, {300, 1000}, {17, 1030}, {200, 3000}};
  for (const auto& s : shapes) {
    check_matrix_program(affine, s[0], s[1],
                         {MatrixRead::flat, MatrixRead::column, MatrixRead::row});
    check_matrix_program(affine, s[0], s[1],
                         {MatrixRead::row, MatrixRead::scalar, MatrixRead::flat});
    check_matrix_program(clipped, s[0], s[1], {MatrixRead::wider, MatrixRead::scalar});
  }
  // Streamed outputs (the bound set low): each row's non-temporal stores aligned apart, the
  // rows of 13 and 1,030 starting at every alignment.
  kiln::detail::set_stream_output_bytes(256);
  const ArrayRef probe{nullptr, kiln::f32, Shape{9, 13}, Shape{13, 1}};
  const ArrayRef probe_in[1] = {probe};
  REQUIRE(kiln::detail::layout_fused(probe_in, probe).stream_output);
  check_matrix_program(affine, 9, 13, {MatrixRead::flat, MatrixRead::column, MatrixRead::row});
  check_matrix_program(affine, 17, 1030, {MatrixRead::row, MatrixRead::scalar, MatrixRead::flat});
  kiln::detail::set_stream_output_bytes(0);
}

TEST_CASE("plans take loops for flat runs and long rows, not for short rows", "[fused_loop]") {
  // fused_loop_for is the plan's policy: a loop's step from row to row and its masked tail
  // cost as much as a short row's work, so rows shorter than min_fused_loop_row keep the
  // interpreter's blocks of whole rows (a 5-step LSTM of 20 units ran its bias-and-activation
  // steps 2x slower with a call per row).
  tested_level =
      kiln::detail::simd_level() >= SimdLevel::avx2 ? kiln::detail::simd_level() : SimdLevel::avx2;
  FusedProgram affine =
      program_of(2, 1, {instruction(Prim::add, 0, 1, 0), instruction(Prim::tanh, -1)});
  const auto layout_of = [](std::int64_t rows, std::int64_t columns, bool bias) {
    const Shape shape{rows, columns};
    const ArrayRef x{nullptr, kiln::f32, shape, Shape{columns, 1}};
    const ArrayRef b{nullptr, kiln::f32, shape, bias ? Shape{0, 1} : Shape{columns, 1}};
    const ArrayRef in[2] = {x, b};
    return kiln::detail::layout_fused(in, x);
  };
  const std::int64_t short_row = kiln::detail::min_fused_loop_row - 1;
  const std::int64_t long_row = kiln::detail::min_fused_loop_row;
  const bool loops =
      kiln::detail::simd_level() >= SimdLevel::avx2 && std::getenv("KILN_FUSED_LOOPS") == nullptr;
  CHECK(kiln::detail::fused_loop_for(affine, layout_of(32, short_row, true)) == nullptr);
  CHECK((kiln::detail::fused_loop_for(affine, layout_of(32, long_row, true)) != nullptr) == loops);
  CHECK((kiln::detail::fused_loop_for(affine, layout_of(32, 20, false)) != nullptr) == loops);
  // The generator itself still writes the short-row loop (held to the interpreter above).
  if (cpu_runs_loops())
    for (SimdLevel level : loop_levels())
      CHECK(kiln::detail::generate_fused_loop(affine, layout_of(32, short_row, true), level) !=
            nullptr);
}

TEST_CASE("loops of one program share their code, which lives as long as a plan uses it",
          "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  FusedProgram affine =
      program_of(2, 1, {instruction(Prim::mul, 0, 1, 0), instruction(Prim::sigmoid, -1)});
  FusedProgram other =
      program_of(2, 1, {instruction(Prim::mul, 0, 1, 0), instruction(Prim::tanh, -1)});
  const auto layout_of = [](std::int64_t n, bool scalar_second) {
    const ArrayRef x{nullptr, kiln::f32, Shape{n}, Shape{1}};
    const ArrayRef y{nullptr, kiln::f32, Shape{n}, Shape{scalar_second ? 0 : 1}};
    const ArrayRef in[2] = {x, y};
    return kiln::detail::layout_fused(in, x);
  };
  const std::size_t before = kiln::detail::live_fused_loop_codes();
  {
    auto a = kiln::detail::generate_fused_loop(affine, layout_of(100, false), tested_level);
    auto b = kiln::detail::generate_fused_loop(affine, layout_of(12345, false), tested_level);
    REQUIRE((a != nullptr && b != nullptr));
    CHECK(kiln::detail::live_fused_loop_codes() == before + 1);  // shapes do not matter
    auto c = kiln::detail::generate_fused_loop(affine, layout_of(100, true), tested_level);
    auto d = kiln::detail::generate_fused_loop(other, layout_of(100, false), tested_level);
    REQUIRE((c != nullptr && d != nullptr));
    CHECK(kiln::detail::live_fused_loop_codes() == before + 3);  // a register input, a program
    // Shared code gives each loop the same results.
    std::vector<float> x = test_values(100, 5), y = test_values(100, 6), one(100), two(100);
    const void* in[2] = {x.data(), y.data()};
    const FusedLayout la = [&] {
      FusedLayout l = layout_of(100, false);
      l.loop = a;
      return l;
    }();
    kiln::detail::run_fused(affine, la, in, one.data());
    kiln::detail::run_fused(affine, layout_of(100, false), in, two.data());
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
  CHECK(kiln::detail::live_fused_loop_codes() == before);
  // Functions traced again and again (new function objects, the same programs) add no code.
  const kiln::Tensor a = kiln::random::normal({4096}, 0, 1, 1);
  const kiln::Tensor b = kiln::random::normal({4096}, 0, 1, 2);
  std::size_t first = 0;
  for (int round = 0; round < 5; ++round) {
    auto f = kiln::function(
        [](const kiln::Tensor& x, const kiln::Tensor& y) { return kiln::tanh(x * y + x) * 0.5f; });
    f(a, b);
    if (round == 0) first = kiln::detail::live_fused_loop_codes();
    CHECK(kiln::detail::live_fused_loop_codes() == first);
  }
}

TEST_CASE("generated fused loops stream large outputs at every alignment", "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  kiln::detail::set_stream_output_bytes(std::int64_t{1} << 20);
  const float half = 0.5f;
  const FusedProgram chain = chain_program();
  const std::int64_t n = (std::int64_t{1} << 19) + 13;  // 2 MiB out: streamed, two threads
  for (std::size_t offset : {0, 1, 3, 7}) {
    const ArrayRef probe{nullptr, kiln::f32, Shape{n}, Shape{1}};
    const ArrayRef probe_in[1] = {probe};
    REQUIRE(kiln::detail::layout_fused(probe_in, probe).stream_output);
    REQUIRE(loop_matches_interpreter(chain, n, {nullptr, nullptr, nullptr, &half}, offset));
  }
  kiln::detail::set_stream_output_bytes(0);
}

TEST_CASE("fused programs the generator does not cover keep the interpreter", "[fused_loop]") {
  if (!cpu_runs_loops()) return;
  test_at(GENERATE(from_range(loop_levels())));
  // exp is not among the instructions written out.
  FusedProgram exp = program_of(1, 0, {instruction(Prim::exp, 0)});
  std::vector<float> x(64, 1.0f), out(64);
  const ArrayRef in[1] = {{x.data(), kiln::f32, Shape{64}, Shape{1}}};
  const ArrayRef out_ref{out.data(), kiln::f32, Shape{64}, Shape{1}};
  CHECK(kiln::detail::generate_fused_loop(exp, kiln::detail::layout_fused(in, out_ref),
                                          tested_level) == nullptr);
  // A comparison's bool as the output; where with a bool input as its condition.
  std::vector<float> y(64, 2.0f);
  const ArrayRef two_in[2] = {in[0], {y.data(), kiln::f32, Shape{64}, Shape{1}}};
  FusedOp compare = instruction(Prim::less, 0, 1);
  compare.out_dtype = kiln::DType::boolean;
  FusedProgram bool_out = program_of(2, 0, {compare});
  std::vector<std::uint8_t> flags(64);
  const ArrayRef flags_ref{flags.data(), kiln::DType::boolean, Shape{64}, Shape{1}};
  CHECK(kiln::detail::generate_fused_loop(bool_out, kiln::detail::layout_fused(two_in, flags_ref),
                                          tested_level) == nullptr);
  FusedOp where = instruction(Prim::where, 0, 1);
  where.operands[2] = 1;
  FusedProgram bool_in = program_of(2, 0, {where});
  bool_in.ops[0].in_dtype = kiln::f32;
  const ArrayRef where_in[2] = {{flags.data(), kiln::DType::boolean, Shape{64}, Shape{1}},
                                two_in[1]};
  CHECK(kiln::detail::generate_fused_loop(bool_in, kiln::detail::layout_fused(where_in, out_ref),
                                          tested_level) == nullptr);
  // An input read with an inner stride of 2 (every other column of a wider matrix).
  FusedProgram add = program_of(2, 0, {instruction(Prim::add, 0, 1)});
  std::vector<float> wide_matrix(64 * 6000), result(64 * 3000);
  const ArrayRef strided[2] = {{wide_matrix.data(), kiln::f32, Shape{64, 3000}, Shape{6000, 2}},
                               {wide_matrix.data(), kiln::f32, Shape{64, 3000}, Shape{6000, 1}}};
  const ArrayRef result_ref{result.data(), kiln::f32, Shape{64, 3000}, Shape{3000, 1}};
  CHECK(kiln::detail::generate_fused_loop(add, kiln::detail::layout_fused(strided, result_ref),
                                          tested_level) == nullptr);
  // Eight broadcast inputs hold eight registers; eight live slots and tanh's temporaries need
  // more than the other eight ymm registers, and fit in zmm's 32 (where the loop must then
  // give the interpreter's bits).
  std::vector<FusedOp> ops;
  for (std::int16_t s = 0; s < 8; ++s) ops.push_back(instruction(Prim::add, s, s, s));
  ops.push_back(instruction(Prim::tanh, -1, 0, 0));
  for (std::int16_t s = 1; s < 8; ++s) ops.push_back(instruction(Prim::add, -1, -1 - s, 0));
  ops.back().result_slot = 0;
  FusedProgram wide = program_of(8, 8, ops);
  wide.text = "eight broadcast inputs, eight live slots";
  const float one = 1.0f;
  const std::vector<const float*> scalars(8, &one);
  CHECK(loop_matches_interpreter(wide, 100, scalars) == (tested_level == SimdLevel::avx512));
}

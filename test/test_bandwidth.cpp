// The memory-bound paths of issue 18: the streaming copier of every instruction set this CPU
// runs (non-temporal stores on the aligned middle, plain stores on the head and tail), fused
// kernels whose outputs are large enough to be streamed (short blocks, unaligned outputs,
// blocks that cross rows), and the parallel sum, which must give the bits of the serial one.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include <kiln/kiln.hpp>

#include "kernels/fused.hpp"
#include "kernels/kernel.hpp"
#include "simd_test_support.hpp"

namespace {

using kiln::Shape;
using kiln::Tensor;

/// Row-major strides of a contiguous shape.
Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  std::int64_t step = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    step *= shape[d];
  }
  return strides;
}

/// The program in0 * in1 + in0 over f32 (two instructions, one scratch slot).
kiln::detail::FusedProgram multiply_add_program() {
  using kiln::detail::FusedOp;
  using kiln::detail::Prim;
  kiln::detail::FusedProgram program;
  program.num_inputs = 2;
  program.num_slots = 1;
  FusedOp mul;
  mul.prim = Prim::mul;
  mul.operands = {0, 1, 0};
  mul.result_slot = 0;
  FusedOp add;
  add.prim = Prim::add;
  add.operands = {-1, 0, 0};
  program.ops = {mul, add};
  program.text = "in0 * in1 + in0";
  kiln::detail::resolve_fused_program(program);
  return program;
}

}  // namespace

TEST_CASE("streaming copies are exact at every alignment and length", "[simd]") {
  // Heads of 0 to 63 bytes before the first 64-byte line, lengths around every vector width
  // and the 4-vector unrolled body, and guard bytes on both sides that must stay untouched.
  const std::int64_t lengths[] = {0,   1,   3,   15,  16,  17,  31,  32,  33,   63,   64,       65,
                                  127, 128, 129, 255, 256, 257, 511, 512, 1000, 4096, 4096 + 77};
  std::vector<std::uint8_t> src(4096 + 256), dst(4096 + 512), expected(dst.size());
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 3);
  for (const kiln::detail::ElementwiseRowTable* table : kiln::test::row_tables_of_this_cpu()) {
    REQUIRE(table->stream_copy != nullptr);
    for (std::int64_t length : lengths)
      for (std::size_t head = 0; head < 64; ++head)
        for (std::size_t src_offset : {0, 1, 5}) {
          // dst's 64-byte line starts at its first multiple of 64.
          const auto base = reinterpret_cast<std::uintptr_t>(dst.data());
          const std::size_t line = (64 - base % 64) % 64 + 64;
          std::memset(dst.data(), 0xA5, dst.size());
          expected.assign(dst.begin(), dst.end());
          std::memcpy(expected.data() + line + head, src.data() + src_offset,
                      static_cast<std::size_t>(length));
          table->stream_copy(dst.data() + line + head, src.data() + src_offset, length);
          INFO(table->isa_name << " length " << length << " head " << head << " src offset "
                               << src_offset);
          REQUIRE(dst == expected);
        }
  }
}

TEST_CASE("fused kernels stream large outputs exactly: unaligned, short and crossing rows",
          "[elementwise]") {
  const kiln::detail::FusedProgram program = multiply_add_program();
  // 2M + 77 floats (8 MiB and up are streamed): a tail shorter than a block and a vector.
  const std::int64_t n = (std::int64_t{2} << 20) + 77;
  std::vector<float> a(static_cast<std::size_t>(n) + 16), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.25f - 100.0f;
    b[i] = static_cast<float>(i % 77) * 0.5f + 0.125f;
  }
  // The output at every float offset of a 64-byte line (and the inputs shifted with it).
  for (std::size_t offset : {0, 1, 3, 7, 15}) {
    CAPTURE(offset);
    std::vector<float> out(static_cast<std::size_t>(n) + 32, -1.0f);
    const auto base = reinterpret_cast<std::uintptr_t>(out.data());
    const std::size_t aligned = ((64 - base % 64) % 64) / sizeof(float);
    float* dst = out.data() + aligned + offset;
    const Shape shape{n};
    const kiln::detail::ArrayRef in[2] = {
        {a.data() + offset, kiln::f32, shape, Shape{1}},
        {b.data() + offset, kiln::f32, shape, Shape{1}},
    };
    const kiln::detail::ArrayRef result{dst, kiln::f32, shape, Shape{1}};
    REQUIRE(kiln::detail::layout_fused(in, result).stream_output);
    kiln::detail::run_fused(program, in, result);
    bool ok = true;
    for (std::int64_t i = 0; i < n; ++i) {
      const float x = a[static_cast<std::size_t>(i) + offset];
      const float y = b[static_cast<std::size_t>(i) + offset];
      const float product = x * y;  // two roundings, as the two instructions
      ok = ok && dst[i] == product + x;
    }
    CHECK(ok);
    CHECK(dst[-1] == -1.0f);
    CHECK(dst[n] == -1.0f);
  }
  // Rows of 1,100 (blocks cross rows) with a row broadcast down the matrix (a gathered input),
  // and a column broadcast: 2,000 x 1,100 floats, 8.8 MB.
  const Shape shape{2000, 1100};
  std::vector<float> row(1100), column(2000), out(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(i) * 0.5f - 3.0f;
  for (std::size_t i = 0; i < column.size(); ++i) column[i] = static_cast<float>(i % 13) - 6.0f;
  const kiln::detail::ArrayRef in[2] = {
      {row.data(), kiln::f32, shape, Shape{0, 1}},
      {column.data(), kiln::f32, shape, Shape{1, 0}},
  };
  const kiln::detail::ArrayRef result{out.data(), kiln::f32, shape, contiguous_strides(shape)};
  const kiln::detail::FusedLayout layout = kiln::detail::layout_fused(in, result);
  REQUIRE(layout.stream_output);
  CHECK(layout.mode == kiln::detail::FusedLayout::Mode::blocks);
  kiln::detail::run_fused(program, in, result);
  bool ok = true;
  for (std::size_t r = 0; r < 2000; ++r)
    for (std::size_t c = 0; c < 1100; ++c) {
      const float product = row[c] * column[r];
      ok = ok && out[r * 1100 + c] == product + row[c];
    }
  CHECK(ok);
}

TEST_CASE("a large traced chain gives the bits of its eager ops", "[elementwise]") {
  // Workload 2 at 8 MiB + a tail: streamed output, blocks of the streaming length.
  const std::int64_t n = (std::int64_t{2} << 20) + 1001;
  const Tensor a = kiln::linspace(-3.0, 3.0, n, kiln::f32);
  const Tensor b = kiln::linspace(0.5, 1.5, n, kiln::f32);
  const Tensor c = kiln::linspace(-1.0, 1.0, n, kiln::f32);
  auto chain = kiln::function([](const Tensor& x, const Tensor& y, const Tensor& z) {
    return kiln::tanh(x * y + z) * 0.5;
  });
  CHECK(chain(a, b, c).to_vector<float>() == (kiln::tanh(a * b + c) * 0.5).to_vector<float>());
}

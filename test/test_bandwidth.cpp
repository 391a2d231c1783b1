// The memory-bound paths of issue 18: the streaming copier of every instruction set this CPU
// runs (non-temporal stores on the aligned middle, plain stores on the head and tail), fused
// kernels whose outputs are large enough to be streamed (short blocks, unaligned outputs,
// blocks that cross rows), and the parallel sums, which must give the bits of the serial ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include <kiln/kiln.hpp>

#include "kernels/fused.hpp"
#include "kernels/kernel.hpp"
#include "kernels/streaming.hpp"
#include "simd_test_support.hpp"

namespace {

using kiln::Shape;
using kiln::Tensor;
using kiln::test::StreamAbove8MiB;  // so the streaming paths run on test-sized data

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
  const StreamAbove8MiB streamed;
  const kiln::detail::FusedProgram program = multiply_add_program();
  // 2M + 77 floats (more than 8 MiB are streamed here): a tail shorter than a block and a vector.
  const std::int64_t n = (std::int64_t{2} << 20) + 77;
  std::vector<float> a(static_cast<std::size_t>(n) + 16), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.25f - 100.0f;
    b[i] = static_cast<float>(i % 77) * 0.5f + 0.125f;
  }
  // The output at every float offset of a 64-byte line (and the inputs shifted with it).
  for (std::size_t offset : {0, 1, 3, 7, 15}) {
    CAPTURE(offset);
    // Guard floats on both sides: 16 before the first 64-byte line the output may start on.
    std::vector<float> out(static_cast<std::size_t>(n) + 48, -1.0f);
    float* start = out.data() + 16;
    const auto base = reinterpret_cast<std::uintptr_t>(start);
    const std::size_t aligned = ((64 - base % 64) % 64) / sizeof(float);
    float* dst = start + aligned + offset;
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
  CHECK(layout.short_blocks);
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
  // Workload 2 at 8 MiB + a tail, in short blocks, with plain and with non-temporal stores.
  const std::int64_t n = (std::int64_t{2} << 20) + 1001;
  const Tensor a = kiln::linspace(-3.0, 3.0, n, kiln::f32);
  const Tensor b = kiln::linspace(0.5, 1.5, n, kiln::f32);
  const Tensor c = kiln::linspace(-1.0, 1.0, n, kiln::f32);
  const std::vector<float> eager = (kiln::tanh(a * b + c) * 0.5).to_vector<float>();
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    std::optional<StreamAbove8MiB> streamed;
    if (stream) streamed.emplace();
    auto chain = kiln::function([](const Tensor& x, const Tensor& y, const Tensor& z) {
      return kiln::tanh(x * y + z) * 0.5;
    });
    CHECK(chain(a, b, c).to_vector<float>() == eager);
  }
}

namespace {

/// kiln's pairwise float sum (lib/kernels/reduce.cpp) written out serially: `cols` lanes
/// accumulated over rows, blocks of more than 32 rows split in halves (left n / 2).
void pairwise_rows(const float* x, std::int64_t rows, std::int64_t cols, float* acc) {
  if (rows > 32) {
    const std::int64_t half = rows / 2;
    std::vector<float> right(static_cast<std::size_t>(cols));
    pairwise_rows(x, half, cols, acc);
    pairwise_rows(x + half * cols, rows - half, cols, right.data());
    for (std::int64_t k = 0; k < cols; ++k) acc[k] = acc[k] + right[static_cast<std::size_t>(k)];
    return;
  }
  for (std::int64_t k = 0; k < cols; ++k) acc[k] = x[k];
  for (std::int64_t r = 1; r < rows; ++r)
    for (std::int64_t k = 0; k < cols; ++k) acc[k] = acc[k] + x[r * cols + k];
}

/// A contiguous sum: 64 lanes, folded in halves, then the tail.
float pairwise_sum(const float* x, std::int64_t n) {
  float lanes[64];
  float total = 0;
  if (n / 64 > 0) {
    pairwise_rows(x, n / 64, 64, lanes);
    for (std::int64_t width = 32; width > 0; width /= 2)
      for (std::int64_t j = 0; j < width; ++j) lanes[j] = lanes[j] + lanes[j + width];
    total = lanes[0];
  }
  for (std::int64_t i = n / 64 * 64; i < n; ++i) total = total + x[i];
  return total;
}

}  // namespace

TEST_CASE("large sums split over threads give the bits of the serial pairwise sum", "[reduce]") {
  // Sizes whose pairwise splits are uneven at every level, with a tail of lanes; and one thread's
  // sums of 129-131 and 257 rows of lanes, whose quarters, read together, are leaves and splits
  // side by side (32 and 33 rows) or all splits.
  for (std::int64_t n :
       {std::int64_t{1} << 18, (std::int64_t{3} << 20) + 13, std::int64_t{5000001},
        std::int64_t{129 * 64}, std::int64_t{131 * 64 + 5}, std::int64_t{257 * 64 + 1}}) {
    CAPTURE(n);
    const Tensor x = kiln::random::normal({n}, 0, 1, static_cast<std::uint64_t>(n));
    const std::vector<float> v = x.to_vector<float>();
    const float expected = pairwise_sum(v.data(), n);
    CHECK(kiln::sum(x).item<float>() == expected);
  }
  // Column sums of a tall matrix (the middle axis with inner > 1) and row sums of many rows.
  const std::int64_t rows = 40001, cols = 33;
  const Tensor m = kiln::random::normal({rows, cols}, 0, 1, 9);
  const std::vector<float> v = m.to_vector<float>();
  std::vector<float> expected(static_cast<std::size_t>(cols));
  pairwise_rows(v.data(), rows, cols, expected.data());
  CHECK(kiln::sum(m, {0}).to_vector<float>() == expected);
  for (const std::int64_t short_rows : {130, 300}) {
    CAPTURE(short_rows);
    const Tensor few = kiln::slice(m, 0, 0, short_rows).contiguous();
    std::vector<float> want(static_cast<std::size_t>(cols));
    pairwise_rows(v.data(), short_rows, cols, want.data());
    CHECK(kiln::sum(few, {0}).to_vector<float>() == want);
  }
  const Tensor wide = kiln::reshape(m, {cols, rows});
  std::vector<float> row_sums;
  for (std::int64_t r = 0; r < cols; ++r)
    row_sums.push_back(pairwise_sum(v.data() + r * rows, rows));
  CHECK(kiln::sum(wide, {1}).to_vector<float>() == row_sums);
  const Tensor many = kiln::random::normal({500, 3003}, 0, 1, 11);
  const std::vector<float> many_values = many.to_vector<float>();
  const std::vector<float> many_sums = kiln::sum(many, {1}).to_vector<float>();
  bool ok = true;
  for (std::size_t r = 0; r < many_sums.size(); ++r)
    ok = ok && many_sums[r] == pairwise_sum(many_values.data() + r * 3003, 3003);
  CHECK(ok);
}

namespace {

/// The columns of x [rows, ld] summed in row order, one element at a time.
template <class T>
std::vector<T> column_sums_in_order(const std::vector<T>& x, std::int64_t rows, std::int64_t cols,
                                    std::int64_t ld) {
  std::vector<T> acc(static_cast<std::size_t>(cols));
  for (std::int64_t k = 0; k < cols; ++k) {
    T s = x[static_cast<std::size_t>(k)];
    for (std::int64_t r = 1; r < rows; ++r) s = s + x[static_cast<std::size_t>(r * ld + k)];
    acc[static_cast<std::size_t>(k)] = s;
  }
  return acc;
}

}  // namespace

TEST_CASE("every instruction set's sum rows add each column in row order", "[reduce][simd]") {
  // The leaves of the pairwise float sums: each table's sum_rows against the scalar loop, bit
  // for bit, on widths that use its blocks of vectors (one or several, rows asked for whole or
  // block by block), single vectors and scalar columns, with rows apart by more than a row (a
  // column reduction's rows), up to a leaf's 32 rows; one stream at a time and up to four read
  // together, whose row counts differ (rows, rows + 1, rows - 1 where that is one or more, ...).
  // Values spread over many magnitudes, so that any change of the order of the additions shows.
  const auto tables = kiln::test::row_tables_of_this_cpu();
  const auto f32 = kiln::detail::dtype_index(kiln::f32), f64 = kiln::detail::dtype_index(kiln::f64);
  constexpr std::int64_t most = kiln::detail::max_sum_streams;
  for (const std::int64_t cols : {1, 7, 16, 33, 64, 100, 130, 200}) {
    for (const std::int64_t rows : {1, 2, 5, 31, 32}) {
      for (std::int64_t count = 1; count <= most; ++count) {
        CAPTURE(cols, rows, count);
        const std::int64_t ld = cols + 3;
        const std::int64_t tail[4] = {0, 1, rows > 1 ? -1 : 2, 0};
        std::vector<std::vector<float>> x32(most), want32(most);
        std::vector<std::vector<double>> x64(most), want64(most);
        std::int64_t stream_rows[4] = {};
        for (std::int64_t s = 0; s < count; ++s) {
          const std::int64_t r = stream_rows[s] = std::min<std::int64_t>(rows + tail[s], 32);
          const auto seed = static_cast<std::uint64_t>(cols * 1000 + rows * 10 + s);
          x32[s] = (kiln::random::normal({r * ld}, 0, 1, seed) *
                    kiln::exp(kiln::random::normal({r * ld}, 0, 4, seed + 7)))
                       .to_vector<float>();
          x64[s].assign(x32[s].begin(), x32[s].end());
          want32[s] = column_sums_in_order(x32[s], r, cols, ld);
          want64[s] = column_sums_in_order(x64[s], r, cols, ld);
        }
        for (const auto* table : tables) {
          CAPTURE(table->isa_name);
          std::vector<std::vector<float>> got32(most, std::vector<float>(cols));
          std::vector<std::vector<double>> got64(most, std::vector<double>(cols));
          const void* in32[4] = {};
          const void* in64[4] = {};
          void* out32[4] = {};
          void* out64[4] = {};
          for (std::int64_t s = 0; s < count; ++s) {
            in32[s] = x32[s].data();
            in64[s] = x64[s].data();
            out32[s] = got32[s].data();
            out64[s] = got64[s].data();
          }
          table->sum_rows[f32](in32, stream_rows, count, cols, ld, out32);
          table->sum_rows[f64](in64, stream_rows, count, cols, ld, out64);
          for (std::int64_t s = 0; s < count; ++s) {
            CHECK(got32[s] == want32[s]);
            CHECK(got64[s] == want64[s]);
          }
        }
      }
    }
  }
}

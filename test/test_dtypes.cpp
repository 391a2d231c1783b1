// The dtypes beyond f32, f64, i32, i64 and bool (kiln/dtype.hpp): i8, u8, i16, u16, u32, u64,
// f16 and bf16. Casts to and from every dtype (the cast row kernels of the instruction set
// KILN_SIMD selects; scripts/test.sh runs this once per set), eager and traced, checked
// against NumPy's conversions where the test environment has it; the ops that move elements;
// computing in the compute dtype with the exact narrow result; u64's own kernels; gradients
// through f16; creation, element access and printing; variables and checkpoints; files.
// (The elementwise op table runs every op on every dtype: test_elementwise.cpp.)
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include <kiln/kiln.hpp>

#include "dtype_test_support.hpp"
#include "io_test_support.hpp"

using dtype_test::inf_value;
using dtype_test::nan_value;
using dtype_test::vec;
using kiln::Shape;
using kiln::Tensor;

namespace {

/// cast(x, to) eagerly, inside a kiln::function, and from a broadcast (stride-0) view of x's
/// first element: all three must agree with `want`.
template <class T>
void check_cast(const Tensor& x, kiln::DType to, const std::vector<T>& want) {
  INFO("cast " << kiln::dtype_name(x.dtype()) << " -> " << kiln::dtype_name(to));
  const Tensor eager = kiln::cast(x, to);
  REQUIRE(eager.dtype() == to);
  CHECK(eager.to_vector<T>() == want);
  auto traced = kiln::function([to](const Tensor& t) { return kiln::cast(t, to); });
  const Tensor traced_out = traced(x);
  CHECK(traced_out.to_vector<T>() == want);
  // In a fused chain: the cast reads the output of another op.
  auto fused = kiln::function(
      [to](const Tensor& t) { return kiln::cast(kiln::reshape(t, {t.size()}), to); });
  const Tensor fused_out = fused(x);
  CHECK(fused_out.to_vector<T>() == want);
  const Tensor first = kiln::broadcast_to(kiln::slice(x, 0, 0, 1), {5});
  CHECK(kiln::cast(first, to).to_vector<T>() == std::vector<T>(5, want[0]));
}

}  // namespace

TEST_CASE("casts to i8 and u8 saturate floats and wrap integers", "[dtypes]") {
  // Floats truncate toward zero, NaN gives 0, and values beyond the range saturate.
  const std::vector<double> floats = {2.7,        -2.7,  127.9, 128.0,     -128.9,
                                      -129.0,     255.5, 300.0, nan_value, inf_value,
                                      -inf_value, -0.0,  1e30,  -1e30};
  const std::vector<std::int8_t> want_i8 = {2,   -2, 127, 127,  -128, -128, 127,
                                            127, 0,  127, -128, 0,    127,  -128};
  const std::vector<std::uint8_t> want_u8 = {2, 0, 127, 128, 0, 0, 255, 255, 0, 255, 0, 0, 255, 0};
  for (kiln::DType from : {kiln::f32, kiln::f64}) {
    const Tensor x = kiln::cast(vec(floats), from);
    check_cast(x, kiln::i8, want_i8);
    check_cast(x, kiln::u8, want_u8);
  }
  // Integers keep their low 8 bits (two's complement), as the other integer narrowings do.
  const std::vector<std::int64_t> ints = {0, 1, -1, 127, 128, 255, 256, -128, -129, 300, -300};
  const std::vector<std::int8_t> wrap_i8 = {0, 1, -1, 127, -128, -1, 0, -128, 127, 44, -44};
  const std::vector<std::uint8_t> wrap_u8 = {0, 1, 255, 127, 128, 255, 0, 128, 127, 44, 212};
  for (kiln::DType from : {kiln::i32, kiln::i64}) {
    const Tensor x = kiln::cast(vec(ints), from);
    check_cast(x, kiln::i8, wrap_i8);
    check_cast(x, kiln::u8, wrap_u8);
  }
  // Between the two 8-bit dtypes the bits are kept.
  check_cast(vec<std::int8_t>({-1, -128, 5, 127}), kiln::u8,
             std::vector<std::uint8_t>{255, 128, 5, 127});
  check_cast(vec<std::uint8_t>({255, 128, 5, 127}), kiln::i8,
             std::vector<std::int8_t>{-1, -128, 5, 127});
  // To bool: x != 0 (a u8 of 2 is true, not 2); from bool: 0 or 1.
  check_cast(vec<std::uint8_t>({0, 1, 2, 255}), kiln::boolean,
             std::vector<bool>{false, true, true, true});
  check_cast(vec<std::int8_t>({0, -1, 2, -128}), kiln::boolean,
             std::vector<bool>{false, true, true, true});
  check_cast(vec(std::vector<bool>{true, false, true}), kiln::u8,
             std::vector<std::uint8_t>{1, 0, 1});
  check_cast(vec(std::vector<bool>{true, false, true}), kiln::i8,
             std::vector<std::int8_t>{1, 0, 1});
}

TEST_CASE("casts from i8 and u8 are exact", "[dtypes]") {
  std::vector<std::int8_t> all_i8;
  std::vector<std::uint8_t> all_u8;
  for (int v = -128; v < 128; ++v) all_i8.push_back(static_cast<std::int8_t>(v));
  for (int v = 0; v < 256; ++v) all_u8.push_back(static_cast<std::uint8_t>(v));
  const auto widened = [](const auto& values, auto tag) {
    std::vector<decltype(tag)> out;
    for (auto v : values) out.push_back(static_cast<decltype(tag)>(v));
    return out;
  };
  check_cast(vec(all_i8), kiln::f32, widened(all_i8, float{}));
  check_cast(vec(all_i8), kiln::f64, widened(all_i8, double{}));
  check_cast(vec(all_i8), kiln::i32, widened(all_i8, std::int32_t{}));
  check_cast(vec(all_i8), kiln::i64, widened(all_i8, std::int64_t{}));
  check_cast(vec(all_u8), kiln::f32, widened(all_u8, float{}));
  check_cast(vec(all_u8), kiln::f64, widened(all_u8, double{}));
  check_cast(vec(all_u8), kiln::i32, widened(all_u8, std::int32_t{}));
  check_cast(vec(all_u8), kiln::i64, widened(all_u8, std::int64_t{}));
}

TEST_CASE(
    "i8 and u8 move through reshape, transpose, slice, concat, pad, gather, where and "
    "broadcast",
    "[dtypes]") {
  std::vector<std::int8_t> values;
  for (int v = 0; v < 24; ++v) values.push_back(static_cast<std::int8_t>(v * 11 - 128));
  const Tensor x = kiln::tensor(values, {2, 3, 4});
  // Each op on the i8 tensor must equal the op on its i32 copy, cast back; eager and traced.
  const auto check = [&](const char* name, auto&& op) {
    INFO(name);
    const Tensor want = kiln::cast(op(kiln::cast(x, kiln::i32)), kiln::i8);
    const Tensor eager = op(x);
    REQUIRE(eager.dtype() == kiln::i8);
    CHECK(eager.shape() == want.shape());
    CHECK(eager.contiguous().to_vector<std::int8_t>() == want.to_vector<std::int8_t>());
    auto traced = kiln::function([&](const Tensor& t) { return op(t); });
    const Tensor traced_out = traced(x);
    CHECK(traced_out.to_vector<std::int8_t>() == want.to_vector<std::int8_t>());
  };
  check("reshape", [](const Tensor& t) { return kiln::reshape(t, {4, 6}); });
  check("transpose", [](const Tensor& t) { return kiln::transpose(t, {2, 0, 1}); });
  check("slice", [](const Tensor& t) { return kiln::slice(t, 2, 1, 4); });
  check("concat", [](const Tensor& t) { return kiln::concat({t, kiln::slice(t, 0, 1, 2)}, 0); });
  check("pad", [](const Tensor& t) { return kiln::pad(t, {{0, 1}, {1, 0}, {0, 0}}, 7.0); });
  check("gather", [](const Tensor& t) {
    return kiln::gather(t, kiln::tensor<std::int32_t>({2, 0, 2}, {3}), 1);
  });
  check("where", [](const Tensor& t) {
    const Tensor pick = kiln::tensor<bool>({true, false, false, true}, {4});
    return kiln::where(pick, t, kiln::slice(t, 1, 0, 1));
  });
  check("broadcast_to", [](const Tensor& t) {
    return kiln::broadcast_to(kiln::slice(t, 0, 0, 1), {3, 3, 4});
  });
  // u8 values above 127 survive a transpose and a concat.
  const Tensor u = kiln::tensor<std::uint8_t>({200, 255, 0, 128, 1, 254}, {2, 3});
  CHECK(kiln::transpose(u).contiguous().to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{200, 128, 255, 1, 0, 254});
  CHECK(kiln::concat({u, u}, 1).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{200, 255, 0, 200, 255, 0, 128, 1, 254, 128, 1, 254});
}

TEST_CASE("i8 and u8 tensors are made, read and printed", "[dtypes]") {
  CHECK(kiln::dtype_of<std::int8_t>() == kiln::i8);
  CHECK(kiln::dtype_of<std::uint8_t>() == kiln::u8);
  CHECK(kiln::dtype_size(kiln::i8) == 1);
  CHECK(kiln::dtype_name(kiln::u8) == "u8");
  CHECK(kiln::is_integer(kiln::i8));
  CHECK(kiln::compute_dtype(kiln::u8) == kiln::i32);
  CHECK(kiln::compute_dtype(kiln::i32) == kiln::i32);
  // Creation converts by the cast rules: saturating from the double value.
  CHECK(kiln::full({3}, 300.0, kiln::u8).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>(3, 255));
  CHECK(kiln::full({2}, -3.9, kiln::i8).to_vector<std::int8_t>() ==
        std::vector<std::int8_t>(2, -3));
  CHECK(kiln::zeros({2}, kiln::i8).to_vector<std::int8_t>() == std::vector<std::int8_t>{0, 0});
  CHECK(kiln::scalar(-200.0, kiln::i8).item<std::int8_t>() == -128);
  CHECK(kiln::arange(0.0, 4.0, 1.0, kiln::u8).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{0, 1, 2, 3});
  const Tensor q = kiln::tensor<std::int8_t>({-128, 0, 127, 5}, {2, 2});
  CHECK(q.at<std::int8_t>({1, 0}) == 127);
  CHECK(fmt::format("{}", q) ==
        "tensor([[-128,    0],\n        [ 127,    5]], dtype=i8, shape=[2,2])");
  CHECK(fmt::format("{}", kiln::tensor<std::uint8_t>({255, 7}, {2})) ==
        "tensor([255,   7], dtype=u8, shape=[2])");
  CHECK_KILN_ERROR(q.to_vector<std::uint8_t>(), "u8");
}

TEST_CASE("i8 and u8 compute in i32 and keep their dtype, eagerly and traced", "[dtypes]") {
  const Tensor q = kiln::tensor<std::int8_t>({1, 2, 3, 100}, {2, 2});
  const Tensor u = kiln::cast(q, kiln::u8);
  // Results wrap as they would computed in 8 bits: 100 + 100 = -56 in i8, 200 in u8.
  CHECK((q + q).to_vector<std::int8_t>() == std::vector<std::int8_t>{2, 4, 6, -56});
  CHECK((u + u).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{2, 4, 6, 200});
  CHECK((u - kiln::scalar(std::uint8_t{3})).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{254, 255, 0, 97});
  CHECK(kiln::sum(u).item<std::uint8_t>() == 106);
  CHECK(kiln::sum(q * q).item<std::int8_t>() == static_cast<std::int8_t>(1 + 4 + 9 + 10000));
  CHECK(kiln::argmax(q, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1});
  CHECK((q == q).dtype() == kiln::boolean);
  const Tensor product = kiln::matmul(q, q);
  CHECK(product.dtype() == kiln::i8);
  CHECK(product.to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{7, static_cast<std::int8_t>(202), static_cast<std::int8_t>(303),
                                 static_cast<std::int8_t>(10006)});
  CHECK_KILN_ERROR(kiln::exp(u), "[exp] needs a floating-point dtype");
  CHECK_KILN_ERROR(kiln::gather(kiln::zeros({4}), kiln::tensor<std::int8_t>({1}, {1}), 0),
                   "[gather] indices must be i32 or i64, got i8");
  auto f = kiln::function([](const Tensor& t) { return kiln::sum(t * t); });
  CHECK(f(u).dtype() == kiln::u8);
  CHECK(f(u).item<std::uint8_t>() == static_cast<std::uint8_t>(1 + 4 + 9 + 10000));
  // The trace computes in i32 between casts.
  const std::string graph = f.get_concrete_function(u).graph().to_string();
  CHECK(graph.find("i32") != std::string::npos);
}

TEST_CASE("i8 variables hold quantized weights through a checkpoint", "[dtypes]") {
  io_test::TempDir dir;
  const std::vector<std::int8_t> stored = {-128, -7, 0, 99, 127, 1};
  {
    kiln::Module m("m");
    kiln::Variable w = m.add_variable("w_q", {2, 3}, kiln::init::zeros(), false, kiln::i8);
    CHECK(w.value().to_vector<std::int8_t>() == std::vector<std::int8_t>(6, 0));
    w.assign(kiln::tensor(stored, {2, 3}));
    kiln::Checkpoint(m).save((dir / "ckpt").string());
  }
  kiln::Module restored("m");
  kiln::Variable w = restored.add_variable("w_q", {2, 3}, kiln::init::zeros(), false, kiln::i8);
  kiln::Checkpoint(restored).restore((dir / "ckpt").string());
  CHECK(w.value().dtype() == kiln::i8);
  CHECK(w.value().to_vector<std::int8_t>() == stored);
  // Rows are stored as they are, eagerly and traced; adding rows computes, so it is refused.
  const Tensor row = kiln::tensor<std::int8_t>({5, 6, 7}, {1, 3});
  const Tensor at = kiln::tensor<std::int32_t>({1}, {1});
  w.scatter_update(at, row);
  CHECK(w.value().to_vector<std::int8_t>() == std::vector<std::int8_t>{-128, -7, 0, 5, 6, 7});
  auto store_first = kiln::function([&](const Tensor& r) {
    w.scatter_update(kiln::tensor<std::int32_t>({0}, {1}), r);
    return w.value();
  });
  CHECK(store_first(row).to_vector<std::int8_t>() == std::vector<std::int8_t>{5, 6, 7, 5, 6, 7});
  CHECK_KILN_ERROR(w.scatter_add(at, row),
                   "[Variable.scatter_add] variable 'm/w_q' is i8, which ops compute in i32");
}

namespace {

std::vector<std::uint16_t> bits_of(const Tensor& t) {
  std::vector<std::uint16_t> out;
  if (t.dtype() == kiln::f16)
    for (kiln::float16 h : t.to_vector<kiln::float16>()) out.push_back(h.bits);
  else
    for (kiln::bfloat16 h : t.to_vector<kiln::bfloat16>()) out.push_back(h.bits);
  return out;
}

}  // namespace

TEST_CASE("f16 and bf16 round to nearest even, once, from every dtype", "[dtypes]") {
  const double unit = std::ldexp(1.0, -24);  // f16's smallest subnormal
  // f32 -> f16: the largest finite value, the overflow threshold, subnormals and ties to even.
  const std::vector<float> from_f32 = {65504.f,
                                       65519.f,
                                       65520.f,
                                       static_cast<float>(unit),
                                       static_cast<float>(unit / 2),
                                       static_cast<float>(unit * 1.5),
                                       static_cast<float>(unit * 2.5),
                                       1.f + std::ldexp(1.f, -11),
                                       1.f + 3 * std::ldexp(1.f, -11),
                                       -0.f,
                                       static_cast<float>(inf_value),
                                       1e-10f};
  CHECK(bits_of(kiln::cast(vec(from_f32), kiln::f16)) ==
        std::vector<std::uint16_t>{0x7bff, 0x7bff, 0x7c00, 0x0001, 0x0000, 0x0002, 0x0002, 0x3c00,
                                   0x3c02, 0x8000, 0x7c00, 0x0000});
  // f64 -> f16 rounds the double itself: 1 + 2^-11 + 2^-40 is just above a tie, so it rounds
  // up (through f32 it would become the tie and round to even, down).
  const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(bits_of(kiln::cast(vec(std::vector<double>{above_tie, -above_tie}), kiln::f16)) ==
        std::vector<std::uint16_t>{0x3c01, 0xbc01});
  const double bf_above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(bits_of(kiln::cast(vec(std::vector<double>{bf_above_tie, 1.0 + std::ldexp(1.0, -8)}),
                           kiln::bf16)) == std::vector<std::uint16_t>{0x3f81, 0x3f80});
  // Integers: 65519 rounds to 65504, 70000 overflows; for bf16, 2^60 + 2^52 + 1 lies just
  // above a tie that a double (53 bits) would make exact.
  CHECK(bits_of(kiln::cast(vec(std::vector<std::int32_t>{65519, 70000, -3}), kiln::f16)) ==
        std::vector<std::uint16_t>{0x7bff, 0x7c00, 0xc200});
  const std::int64_t big = (std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1;
  CHECK(bits_of(kiln::cast(vec(std::vector<std::int64_t>{big}), kiln::bf16)) ==
        std::vector<std::uint16_t>{0x5d81});
  CHECK(bits_of(kiln::cast(vec(std::vector<std::uint64_t>{~std::uint64_t{0}}), kiln::bf16)) ==
        std::vector<std::uint16_t>{0x5f80});  // 2^64 - 1 rounds to 2^64
  // NaN stays NaN; bf16 keeps f32's range.
  const Tensor special = kiln::cast(vec(std::vector<float>{std::nanf(""), 1e38f}), kiln::bf16);
  const auto back = kiln::cast(special, kiln::f32).to_vector<float>();
  CHECK(std::isnan(back[0]));
  CHECK(std::abs(back[1] - 1e38f) < 1e36f);
}

TEST_CASE("every f16 value survives f16 -> f32 -> f16 and f16 -> f64 -> f16", "[dtypes]") {
  std::vector<kiln::float16> all;
  for (std::uint32_t b = 0; b < 65536; ++b)
    all.push_back(kiln::float16::from_bits(static_cast<std::uint16_t>(b)));
  const Tensor x = vec(all);
  for (kiln::DType wide : {kiln::f32, kiln::f64}) {
    const auto round_trip = bits_of(kiln::cast(kiln::cast(x, wide), kiln::f16));
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const bool nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0;
      if (nan)
        CHECK((round_trip[b] & 0x7e00) == 0x7e00);  // a quiet NaN
      else if (round_trip[b] != b)
        FAIL("f16 bits " << b << " came back as " << round_trip[b]);
    }
  }
  // And the public conversions agree with the cast kernels.
  CHECK(static_cast<float>(kiln::float16(0.1f)) ==
        kiln::cast(kiln::scalar(0.1f), kiln::f16).item<kiln::float16>());
  CHECK(kiln::bfloat16(3.0f).bits == 0x4040);
}

TEST_CASE("f16 and bf16 compute in f32: values, traced, gradients, printing", "[dtypes]") {
  for (kiln::DType half : {kiln::f16, kiln::bf16}) {
    INFO(kiln::dtype_name(half));
    const Tensor x = kiln::cast(vec(std::vector<float>{0.5f, -1.25f, 3.f, 10.f}), half);
    // Each result is the f32 result rounded once.
    const auto f = [](const Tensor& t) { return kiln::tanh(t) * t + kiln::exp(t / 4.0); };
    const Tensor want = kiln::cast(f(kiln::cast(x, kiln::f32)), half);
    const Tensor eager = f(x);
    CHECK(eager.dtype() == half);
    CHECK(bits_of(eager) != std::vector<std::uint16_t>{});
    const auto traced = kiln::function(f);
    CHECK(bits_of(traced(x)) == bits_of(eager));
    // Reductions, matmul and softmax keep the dtype too.
    CHECK(kiln::sum(x).dtype() == half);
    CHECK(kiln::matmul(kiln::reshape(x, {2, 2}), kiln::reshape(x, {2, 2})).dtype() == half);
    CHECK(kiln::softmax(x, 0).dtype() == half);
    // The gradient of an f16 variable is f16: d/dx sum(x * x) = 2x, exact here.
    kiln::Variable v(x, "v");
    kiln::GradientTape tape;
    const Tensor grad = tape.gradient(kiln::sum(v.value() * v.value()), {v})[0];
    CHECK(grad.dtype() == half);
    CHECK(kiln::cast(grad, kiln::f32).to_vector<float>() ==
          std::vector<float>{1.f, -2.5f, 6.f, 20.f});
  }
  // Each element printed as NumPy prints an f16: the shortest text that reads back as the same
  // value (0.1, not 0.099975586; -65500, not -65504).
  CHECK(fmt::format("{}", kiln::cast(vec(std::vector<float>{0.1f, 1.5f, -65504.f}), kiln::f16)) ==
        "tensor([    0.1,     1.5, -65500.], dtype=f16, shape=[3])");
}

TEST_CASE("i16, u16 and u32 compute in a wider dtype and wrap as their own", "[dtypes]") {
  CHECK((vec(std::vector<std::uint16_t>{65535, 7}) + vec(std::vector<std::uint16_t>{1, 1}))
            .to_vector<std::uint16_t>() == std::vector<std::uint16_t>{0, 8});
  CHECK((vec(std::vector<std::int16_t>{32767, -32768}) + vec(std::vector<std::int16_t>{1, -1}))
            .to_vector<std::int16_t>() == std::vector<std::int16_t>{-32768, 32767});
  const Tensor a = vec(std::vector<std::uint32_t>{4000000000u, 65536u, 7u});
  const Tensor b = vec(std::vector<std::uint32_t>{3u, 65536u, 4000000000u});
  // Division of values above 2^31 is exact (computed in i64), products wrap at 2^32.
  CHECK((a / b).to_vector<std::uint32_t>() == std::vector<std::uint32_t>{1333333333u, 1u, 0u});
  CHECK((a * b).to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{3u * 4000000000u, 0u, 7u * 4000000000u});
  CHECK((a > b).to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK(kiln::sum(a).item<std::uint32_t>() == 4000000000u + 65536u + 7u);
  CHECK(kiln::argmax(a, 0).item<std::int64_t>() == 0);
  CHECK(kiln::sort(a, 0).to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{7u, 65536u, 4000000000u});
}

TEST_CASE("u64 computes in its own kernels, above 2^63 too", "[dtypes]") {
  constexpr std::uint64_t top = ~std::uint64_t{0};  // 2^64 - 1
  const Tensor a = vec(std::vector<std::uint64_t>{top, std::uint64_t{1} << 63, 10, 0});
  const Tensor b = vec(std::vector<std::uint64_t>{2, 3, 10, 5});
  CHECK((a / b).to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{top / 2, (std::uint64_t{1} << 63) / 3, 1, 0});
  CHECK(kiln::mod(a, b).to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{1, (std::uint64_t{1} << 63) % 3, 0, 0});
  CHECK((a + b).to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{1, (std::uint64_t{1} << 63) + 3, 20, 5});
  CHECK((a > b).to_vector<bool>() == std::vector<bool>{true, true, false, false});
  CHECK(kiln::maximum(a, b).to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{top, std::uint64_t{1} << 63, 10, 5});
  CHECK(kiln::max(a).item<std::uint64_t>() == top);
  CHECK(kiln::argmin(a, 0).item<std::int64_t>() == 3);
  CHECK(kiln::sort(a, 0, true).to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{top, std::uint64_t{1} << 63, 10, 0});
  CHECK(kiln::cumsum(b, 0).to_vector<std::uint64_t>() == std::vector<std::uint64_t>{2, 5, 15, 20});
  CHECK(kiln::abs(a).to_vector<std::uint64_t>() == a.to_vector<std::uint64_t>());
  // Traced, with a fused chain.
  const auto f = kiln::function([](const Tensor& t) { return (t + t) * t; });
  CHECK(f(a).to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{(top + top) * top, 0, 200, 0});
  // Casts: exact to f64 rounding, saturating from floats.
  CHECK(kiln::cast(a, kiln::f64).to_vector<double>()[0] == 18446744073709551616.0);
  CHECK(
      kiln::cast(vec(std::vector<double>{1e30, -5.0, 3.9}), kiln::u64).to_vector<std::uint64_t>() ==
      std::vector<std::uint64_t>{top, 0, 3});
  // The ops without a u64 kernel say so.
  CHECK_KILN_ERROR(kiln::matmul(kiln::reshape(a, {2, 2}), kiln::reshape(a, {2, 2})),
                   "[matmul] has no u64 kernel: kiln::cast to i64 or f64 first");
}

TEST_CASE("casts to f16 and bf16 agree with NumPy bit for bit", "[dtypes]") {
  const std::string python = io_test::test_python("numpy, ml_dtypes");
  if (python.empty()) {
    WARN("skipped: the project's Python environment (scripts/python-env.sh) is missing");
    return;
  }
  io_test::TempDir dir;
  // Random bit patterns (every class of value: NaN, infinities, subnormals, huge and tiny),
  // values near f16's and bf16's rounding boundaries, and integers of every magnitude.
  io_test::XorShift64 next(0x9e3779b97f4a7c15ULL);
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<std::int64_t> i64;
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t r = next();
    f32.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(r)));
    f64.push_back(std::bit_cast<double>(r));
    // Doubles within a few f16 units of 1..65536, where ties and double rounding live.
    f64.push_back(
        std::ldexp(1.0 + static_cast<double>(r >> 11) * 0x1p-53, static_cast<int>(r % 17)) +
        static_cast<double>(r % 7) * 0x1p-40);
    f32.push_back(static_cast<float>(static_cast<std::int64_t>(r % 200000) - 100000) / 64.f);
    i64.push_back(static_cast<std::int64_t>(r) >> (r % 64));
  }
  const std::vector<std::pair<std::string, Tensor>> sources = {
      {"f32", vec(f32)}, {"f64", vec(f64)}, {"i64", vec(i64)}};
  for (const auto& [name, x] : sources) {
    kiln::io::save_npy(dir / ("source_" + name + ".npy"), x);
    kiln::io::save_npy(dir / (name + "_to_f16.npy"), kiln::cast(x, kiln::f16));
    if (name == "f32") kiln::io::save_npy(dir / (name + "_to_bf16.npy"), kiln::cast(x, kiln::bf16));
  }
  const std::string command = fmt::format("'{}' '{}/check_half_casts.py' '{}'", python,
                                          test_paths::data_dir(), dir.path().string());
  CHECK(std::system(command.c_str()) == 0);
}

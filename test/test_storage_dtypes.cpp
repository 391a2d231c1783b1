// The 8-bit storage dtypes i8 and u8 (kiln/dtype.hpp): casts to and from every dtype (the
// cast row kernels of the instruction set KILN_SIMD selects; scripts/test.sh runs this once per
// set), eager and traced; the ops that move elements; creation, element access and printing;
// variables and checkpoints; and the error every computing op gives.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include <kiln/kiln.hpp>

#include "io_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;

namespace {

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();

#define CHECK_KILN_ERROR(expr, text)                             \
  do {                                                           \
    CHECK_THROWS_AS(expr, kiln::Error);                          \
    CHECK_THROWS_WITH(expr, Catch::Contains(std::string(text))); \
  } while (false)

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

template <class T>
Tensor vec(const std::vector<T>& v) {
  return kiln::tensor(v, {static_cast<std::int64_t>(v.size())});
}

}  // namespace

TEST_CASE("casts to i8 and u8 saturate floats and wrap integers", "[storage_dtypes]") {
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

TEST_CASE("casts from i8 and u8 are exact", "[storage_dtypes]") {
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
    "[storage_dtypes]") {
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

TEST_CASE("i8 and u8 tensors are made, read and printed", "[storage_dtypes]") {
  CHECK(kiln::dtype_of<std::int8_t>() == kiln::i8);
  CHECK(kiln::dtype_of<std::uint8_t>() == kiln::u8);
  CHECK(kiln::dtype_size(kiln::i8) == 1);
  CHECK(kiln::dtype_name(kiln::u8) == "u8");
  CHECK(kiln::is_integer(kiln::i8));
  CHECK(kiln::is_storage_only(kiln::u8));
  CHECK_FALSE(kiln::is_storage_only(kiln::i32));
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

TEST_CASE("computing ops refuse i8 and u8, eagerly and traced", "[storage_dtypes]") {
  const Tensor q = kiln::tensor<std::int8_t>({1, 2, 3, 4}, {2, 2});
  const Tensor u = kiln::cast(q, kiln::u8);
  const std::string cast_first = "(a storage dtype): kiln::cast it first";
  CHECK_KILN_ERROR(q + q, "[add] does not compute on i8 " + cast_first);
  CHECK_KILN_ERROR(kiln::exp(u), "[exp] does not compute on u8 " + cast_first);
  CHECK_KILN_ERROR(q == q, "[equal] does not compute on i8");
  CHECK_KILN_ERROR(kiln::sum(u), "does not compute on u8");
  CHECK_KILN_ERROR(kiln::argmax(q, 0), "does not compute on i8");
  CHECK_KILN_ERROR(kiln::matmul(q, q), "does not compute on i8");
  CHECK_KILN_ERROR(kiln::gather(kiln::zeros({4}), kiln::tensor<std::int8_t>({1}, {1}), 0),
                   "[gather] indices must be i32 or i64, got i8");
  auto f = kiln::function([](const Tensor& t) { return kiln::sum(t * t); });
  CHECK_KILN_ERROR(f(u), "does not compute on u8");
  // The same computation on a cast copy runs.
  CHECK(f(kiln::cast(u, kiln::f32)).item<float>() == 30.0f);
}

TEST_CASE("i8 variables hold quantized weights through a checkpoint", "[storage_dtypes]") {
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
                   "[Variable.scatter_add] variable 'm/w_q' is i8, a storage dtype");
}

// The 8-, 4- and 2-bit dtypes (kiln/dtype.hpp): the 8-bit floats f8e4m3fn, f8e4m3fnuz, f8e5m2
// and f8e5m2fnuz, the 4-bit float f4e2m1fn, and the integers i4, u4, i2 and u2. Conversions
// checked bit for bit against ml_dtypes where the test environment has it and on known values
// (rounding once, overflow, NaN, signed zero); computing in f32 / i32 with the narrow result;
// the ops that move elements; kiln::bitcast; creation, printing; which files hold them.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
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

/// The bytes of a 1-byte-dtype tensor (the bit patterns of a minifloat).
std::vector<int> bytes_of(const Tensor& t) {
  REQUIRE(kiln::dtype_size(t.dtype()) == 1);
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const std::uint8_t*>(c.data());
  return std::vector<int>(p, p + c.size());
}

/// cast(x, to) eagerly, traced, inside a fused chain and from a broadcast view: the bit
/// patterns of all four must be `want`.
void check_cast_bits(const Tensor& x, kiln::DType to, const std::vector<int>& want) {
  INFO("cast " << kiln::dtype_name(x.dtype()) << " -> " << kiln::dtype_name(to));
  const Tensor eager = kiln::cast(x, to);
  REQUIRE(eager.dtype() == to);
  CHECK(bytes_of(eager) == want);
  auto traced = kiln::function([to](const Tensor& t) { return kiln::cast(t, to); });
  CHECK(bytes_of(traced(x)) == want);
  auto fused = kiln::function(
      [to](const Tensor& t) { return kiln::cast(kiln::mul(t, kiln::scalar(1.0, t.dtype())), to); });
  if (!kiln::is_minifloat(x.dtype())) CHECK(bytes_of(fused(x)) == want);
  const Tensor first = kiln::broadcast_to(kiln::slice(x, 0, 0, 1), {3});
  CHECK(bytes_of(kiln::cast(first, to)) == std::vector<int>(3, want[0]));
}

}  // namespace

TEST_CASE("8- and 4-bit floats round to nearest even once, and overflow as ml_dtypes does",
          "[dtypes]") {
  const Tensor x = vec<float>({0.0f, -0.0f, 1.0625f, 1.1875f, 448.0f, 464.0f, 470.0f, 1e6f,
                               static_cast<float>(inf_value), static_cast<float>(nan_value),
                               -static_cast<float>(nan_value), 0x1p-10f, 0x1p-9f * 1.5f});
  // e4m3fn: 1.0625 ties to 1.0 (even), 1.1875 to 1.25; 448 is the largest, 464 ties down to it,
  // 470 and infinity overflow to NaN (0x7f, with the sign); 2^-10 ties to 0; 1.5 * 2^-9 to 2^-8.
  check_cast_bits(x, kiln::f8e4m3fn,
                  {0x00, 0x80, 0x38, 0x3a, 0x7e, 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0xff, 0x00, 0x02});
  // e4m3fnuz: bias 8, largest 240 (0x7f), one NaN (0x80), no -0; 2^-10 is its smallest
  // subnormal.
  check_cast_bits(x, kiln::f8e4m3fnuz,
                  {0x00, 0x00, 0x40, 0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x03});
  // e5m2: IEEE-like: 448 and 464 round to 448, 470 too; overflow to infinity (0x7c), NaN 0x7e;
  // 1.0625 rounds to 1.0, 1.1875 to 1.25; 2^-10 and 1.5 * 2^-9 are normal.
  check_cast_bits(x, kiln::f8e5m2,
                  {0x00, 0x80, 0x3c, 0x3d, 0x5f, 0x5f, 0x5f, 0x7c, 0x7c, 0x7e, 0xfe, 0x14, 0x1a});
  // e2m1fn: 0, 0.5, 1, 1.5, 2, 3, 4, 6; saturates; NaN becomes +6.
  check_cast_bits(x, kiln::f4e2m1fn,
                  {0x0, 0x8, 0x2, 0x2, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x0, 0x0});

  // From f64 and i64 the rounding is once: 1.0625 + 2^-40 is above the tie, so 1.125 (0x39),
  // where a rounding to f32 first would give the tie and then 1.0.
  check_cast_bits(vec<double>({1.0625 + 0x1p-40, -1.0625 - 0x1p-40}), kiln::f8e4m3fn, {0x39, 0xb9});
  // Integers: 4608 is the tie between 4096 and 5120 in e5m2, 4609 above it; 2^40 overflows.
  check_cast_bits(vec<std::int64_t>({4608, 4609, std::int64_t{1} << 40}), kiln::f8e5m2,
                  {0x6c, 0x6d, 0x7c});
  // The public types convert the same way.
  CHECK(kiln::float8_e4m3fn(464.0f).bits == 0x7e);
  CHECK(float(kiln::float8_e4m3fn::from_bits(0x01)) == 0x1p-9f);
  CHECK(float(kiln::float8_e5m2fnuz::from_bits(0x7f)) == 57344.0f);
  CHECK(std::isnan(float(kiln::float8_e4m3fnuz::from_bits(0x80))));
  CHECK(float(kiln::float4_e2m1fn(2.5f)) == 2.0f);  // tie to even
  CHECK(float(kiln::float4_e2m1fn(-5.0f)) == -4.0f);
}

TEST_CASE("every 8- and 4-bit float converts exactly to f32, f64, f16 and back", "[dtypes]") {
  const std::vector<kiln::DType> formats = {kiln::f8e4m3fn, kiln::f8e4m3fnuz, kiln::f8e5m2,
                                            kiln::f8e5m2fnuz};
  std::vector<std::uint8_t> codes;
  for (int i = 0; i < 256; ++i) codes.push_back(static_cast<std::uint8_t>(i));
  for (kiln::DType d : formats) {
    INFO(kiln::dtype_name(d));
    const Tensor m = kiln::bitcast(vec(codes), d);
    REQUIRE(m.dtype() == d);
    for (kiln::DType wide : {kiln::f32, kiln::f64, kiln::f16, kiln::bf16}) {
      INFO(kiln::dtype_name(wide));
      const Tensor back = kiln::cast(kiln::cast(m, wide), d);
      const auto got = bytes_of(back);
      const auto as_f32 = kiln::cast(m, kiln::f32).to_vector<float>();
      for (int i = 0; i < 256; ++i) {
        if (std::isnan(as_f32[static_cast<std::size_t>(i)])) continue;  // NaN stays NaN
        CHECK(got[static_cast<std::size_t>(i)] == i);
      }
    }
  }
  std::vector<kiln::float4_e2m1fn> f4;
  for (int i = 0; i < 16; ++i)
    f4.push_back(kiln::float4_e2m1fn::from_bits(static_cast<std::uint8_t>(i)));
  const auto values = kiln::cast(vec(f4), kiln::f32).to_vector<float>();
  CHECK(values ==
        std::vector<float>{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6});
  CHECK(std::signbit(values[8]));
  CHECK(bytes_of(kiln::cast(kiln::cast(vec(f4), kiln::f64), kiln::f4e2m1fn)) ==
        std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
}

TEST_CASE("i4, u4, i2 and u2 saturate floats, wrap integers and compute in i32", "[dtypes]") {
  const Tensor f = vec<float>({-9.5f, -8.2f, -1.7f, 0.5f, 7.9f, 100.0f,
                               static_cast<float>(nan_value), -static_cast<float>(inf_value)});
  CHECK(kiln::cast(kiln::cast(f, kiln::i4), kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-8, -8, -1, 0, 7, 7, 0, -8});
  CHECK(kiln::cast(kiln::cast(f, kiln::u4), kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 0, 0, 0, 7, 15, 0, 0});
  CHECK(kiln::cast(kiln::cast(f, kiln::i2), kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-2, -2, -1, 0, 1, 1, 0, -2});
  CHECK(kiln::cast(kiln::cast(f, kiln::u2), kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 0, 0, 0, 3, 3, 0, 0});
  const Tensor n = vec<std::int64_t>({7, 8, 9, -9, 16, -1});
  CHECK(kiln::cast(kiln::cast(n, kiln::i4), kiln::i64).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{7, -8, -7, 7, 0, -1});
  CHECK(kiln::cast(kiln::cast(n, kiln::u2), kiln::i64).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{3, 0, 1, 3, 0, 3});
  // Stored one per byte as the value (sign-extended), as ml_dtypes stores them.
  CHECK(bytes_of(kiln::cast(n, kiln::i4)) == std::vector<int>{7, 0xf8, 0xf9, 7, 0, 0xff});
  // Arithmetic computes in i32 and wraps as the narrow type: 7 + 1 = -8 in i4, 3 + 1 = 0 in u2.
  const Tensor a = kiln::cast(vec<std::int32_t>({7, -8, 3}), kiln::i4);
  const Tensor b = kiln::cast(vec<std::int32_t>({1, -1, 3}), kiln::i4);
  const Tensor sum = kiln::add(a, b);
  REQUIRE(sum.dtype() == kiln::i4);
  CHECK(kiln::cast(sum, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-8, 7, 6});
  auto traced = kiln::function([](const Tensor& p, const Tensor& q) { return kiln::mul(p, q); });
  CHECK(kiln::cast(traced(a, b), kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{7, -8, -7});
  CHECK(kiln::int4(9) == -7);
  CHECK(kiln::uint2(-1) == 3);
  // Through every other dtype exactly.
  for (std::size_t i = 0; i < kiln::num_dtypes; ++i) {
    const auto d = static_cast<kiln::DType>(i);
    if (d == kiln::boolean || d == kiln::u2 || d == kiln::i2 || d == kiln::f4e2m1fn) continue;
    INFO(kiln::dtype_name(d));
    const Tensor v = kiln::cast(vec<std::int32_t>({-8, -1, 0, 3, 7}), kiln::i4);
    const Tensor round_trip = kiln::cast(kiln::cast(v, d), kiln::i4);
    CHECK(kiln::cast(round_trip, kiln::i32).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{-8, -1, 0, 3, 7});
  }
}

TEST_CASE("8- and 4-bit floats compute in f32 and round each result once", "[dtypes]") {
  const Tensor a = kiln::cast(vec<float>({1.0f, 3.0f, 448.0f, -2.0f}), kiln::f8e4m3fn);
  const Tensor b = kiln::cast(vec<float>({0.125f, 0.25f, 64.0f, 0.5f}), kiln::f8e4m3fn);
  const Tensor sum = kiln::add(a, b);
  REQUIRE(sum.dtype() == kiln::f8e4m3fn);
  // 1.125, 3.25 and -1.5 are exact; 512 overflows to NaN.
  const auto s = kiln::cast(sum, kiln::f32).to_vector<float>();
  CHECK(s[0] == 1.125f);
  CHECK(s[1] == 3.25f);
  CHECK(std::isnan(s[2]));
  CHECK(s[3] == -1.5f);
  auto traced = kiln::function([](const Tensor& p) { return kiln::tanh(kiln::mul(p, p)); });
  const Tensor y = traced(b);
  REQUIRE(y.dtype() == kiln::f8e4m3fn);
  // Each op's result is rounded, traced as eagerly: 64 * 64 overflows to NaN before the tanh.
  const Tensor eager = kiln::tanh(kiln::mul(b, b));
  CHECK(bytes_of(y) == bytes_of(eager));
  CHECK(bytes_of(y)[2] == 0x7f);
  const Tensor q = kiln::cast(vec<float>({0.5f, 1.5f, 6.0f}), kiln::f4e2m1fn);
  const Tensor total = kiln::sum(q);  // 8 in f32, which f4e2m1fn saturates to 6
  REQUIRE(total.dtype() == kiln::f4e2m1fn);
  CHECK(kiln::cast(total, kiln::f32).item<float>() == 6.0f);
}

TEST_CASE("the ops that move elements take the narrow dtypes as they are", "[dtypes]") {
  for (kiln::DType d : {kiln::f8e4m3fn, kiln::f8e5m2fnuz, kiln::f4e2m1fn, kiln::i4, kiln::u2}) {
    INFO(kiln::dtype_name(d));
    const Tensor x = kiln::cast(kiln::reshape(kiln::arange(0.0, 6.0, 1.0, kiln::i32), {2, 3}), d);
    const Tensor moved = kiln::concat({kiln::transpose(x, {1, 0}), kiln::transpose(x, {1, 0})}, 0);
    CHECK(moved.dtype() == d);
    CHECK(kiln::cast(moved, kiln::i32).to_vector<std::int32_t>() ==
          kiln::cast(kiln::concat({kiln::transpose(kiln::cast(x, kiln::i32), {1, 0}),
                                   kiln::transpose(kiln::cast(x, kiln::i32), {1, 0})},
                                  0),
                     kiln::i32)
              .to_vector<std::int32_t>());
    const Tensor picked = kiln::where(kiln::tensor(std::vector<bool>{true, false, true}, {3}),
                                      kiln::slice(x, 0, 0, 1), kiln::slice(x, 0, 1, 2));
    CHECK(picked.dtype() == d);
    CHECK(bytes_of(picked) == std::vector<int>{bytes_of(x)[0], bytes_of(x)[4], bytes_of(x)[2]});
  }
}

TEST_CASE("bitcast reads the same bytes as another dtype of the same size", "[dtypes]") {
  const Tensor f = vec<float>({1.0f, -2.0f});
  CHECK(kiln::bitcast(f, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0x3f800000, static_cast<std::int32_t>(0xc0000000)});
  CHECK(kiln::bitcast(kiln::bitcast(f, kiln::u32), kiln::f32).to_vector<float>() ==
        std::vector<float>{1.0f, -2.0f});
  CHECK(kiln::bitcast(kiln::tensor(std::vector<bool>{true, false}, {2}), kiln::u8)
            .to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 0});
  CHECK(bytes_of(kiln::bitcast(vec<std::uint8_t>({0x7e}), kiln::f8e4m3fn)) ==
        std::vector<int>{0x7e});
  auto traced =
      kiln::function([](const Tensor& t) { return kiln::bitcast(kiln::neg(t), kiln::i64); });
  CHECK(traced(vec<double>({1.0})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{static_cast<std::int64_t>(0xbff0000000000000ULL)});
  CHECK_KILN_ERROR(kiln::bitcast(f, kiln::f64), "[bitcast] needs dtypes of the same size");
  CHECK_KILN_ERROR(kiln::bitcast(vec<std::uint8_t>({2}), kiln::boolean),
                   "[bitcast] does not take bool");
  CHECK_KILN_ERROR(kiln::bitcast(vec<std::uint8_t>({2}), kiln::i4), "[bitcast] does not take i4");
}

TEST_CASE("narrow dtypes are made, printed and kept in the files that name them", "[dtypes]") {
  const Tensor f8 = kiln::tensor(
      std::vector<kiln::float8_e4m3fn>{kiln::float8_e4m3fn(0.3125f), kiln::float8_e4m3fn(-448.0f),
                                       kiln::float8_e4m3fn::from_bits(0x7f)},
      {3});
  CHECK(kiln::to_string(f8) == "tensor([0.3125,  -448.,    nan], dtype=f8e4m3fn, shape=[3])");
  const Tensor i4 = kiln::tensor(std::vector<kiln::int4>{kiln::int4(-8), kiln::int4(7)}, {2});
  CHECK(kiln::to_string(i4) == "tensor([-8,  7], dtype=i4, shape=[2])");
  CHECK(kiln::full({2}, 9.0, kiln::u4).to_vector<kiln::uint4>()[0] == 9);
  CHECK(kiln::full({1}, 0.3, kiln::f4e2m1fn).to_vector<kiln::float4_e2m1fn>()[0].bits == 0x1);

  io_test::TempDir dir;
  kiln::io::save_safetensors(dir / "f8.safetensors",
                             {{"a", f8}, {"b", kiln::cast(f8, kiln::f8e5m2)}});
  const auto back = kiln::io::load_safetensors(dir / "f8.safetensors");
  CHECK(back.at("a").dtype() == kiln::f8e4m3fn);
  CHECK(bytes_of(back.at("a")) == bytes_of(f8));
  CHECK(back.at("b").dtype() == kiln::f8e5m2);
  CHECK_KILN_ERROR(kiln::io::save_safetensors(dir / "i4.safetensors", {{"w", i4}}),
                   "tensor 'w' is i4, which safetensors has no dtype for");
  CHECK_KILN_ERROR(kiln::io::save_npy(dir / "f8.npy", f8), ".npy has no type for f8e4m3fn");
  CHECK_FALSE(std::filesystem::exists(dir / "f8.npy"));
  CHECK_KILN_ERROR(kiln::io::save_npz(dir / "x.npz", {{"w", i4}}), ".npy has no type for i4");
}

TEST_CASE("casts to the 8- and 4-bit floats agree with ml_dtypes bit for bit", "[dtypes]") {
  const std::string python = io_test::test_python("numpy, ml_dtypes");
  if (python.empty()) {
    WARN("skipped: the project's Python environment (scripts/python-env.sh) is missing");
    return;
  }
  io_test::TempDir dir;
  io_test::XorShift64 next(0x2545f4914f6cdd1dULL);
  // Random bit patterns, values of every magnitude the formats hold, and short mantissas
  // (k * 2^e), which land exactly on the formats' rounding ties.
  std::vector<float> f32;
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t r = next();
    f32.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(r)));
    const int e = static_cast<int>((r >> 32) % 44) - 26;
    const float sign = (r >> 40) & 1 ? -1.0f : 1.0f;
    f32.push_back(sign * std::ldexp(1.0f + static_cast<float>(r & 0xffffff) * 0x1p-24f, e));
    f32.push_back(sign * std::ldexp(static_cast<float>((r >> 44) % 64), e));
  }
  const Tensor x = vec(f32);
  kiln::io::save_npy(dir / "source_f32.npy", x);
  std::vector<std::uint8_t> codes;
  for (int i = 0; i < 256; ++i) codes.push_back(static_cast<std::uint8_t>(i));
  for (kiln::DType d : {kiln::f8e4m3fn, kiln::f8e4m3fnuz, kiln::f8e5m2, kiln::f8e5m2fnuz}) {
    const std::string name(kiln::dtype_name(d));
    kiln::io::save_npy(dir / ("f32_to_" + name + ".npy"),
                       kiln::bitcast(kiln::cast(x, d), kiln::u8));
    kiln::io::save_npy(dir / ("codes_" + name + ".npy"),
                       kiln::cast(kiln::bitcast(vec(codes), d), kiln::f32));
  }
  // f4e2m1fn has no bitcast (it is not stored as its bits): its exact values as f32.
  kiln::io::save_npy(dir / "f32_to_f4e2m1fn.npy",
                     kiln::cast(kiln::cast(x, kiln::f4e2m1fn), kiln::f32));
  const std::string command = fmt::format("'{}' '{}/check_minifloat_casts.py' '{}'", python,
                                          test_paths::data_dir(), dir.path().string());
  CHECK(std::system(command.c_str()) == 0);
}

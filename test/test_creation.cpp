// Creation ops, random tensors, printing and xtensor interop.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/xtensor.hpp>
#include <limits>
#include <set>
#include <string>
#include <vector>
#include <xtensor/xarray.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xview.hpp>

#include "core/tensor_impl.hpp"
#include "kernels/philox.hpp"

using kiln::Shape;
using kiln::Tensor;
namespace detail = kiln::detail;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();

// The message of the kiln::Error that fn throws.
std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no kiln::Error thrown)";
}

struct ErrorCase {
  const char* what;
  std::function<void()> call;
  std::string message;
};

void check_errors(const std::vector<ErrorCase>& cases) {
  for (const auto& c : cases) {
    INFO(c.what);
    CHECK(error_message(c.call) == c.message);
  }
}

// Values of a float tensor as doubles, whatever its float dtype.
std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == kiln::f64) return t.to_vector<double>();
  const auto values = t.to_vector<float>();
  return {values.begin(), values.end()};
}

struct Moments {
  double mean = 0;
  double stddev = 0;
};

Moments moments(const std::vector<double>& values) {
  Moments m;
  for (double v : values) m.mean += v;
  m.mean /= static_cast<double>(values.size());
  for (double v : values) m.stddev += (v - m.mean) * (v - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(values.size() - 1));
  return m;
}

std::vector<std::int32_t> iota_i32(std::int32_t n) {
  std::vector<std::int32_t> values(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = i;
  return values;
}

}  // namespace

// ---------------------------------------------------------------- tensor, scalar, fills

TEMPLATE_TEST_CASE("tensor() copies the data with the dtype of its element type", "[creation]",
                   float, double, std::int32_t, std::int64_t) {
  const std::vector<TestType> data{1, 2, 3, 4, 5, 6};
  const Tensor shaped = kiln::tensor(data, {2, 3});
  CHECK(shaped.dtype() == kiln::dtype_of<TestType>());
  CHECK(shaped.shape() == Shape{2, 3});
  CHECK(shaped.is_contiguous());
  CHECK(shaped.to_vector<TestType>() == data);

  const Tensor flat = kiln::tensor(data);
  CHECK(flat.shape() == Shape{6});
  CHECK(flat.to_vector<TestType>() == data);

  const Tensor from_span = kiln::tensor(std::span<const TestType>(data), {3, 2});
  CHECK(from_span.shape() == Shape{3, 2});
  CHECK(from_span.to_vector<TestType>() == data);
  CHECK(from_span.data() != static_cast<const void*>(data.data()));

  const Tensor scalar = kiln::scalar(TestType{7});
  CHECK(scalar.dtype() == kiln::dtype_of<TestType>());
  CHECK(scalar.ndim() == 0);
  CHECK(scalar.item<TestType>() == TestType{7});
}

TEST_CASE("tensor() and scalar() of booleans store 0/1 bytes", "[creation]") {
  const Tensor t = kiln::tensor({true, false, true, true}, {2, 2});
  CHECK(t.dtype() == kiln::boolean);
  CHECK(t.to_vector<bool>() == std::vector<bool>{true, false, true, true});
  const auto* bytes = static_cast<const std::uint8_t*>(t.data());
  CHECK(std::vector<int>(bytes, bytes + 4) == std::vector<int>{1, 0, 1, 1});
  CHECK(kiln::scalar(false).item<bool>() == false);
  CHECK(kiln::tensor(std::vector<bool>{}).shape() == Shape{0});
}

TEST_CASE("scalar(value, dtype) converts like cast()", "[creation]") {
  CHECK(kiln::scalar(2.75, kiln::i32).item<std::int32_t>() == 2);
  CHECK(kiln::scalar(-2.75, kiln::i64).item<std::int64_t>() == -2);
  CHECK(kiln::scalar(not_a_number, kiln::i32).item<std::int32_t>() == 0);
  CHECK(kiln::scalar(1e20, kiln::i32).item<std::int32_t>() ==
        std::numeric_limits<std::int32_t>::max());
  CHECK(kiln::scalar(-1e20, kiln::i64).item<std::int64_t>() ==
        std::numeric_limits<std::int64_t>::min());
  CHECK(kiln::scalar(0.5, kiln::boolean).item<bool>() == true);
  CHECK(kiln::scalar(0.0, kiln::boolean).item<bool>() == false);
  CHECK(kiln::scalar(0.1, kiln::f32).item<float>() == 0.1f);
  CHECK(kiln::scalar(0.1, kiln::f64).item<double>() == 0.1);
}

TEST_CASE("zeros, ones, full and the *_like variants", "[creation]") {
  CHECK(kiln::zeros({2, 3}).dtype() == kiln::f32);
  CHECK(kiln::zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.f));
  CHECK(kiln::ones({4}, kiln::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>(4, 1));
  CHECK(kiln::ones({2}, kiln::boolean).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(kiln::full({3}, 2.5, kiln::f64).to_vector<double>() == std::vector<double>(3, 2.5));
  CHECK(kiln::full({3}, 2.5, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>(3, 2));
  CHECK(kiln::full({}, 7.0).shape() == Shape{});
  CHECK(kiln::full({0, 4}, 1.0).size() == 0);

  const Tensor base = kiln::tensor({1, 2, 3, 4, 5, 6}, {3, 2});
  for (const Tensor& like :
       {kiln::zeros_like(base), kiln::ones_like(base), kiln::full_like(base, 9.0)}) {
    CHECK(like.dtype() == kiln::i32);
    CHECK(like.shape() == Shape{3, 2});
  }
  CHECK(kiln::zeros_like(base).to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 0));
  CHECK(kiln::ones_like(base).to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 1));
  CHECK(kiln::full_like(base, 9.0).to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 9));
  // A non-contiguous view gives a contiguous result of the view's shape.
  const Tensor transposed = detail::make_view(base, {2, 3}, {1, 2}, 0);
  CHECK(kiln::ones_like(transposed).shape() == Shape{2, 3});
  CHECK(kiln::ones_like(transposed).is_contiguous());
}

// ---------------------------------------------------------------- ranges and eye

TEST_CASE("arange on floats and integers, with negative steps and empty results", "[creation]") {
  struct Case {
    double start, stop, step;
    kiln::DType dtype;
    std::vector<double> expected;
  };
  const std::vector<Case> cases{
      {0, 1, 0.25, kiln::f32, {0, 0.25, 0.5, 0.75}},
      {0, 1, 0.25, kiln::f64, {0, 0.25, 0.5, 0.75}},
      {1, 2.1, 0.5, kiln::f64, {1, 1.5, 2}},
      {5, 0, -1.5, kiln::f32, {5, 3.5, 2, 0.5}},
      {5, 0, -1.5, kiln::i32, {5, 3, 2, 0}},
      {-3, 3, 2, kiln::i64, {-3, -1, 1}},
      {3, 1, 1, kiln::f32, {}},
      {1, 3, -1, kiln::i32, {}},
      {2, 2, 1, kiln::f64, {}},
  };
  for (const auto& c : cases) {
    INFO(fmt::format("arange({}, {}, {}, {})", c.start, c.stop, c.step, c.dtype));
    const Tensor t = kiln::arange(c.start, c.stop, c.step, c.dtype);
    CHECK(t.dtype() == c.dtype);
    CHECK(t.shape() == Shape{static_cast<std::int64_t>(c.expected.size())});
    std::vector<double> values;
    if (c.dtype == kiln::i32) {
      for (auto v : t.to_vector<std::int32_t>()) values.push_back(v);
    } else if (c.dtype == kiln::i64) {
      for (auto v : t.to_vector<std::int64_t>()) values.push_back(static_cast<double>(v));
    } else {
      values = as_doubles(t);
    }
    CHECK(values == c.expected);
  }
  CHECK(kiln::arange(5).dtype() == kiln::i64);
  CHECK(kiln::arange(5).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  CHECK(kiln::arange(3, kiln::f32).to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK(kiln::arange(0).shape() == Shape{0});
}

TEST_CASE("linspace includes both ends; num 0 and 1", "[creation]") {
  CHECK(kiln::linspace(0, 1, 0).shape() == Shape{0});
  CHECK(kiln::linspace(3, 7, 1).to_vector<float>() == std::vector<float>{3});
  CHECK(kiln::linspace(0, 1, 5).to_vector<float>() == std::vector<float>{0, 0.25, 0.5, 0.75, 1});
  CHECK(kiln::linspace(2, -2, 5, kiln::f64).to_vector<double>() ==
        std::vector<double>{2, 1, 0, -1, -2});
  CHECK(kiln::linspace(0, 10, 3, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 5, 10});
  // The last value is exactly `stop`, not start + (num - 1) * step.
  CHECK(kiln::linspace(0.1, 0.7, 7, kiln::f64).to_vector<double>().back() == 0.7);
}

TEST_CASE("eye, square and rectangular", "[creation]") {
  CHECK(kiln::eye(3).shape() == Shape{3, 3});
  CHECK(kiln::eye(3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(kiln::eye(2, 3, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, 0, 0, 0, 1, 0});
  CHECK(kiln::eye(3, 2, kiln::f64).to_vector<double>() == std::vector<double>{1, 0, 0, 1, 0, 0});
  CHECK(kiln::eye(2, -1, kiln::boolean).to_vector<bool>() ==
        std::vector<bool>{true, false, false, true});
  CHECK(kiln::eye(0).shape() == Shape{0, 0});
  CHECK(kiln::eye(3, 0).shape() == Shape{3, 0});
}

TEST_CASE("creation ops reject bad arguments", "[creation]") {
  const Tensor f = kiln::tensor({1.f, 2.f});
  check_errors({
      {"too few values",
       [] {
         kiln::tensor({1.f, 2.f, 3.f}, {2, 2});
       },
       "[tensor] 3 values do not fill shape [2,2] (4 elements)"},
      {"too many values",
       [] {
         kiln::tensor({1, 2, 3}, {2});
       },
       "[tensor] 3 values do not fill shape [2] (2 elements)"},
      {"negative dim", [] { kiln::tensor({1.0}, {-1}); },
       "[tensor] negative dimension in shape [-1]"},
      {"zeros negative",
       [] {
         kiln::zeros({2, -3});
       },
       "[zeros] negative dimension in shape [2,-3]"},
      {"ones_like undefined", [] { kiln::ones_like(Tensor{}); },
       "[ones_like] argument 0 is an undefined tensor"},
      {"ones negative", [] { kiln::ones({-1}); }, "[ones] negative dimension in shape [-1]"},
      {"full negative", [] { kiln::full({-4}, 1.0); }, "[full] negative dimension in shape [-4]"},
      {"full overflow",
       [] {
         kiln::full({std::int64_t{1} << 32, std::int64_t{1} << 32}, 1.0);
       },
       "[full] shape [4294967296,4294967296] has too many elements"},
      // Past the element limit, and beyond any address space: the error names the op called.
      {"zeros past the element limit", [] { kiln::zeros({std::int64_t{1} << 62}); },
       "[zeros] shape [4611686018427387904] has too many elements"},
      {"zeros beyond memory", [] { kiln::zeros({std::int64_t{1} << 48}); },
       "[zeros] out of memory allocating 1125899906842624 bytes"},
      {"ones beyond memory",
       [] {
         kiln::ones({std::int64_t{1} << 24, std::int64_t{1} << 24});
       },
       "[ones] out of memory allocating 1125899906842624 bytes"},
      {"random.normal beyond memory",
       [] { kiln::random::normal({std::int64_t{1} << 48}, 0, 1, 1); },
       "[random.normal] out of memory allocating 1125899906842624 bytes"},
      {"broadcast_to beyond memory",
       [] { kiln::broadcast_to(kiln::ones({1}), {std::int64_t{1} << 48}) + 1.f; },
       "[add] out of memory allocating 1125899906842624 bytes"},
      {"zeros_like undefined", [] { kiln::zeros_like(Tensor{}); },
       "[zeros_like] argument 0 is an undefined tensor"},
      {"full_like undefined", [] { kiln::full_like(Tensor{}, 1.0); },
       "[full_like] argument 0 is an undefined tensor"},
      {"arange step 0", [] { kiln::arange(0, 1, 0); },
       "[arange] start, stop and step must be finite and step nonzero (got 0, 1, 0)"},
      {"arange nan", [] { kiln::arange(0, not_a_number, 1); },
       "[arange] start, stop and step must be finite and step nonzero (got 0, nan, 1)"},
      {"arange too long", [] { kiln::arange(0, 1e300, 1); },
       "[arange] 1e+300 elements is too many"},
      {"arange negative stop", [] { kiln::arange(-1); }, "[arange] stop -1 is negative"},
      {"linspace negative num", [] { kiln::linspace(0, 1, -1); }, "[linspace] num -1 is negative"},
      {"eye negative n", [] { kiln::eye(-2); }, "[eye] n -2 is negative"},
      {"eye overflow", [] { kiln::eye(std::int64_t{1} << 32, std::int64_t{1} << 32); },
       "[eye] shape [4294967296,4294967296] has too many elements"},
      {"to_vector wrong type", [&] { f.to_vector<double>(); },
       "[to_vector] tensor has dtype f32, but f64 was requested"},
      {"item of non-scalar", [&] { f.item<float>(); },
       "[item] tensor of shape [2] has 2 elements, item() needs exactly one"},
      {"item wrong type", [] { kiln::scalar(1.f).item<std::int32_t>(); },
       "[item] tensor has dtype f32, but i32 was requested"},
      {"to_vector of undefined", [] { Tensor{}.to_vector<float>(); },
       "[tensor] to_vector of an undefined tensor"},
  });
  CHECK(kiln::tensor({5.f}, {1, 1, 1}).item<float>() == 5.f);
}

// ---------------------------------------------------------------- random

TEST_CASE("Philox-4x32-10 matches the Random123 known-answer vectors", "[creation]") {
  struct Case {
    detail::PhiloxCounter counter;
    detail::PhiloxKey key;
    detail::PhiloxCounter expected;
  };
  const std::vector<Case> cases{
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& c : cases) CHECK(detail::philox4x32_10(c.counter, c.key) == c.expected);
}

TEST_CASE("random tensors are reproducible and depend only on (seed, index)", "[creation]") {
  using Draw = std::function<Tensor(const Shape&, std::uint64_t, kiln::DType)>;
  const std::vector<std::pair<const char*, Draw>> draws{
      {"normal", [](const Shape& s, std::uint64_t seed,
                    kiln::DType d) { return kiln::random::normal(s, 1.0, 2.0, seed, d); }},
      {"uniform", [](const Shape& s, std::uint64_t seed,
                     kiln::DType d) { return kiln::random::uniform(s, -1.0, 1.0, seed, d); }},
      {"truncated_normal",
       [](const Shape& s, std::uint64_t seed, kiln::DType d) {
         return kiln::random::truncated_normal(s, 0.0, 1.0, seed, d);
       }},
  };
  for (const auto& [name, draw] : draws) {
    for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
      INFO(name << " " << kiln::dtype_name(dtype));
      const auto first = as_doubles(draw({10}, 42, dtype));
      CHECK(draw({10}, 42, dtype).dtype() == dtype);
      CHECK(as_doubles(draw({10}, 42, dtype)) == first);
      CHECK(as_doubles(draw({10}, 43, dtype)) != first);
      CHECK(as_doubles(draw({10}, std::uint64_t{42} << 32, dtype)) != first);
      // Element i does not depend on the tensor's size or shape.
      const auto longer = as_doubles(draw({1000}, 42, dtype));
      CHECK(std::vector<double>(longer.begin(), longer.begin() + 10) == first);
      CHECK(as_doubles(draw({2, 5}, 42, dtype)) == first);
      CHECK(draw({}, 42, dtype).shape() == Shape{});
      CHECK(draw({0, 3}, 42, dtype).shape() == Shape{0, 3});
      // Elements differ (no index collapsing); f32 uniforms have 24 bits, so a rare
      // birthday collision is allowed.
      const std::set<double> distinct(longer.begin(), longer.end());
      CHECK(distinct.size() >= longer.size() - 2);
    }
  }
}

TEST_CASE("uniform element i is Philox block (i, 0) under the seed's key", "[creation]") {
  // Large enough to be split across threads; each element must still match its own block.
  constexpr std::int64_t count = 300000;
  const std::uint64_t seed = 0x0123456789abcdefull;
  const detail::PhiloxKey key{0x89abcdefu, 0x01234567u};
  const auto f32 = kiln::random::uniform({count}, 0.0, 1.0, seed).to_vector<float>();
  const auto f64 = kiln::random::uniform({count}, 0.0, 1.0, seed, kiln::f64).to_vector<double>();
  for (std::int64_t i = 0; i < count; i += 997) {
    const auto block = detail::philox4x32_10({static_cast<std::uint32_t>(i), 0, 0, 0}, key);
    const auto index = static_cast<std::size_t>(i);
    CHECK(f32[index] == static_cast<float>(block[0] >> 8) * 0x1p-24f);
    const std::uint64_t bits = (std::uint64_t{block[0]} << 32) | block[1];
    CHECK(f64[index] == static_cast<double>(bits >> 11) * 0x1p-53);
  }
  CHECK(f32.back() ==
        static_cast<float>(detail::philox4x32_10({count - 1, 0, 0, 0}, key)[0] >> 8) * 0x1p-24f);
}

TEST_CASE("random moments on 100k samples", "[creation]") {
  constexpr std::int64_t count = 100000;
  // Truncating a normal at two standard deviations scales its stddev by
  // sqrt(1 - 4 phi(2) / (Phi(2) - Phi(-2))).
  const double truncated_scale = std::sqrt(1.0 - 4.0 * 0.05399096651318806 / 0.9544997361036416);
  for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
    INFO(kiln::dtype_name(dtype));
    const auto normal = as_doubles(kiln::random::normal({count}, 2.0, 3.0, 1, dtype));
    const auto m = moments(normal);
    CHECK(m.mean == Approx(2.0).margin(0.05));
    CHECK(m.stddev == Approx(3.0).margin(0.03));
    std::int64_t within_one_stddev = 0;
    for (double v : normal) within_one_stddev += std::abs(v - 2.0) <= 3.0;
    CHECK(static_cast<double>(within_one_stddev) / count == Approx(0.682689).margin(0.006));

    const auto uniform = as_doubles(kiln::random::uniform({count}, -1.0, 3.0, 2, dtype));
    const auto u = moments(uniform);
    CHECK(u.mean == Approx(1.0).margin(0.02));
    CHECK(u.stddev == Approx(4.0 / std::sqrt(12.0)).margin(0.01));
    std::vector<std::int64_t> histogram(8, 0);
    for (double v : uniform) {
      REQUIRE(v >= -1.0);
      REQUIRE(v < 3.0);
      ++histogram[static_cast<std::size_t>((v + 1.0) * 2.0)];
    }
    for (auto bin : histogram)
      CHECK(static_cast<double>(bin) / count == Approx(0.125).margin(0.005));

    const auto truncated = as_doubles(kiln::random::truncated_normal({count}, -1.0, 0.5, 3, dtype));
    const auto t = moments(truncated);
    CHECK(t.mean == Approx(-1.0).margin(0.01));
    CHECK(t.stddev == Approx(0.5 * truncated_scale).margin(0.005));
    double largest_distance = 0;
    for (double v : truncated) largest_distance = std::max(largest_distance, std::abs(v + 1.0));
    CHECK(largest_distance <= 1.0 + 1e-6);
    CHECK(largest_distance > 0.99);  // the truncation does not shrink the range
  }
}

TEST_CASE("random edge parameters", "[creation]") {
  CHECK(kiln::random::normal({5}, 4.0, 0.0, 9).to_vector<float>() == std::vector<float>(5, 4.f));
  CHECK(kiln::random::truncated_normal({5}, -2.0, 0.0, 9, kiln::f64).to_vector<double>() ==
        std::vector<double>(5, -2.0));
  CHECK(kiln::random::uniform({5}, 1.5, 1.5, 9).to_vector<float>() == std::vector<float>(5, 1.5f));
  // A range too narrow for f32 still gives values in [low, high).
  for (float v : kiln::random::uniform({1000}, 1.0, 1.0 + 1e-9, 9).to_vector<float>())
    CHECK(v == 1.0f);
  // A range whose width overflows still gives finite values inside it.
  for (double v : kiln::random::uniform({1000}, -1e308, 1e308, 9, kiln::f64).to_vector<double>()) {
    CHECK(std::isfinite(v));
    CHECK(v >= -1e308);
    CHECK(v < 1e308);
  }
}

TEST_CASE("unseeded draws take the next seed of the global stream", "[creation]") {
  kiln::random::set_global_seed(7);
  const auto a = kiln::random::normal({8}).to_vector<float>();
  const auto b = kiln::random::normal({8}).to_vector<float>();
  const auto c = kiln::random::uniform({8}, 0.0, 1.0, kiln::f64).to_vector<double>();
  CHECK(a != b);
  kiln::random::set_global_seed(7);
  CHECK(kiln::random::normal({8}).to_vector<float>() == a);
  // A rejected call does not advance the stream.
  CHECK_THROWS_AS(kiln::random::normal({8}, 0.0, -1.0), kiln::Error);
  CHECK(kiln::random::normal({8}).to_vector<float>() == b);
  CHECK(kiln::random::uniform({8}, 0.0, 1.0, kiln::f64).to_vector<double>() == c);
  kiln::random::set_global_seed(8);
  CHECK(kiln::random::normal({8}).to_vector<float>() != a);
  const auto truncated = kiln::random::truncated_normal({100}, 0.0, 1.0).to_vector<float>();
  for (float v : truncated) CHECK(std::abs(v) <= 2.f);
}

TEST_CASE("random ops reject bad arguments", "[creation]") {
  namespace random = kiln::random;
  check_errors({
      {"normal i32", [] { random::normal({2}, 0.0, 1.0, 1, kiln::i32); },
       "[random.normal] dtype must be f32 or f64, got i32"},
      {"uniform bool", [] { random::uniform({2}, 0.0, 1.0, 1, kiln::boolean); },
       "[random.uniform] dtype must be f32 or f64, got bool"},
      {"truncated i64", [] { random::truncated_normal({2}, 0.0, 1.0, kiln::i64); },
       "[random.truncated_normal] dtype must be f32 or f64, got i64"},
      {"negative stddev", [] { random::normal({2}, 0.0, -1.0, 1); },
       "[random.normal] stddev must be >= 0, got -1"},
      {"truncated negative stddev", [] { random::truncated_normal({2}, 0.0, -0.5, 1); },
       "[random.truncated_normal] stddev must be >= 0, got -0.5"},
      {"low > high", [] { random::uniform({2}, 2.0, 1.0, 1); },
       "[random.uniform] low 2 is greater than high 1"},
      {"nan mean", [] { random::normal({2}, not_a_number, 1.0, 1); },
       "[random.normal] mean must be finite, got nan"},
      {"inf stddev", [] { random::truncated_normal({2}, 0.0, infinity, 1); },
       "[random.truncated_normal] stddev must be finite, got inf"},
      {"inf high", [] { random::uniform({2}, 0.0, infinity, 1); },
       "[random.uniform] high must be finite, got inf"},
      {"nan low", [] { random::uniform({2}, not_a_number, 1.0); },
       "[random.uniform] low must be finite, got nan"},
      {"f32 range", [] { random::uniform({2}, 0.0, 1e300, 1); },
       "[random.uniform] high 1e+300 is out of range for f32"},
      {"f32 mean range", [] { random::normal({2}, -1e39, 1.0, 1); },
       "[random.normal] mean -1e+39 is out of range for f32"},
      {"negative dim",
       [] {
         random::normal({2, -1}, 0.0, 1.0, 1);
       },
       "[random.normal] negative dimension in shape [2,-1]"},
      {"negative dim unseeded", [] { random::uniform({-3}); },
       "[random.uniform] negative dimension in shape [-3]"},
      {"overflowing shape",
       [] {
         random::normal({std::int64_t{1} << 32, std::int64_t{1} << 32});
       },
       "[random.normal] shape [4294967296,4294967296] has too many elements"},
  });
  CHECK(kiln::random::uniform({2}, 0.0, 1e300, 1, kiln::f64).dtype() == kiln::f64);
}

// ---------------------------------------------------------------- printing

TEST_CASE("to_string prints like NumPy", "[creation]") {
  const Tensor base = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  struct Case {
    const char* what;
    Tensor tensor;
    std::string expected;
  };
  const std::vector<Case> cases{
      {"undefined", Tensor{}, "tensor(undefined)"},
      {"rank 0", kiln::scalar(3.5f), "tensor(3.5, dtype=f32, shape=[])"},
      {"rank 0 integral", kiln::scalar(-2.0), "tensor(-2., dtype=f64, shape=[])"},
      {"rank 0 i64", kiln::scalar(std::int64_t{-9}), "tensor(-9, dtype=i64, shape=[])"},
      {"rank 1", kiln::tensor({1.f, 2.5f, -3.f}), "tensor([ 1., 2.5, -3.], dtype=f32, shape=[3])"},
      {"rank 2", kiln::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}),
       "tensor([[1., 2.],\n        [3., 4.]], dtype=f32, shape=[2,2])"},
      {"rank 3", kiln::tensor(iota_i32(8), {2, 2, 2}),
       "tensor([[[0, 1],\n"
       "         [2, 3]],\n"
       "\n"
       "        [[4, 5],\n"
       "         [6, 7]]], dtype=i32, shape=[2,2,2])"},
      {"size-1 dims", kiln::tensor({5}, {1, 1, 1}), "tensor([[[5]]], dtype=i32, shape=[1,1,1])"},
      {"bool", kiln::tensor({true, false, true}),
       "tensor([ true, false,  true], dtype=bool, shape=[3])"},
      {"i32 widths", kiln::tensor({1, -20, 300}), "tensor([  1, -20, 300], dtype=i32, shape=[3])"},
      {"i64 extremes",
       kiln::tensor(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), 0}),
       "tensor([-9223372036854775808,                    0], dtype=i64, shape=[2])"},
      {"f64 specials", kiln::tensor({0.1, 1e20, not_a_number, -infinity, infinity, -0.0}),
       "tensor([   0.1, 1.e+20,    nan,   -inf,    inf,    -0.], dtype=f64, shape=[6])"},
      {"f32 shortest", kiln::tensor({0.1f, 1.f / 3.f, 1e-7f}),
       "tensor([       0.1, 0.33333334,     1.e-07], dtype=f32, shape=[3])"},
      {"f64 shortest", kiln::tensor({1.0 / 3.0}),
       "tensor([0.3333333333333333], dtype=f64, shape=[1])"},
      {"zero-size", kiln::zeros({0, 3}), "tensor([], dtype=f32, shape=[0,3])"},
      {"zero-size 1-D", kiln::zeros({0}, kiln::i64), "tensor([], dtype=i64, shape=[0])"},
      {"transposed view", detail::make_view(base, {3, 2}, {1, 3}, 0),
       "tensor([[1., 4.],\n        [2., 5.],\n        [3., 6.]], dtype=f32, shape=[3,2])"},
      {"strided view with offset", detail::make_view(base, {2}, {3}, 1),
       "tensor([2., 5.], dtype=f32, shape=[2])"},
      {"reversed view", detail::make_view(base, {3}, {-1}, 2),
       "tensor([3., 2., 1.], dtype=f32, shape=[3])"},
      {"broadcast view", detail::make_view(base, {2, 2}, {0, 0}, 5),
       "tensor([[6., 6.],\n        [6., 6.]], dtype=f32, shape=[2,2])"},
      {"wrapped row", kiln::arange(30, kiln::f32),
       "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12.,\n"
       "        13., 14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25.,\n"
       "        26., 27., 28., 29.], dtype=f32, shape=[30])"},
      {"elided 1-D", kiln::arange(2000),
       "tensor([   0,    1,    2, ..., 1997, 1998, 1999], dtype=i64, shape=[2000])"},
      {"elided 2-D", kiln::tensor(iota_i32(2000), {100, 20}),
       "tensor([[   0,    1,    2, ...,   17,   18,   19],\n"
       "        [  20,   21,   22, ...,   37,   38,   39],\n"
       "        [  40,   41,   42, ...,   57,   58,   59],\n"
       "        ...,\n"
       "        [1940, 1941, 1942, ..., 1957, 1958, 1959],\n"
       "        [1960, 1961, 1962, ..., 1977, 1978, 1979],\n"
       "        [1980, 1981, 1982, ..., 1997, 1998, 1999]], dtype=i32, shape=[100,20])"},
      {"elided only long axes", kiln::ones({2, 501}, kiln::boolean),
       "tensor([[true, true, true, ..., true, true, true],\n"
       "        [true, true, true, ..., true, true, true]], dtype=bool, shape=[2,501])"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    CHECK(kiln::to_string(c.tensor) == c.expected);
    CHECK(fmt::format("{}", c.tensor) == c.expected);
  }
}

TEST_CASE("to_string summarizes above 1000 elements only", "[creation]") {
  const std::string thousand = kiln::to_string(kiln::zeros({1000}, kiln::i32));
  CHECK(thousand.find("...") == std::string::npos);
  const std::string data = thousand.substr(0, thousand.find("], dtype"));
  CHECK(std::count(data.begin(), data.end(), '0') == 1000);
  CHECK(kiln::to_string(kiln::zeros({1001}, kiln::i32)) ==
        "tensor([0, 0, 0, ..., 0, 0, 0], dtype=i32, shape=[1001])");

  // Rank 3: the elided matrices are separated by a blank line, like NumPy.
  const std::string row = "[0, 0, 0, ..., 0, 0, 0]";
  const std::vector<std::string> rows{row, row, row, "...", row, row, row};
  const std::string matrix = fmt::format("[{}]", fmt::join(rows, ",\n         "));
  const std::vector<std::string> matrices{matrix, matrix, matrix, "...", matrix, matrix, matrix};
  const std::string expected =
      fmt::format("tensor([{}], dtype=i32, shape=[7,12,12])", fmt::join(matrices, ",\n\n        "));
  CHECK(kiln::to_string(kiln::zeros({7, 12, 12}, kiln::i32)) == expected);
}

TEST_CASE("to_string of a large non-contiguous view matches its contiguous copy", "[creation]") {
  const Tensor base = kiln::tensor(iota_i32(2400), {40, 60});
  const Tensor transposed = detail::make_view(base, {60, 40}, {1, 60}, 0);
  REQUIRE_FALSE(transposed.is_contiguous());
  const std::string text = kiln::to_string(transposed);
  CHECK(text == kiln::to_string(transposed.contiguous()));
  CHECK(text.rfind("tensor([[   0,   60,  120, ..., 2220, 2280, 2340],\n", 0) == 0);
  CHECK(text.find("[  59,  119,  179, ..., 2279, 2339, 2399]], dtype=i32, shape=[60,40])") !=
        std::string::npos);
}

// ---------------------------------------------------------------- xtensor interop

TEST_CASE("from_xtensor copies containers and lazy expressions", "[creation]") {
  const xt::xarray<double> a = {{1., 2., 3.}, {4., 5., 6.}};
  const Tensor t = kiln::from_xtensor(a);
  CHECK(t.dtype() == kiln::f64);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(t.data() != static_cast<const void*>(a.data()));

  CHECK(kiln::from_xtensor(a * 2.0 + 1.0).to_vector<double>() ==
        std::vector<double>{3, 5, 7, 9, 11, 13});
  const Tensor transposed = kiln::from_xtensor(xt::transpose(a));
  CHECK(transposed.shape() == Shape{3, 2});
  CHECK(transposed.to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(kiln::from_xtensor(xt::view(a, 1, xt::range(1, 3))).to_vector<double>() ==
        std::vector<double>{5, 6});

  xt::xarray<float, xt::layout_type::column_major> column_major = {{1.f, 2.f}, {3.f, 4.f}};
  const Tensor from_column_major = kiln::from_xtensor(column_major);
  CHECK(from_column_major.dtype() == kiln::f32);
  CHECK(from_column_major.to_vector<float>() == std::vector<float>{1, 2, 3, 4});

  const xt::xarray<std::int32_t> ints = {5, -6, 7};
  CHECK(kiln::from_xtensor(ints).dtype() == kiln::i32);
  CHECK(kiln::from_xtensor(ints).to_vector<std::int32_t>() == std::vector<std::int32_t>{5, -6, 7});
  auto longs = xt::xarray<std::int64_t>::from_shape({2, 1});
  longs(0, 0) = 1;
  longs(1, 0) = 2;
  CHECK(kiln::from_xtensor(longs).shape() == Shape{2, 1});
  CHECK(kiln::from_xtensor(longs).dtype() == kiln::i64);

  const Tensor mask = kiln::from_xtensor(ints > 0);
  CHECK(mask.dtype() == kiln::boolean);
  CHECK(mask.to_vector<bool>() == std::vector<bool>{true, false, true});

  const xt::xarray<float> scalar(3.5f);
  CHECK(kiln::from_xtensor(scalar).shape() == Shape{});
  CHECK(kiln::from_xtensor(scalar).item<float>() == 3.5f);
  CHECK(kiln::from_xtensor(xt::xarray<double>::from_shape({0, 4})).shape() == Shape{0, 4});

  xt::xarray<float> too_deep = xt::zeros<float>({1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(error_message([&] { kiln::from_xtensor(too_deep); }) ==
        "[from_xtensor] rank 9 exceeds the maximum rank 8");
}

TEST_CASE("as_xtensor reads a tensor's buffer in place, views included", "[creation]") {
  const Tensor base = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const auto whole = kiln::as_xtensor<float>(base);
  CHECK(whole.dimension() == 2);
  CHECK(whole.shape()[0] == 2);
  CHECK(whole.shape()[1] == 3);
  CHECK(whole(1, 2) == 6.f);
  CHECK(&whole(0, 0) == base.data());  // no copy
  CHECK(xt::sum(whole)() == 21.f);
  auto adaptor = kiln::as_xtensor<float>(base);
  static_assert(!std::is_assignable_v<decltype(adaptor(0, 0)), float>, "the adaptor is read-only");
  static_assert(!std::is_assignable_v<decltype(*adaptor.begin()), float>,
                "the adaptor is read-only");

  struct Case {
    const char* what;
    Tensor view;
    xt::xarray<float> expected;
  };
  const std::vector<Case> cases{
      {"transposed", detail::make_view(base, {3, 2}, {1, 3}, 0), {{1, 4}, {2, 5}, {3, 6}}},
      {"strided column with offset", detail::make_view(base, {2}, {3}, 1), {2, 5}},
      {"reversed", detail::make_view(base, {3}, {-1}, 2), {3, 2, 1}},
      {"broadcast", detail::make_view(base, {2, 3}, {0, 1}, 3), {{4, 5, 6}, {4, 5, 6}}},
      {"size-1 dim with odd stride", detail::make_view(base, {1, 3}, {7, 1}, 0), {{1, 2, 3}}},
      {"scalar", detail::make_view(base, {}, {}, 4), xt::xarray<float>(5.f)},
      {"empty", detail::make_view(base, {0, 3}, {3, 1}, 0), xt::xarray<float>::from_shape({0, 3})},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto adapted = kiln::as_xtensor<float>(c.view);
    INFO("adapted: " << adapted);
    CHECK((adapted == c.expected));
    // Round trip: copying the adaptor back gives the view's values.
    CHECK(kiln::from_xtensor(adapted).to_vector<float>() == c.view.to_vector<float>());
  }

  const Tensor flags = kiln::tensor({true, false});
  CHECK((kiln::as_xtensor<bool>(flags) == xt::xarray<bool>{true, false}));
  const Tensor longs = kiln::arange(4);
  CHECK(kiln::as_xtensor<std::int64_t>(longs)(3) == 3);

  check_errors({
      {"dtype mismatch", [&] { kiln::as_xtensor<double>(base); },
       "[as_xtensor] tensor has dtype f32, but f64 was requested"},
      {"bool as i32", [&] { kiln::as_xtensor<std::int32_t>(flags); },
       "[as_xtensor] tensor has dtype bool, but i32 was requested"},
      {"undefined", [] { kiln::as_xtensor<float>(Tensor{}); },
       "[as_xtensor] argument 0 is an undefined tensor"},
  });
}

// ---------------------------------------------------------------- memory

TEST_CASE("creation, random and printing leave live memory where it started", "[creation]") {
  const kiln::MemoryStats before = kiln::memory_stats();
  {
    const Tensor z = kiln::zeros({10}, kiln::f32);
    kiln::MemoryStats during = kiln::memory_stats();
    CHECK(during.live_tensors == before.live_tensors + 1);
    CHECK(during.live_buffers == before.live_buffers + 1);
    CHECK(during.live_bytes == before.live_bytes + 40);
    const Tensor view = detail::make_view(z, {5}, {2}, 0);
    during = kiln::memory_stats();
    CHECK(during.live_tensors == before.live_tensors + 2);
    CHECK(during.live_buffers == before.live_buffers + 1);

    const Tensor r = kiln::random::normal({100, 20}, 0.0, 1.0, 5, kiln::f64);
    CHECK(kiln::memory_stats().live_bytes == before.live_bytes + 40 + 16000);
    CHECK(kiln::memory_stats().peak_bytes >= before.live_bytes + 16040);
    for (int i = 0; i < 100; ++i) {
      (void)kiln::to_string(r);
      (void)kiln::random::uniform({64});
      (void)kiln::random::truncated_normal({8, 8}, 0.0, 1.0, kiln::f64);
      (void)kiln::eye(5);
      (void)kiln::from_xtensor(kiln::as_xtensor<double>(r));
      (void)kiln::to_string(view.contiguous());
    }
    CHECK_THROWS(kiln::random::normal({-1}));
    CHECK_THROWS(kiln::tensor({1.f}, {2}));
  }
  const kiln::MemoryStats after = kiln::memory_stats();
  CHECK(after.live_tensors == before.live_tensors);
  CHECK(after.live_buffers == before.live_buffers);
  CHECK(after.live_bytes == before.live_bytes);
}

TEST_CASE("uniform_int draws every integer of [low, high) equally, reproducibly", "[creation]") {
  const Tensor a = kiln::random::uniform_int({60000}, -3, 7, 5);
  CHECK(a.dtype() == kiln::i32);
  CHECK(a.to_vector<std::int32_t>() ==
        kiln::random::uniform_int({60000}, -3, 7, 5).to_vector<std::int32_t>());
  std::vector<int> counts(10, 0);
  for (std::int32_t v : a.to_vector<std::int32_t>()) {
    REQUIRE(v >= -3);
    REQUIRE(v < 7);
    ++counts[static_cast<std::size_t>(v + 3)];
  }
  // 6,000 expected per value; the standard deviation is about 73.
  for (int c : counts) CHECK(std::abs(c - 6000) < 500);
  // i64 over a range wider than 32 bits, and the full i64 range minus one.
  const auto wide = kiln::random::uniform_int({1000}, 0, std::int64_t{1} << 40, 9, kiln::i64)
                        .to_vector<std::int64_t>();
  CHECK(*std::max_element(wide.begin(), wide.end()) > (std::int64_t{1} << 38));
  const std::int64_t lo = std::numeric_limits<std::int64_t>::min();
  const std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  bool negative = false, positive = false;
  for (std::int64_t v :
       kiln::random::uniform_int({64}, lo, hi, 3, kiln::i64).to_vector<std::int64_t>()) {
    CHECK(v < hi);
    negative = negative || v < 0;
    positive = positive || v > 0;
  }
  CHECK((negative && positive));
  CHECK(kiln::random::uniform_int({3}, 4, 5, 1).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{4, 4, 4});
  // The unseeded overload draws from the global stream.
  kiln::random::set_global_seed(11);
  const Tensor first = kiln::random::uniform_int({8}, 0, 100);
  kiln::random::set_global_seed(11);
  CHECK(kiln::random::uniform_int({8}, 0, 100).to_vector<std::int32_t>() ==
        first.to_vector<std::int32_t>());
  CHECK_THROWS_WITH(
      kiln::random::uniform_int({2}, 5, 5, 1),
      "[random.uniform_int] low 5 must be less than high 5 (the range is [low, high))");
  CHECK_THROWS_WITH(kiln::random::uniform_int({2}, 0, 5, 1, kiln::f32),
                    "[random.uniform_int] dtype must be i32 or i64, got f32");
  CHECK_THROWS_WITH(
      kiln::random::uniform_int({2}, 0, std::int64_t{1} << 33, 1),
      Catch::StartsWith("[random.uniform_int] [0, 8589934592) is out of range for i32"));
  CHECK_THROWS_WITH(kiln::random::uniform_int({-1}, 0, 5, 1),
                    Catch::StartsWith("[random.uniform_int] negative dimension"));
}

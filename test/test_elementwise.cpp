#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>

#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_impl.hpp"
#include "elementwise_op_table.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/parallel.hpp"
#include "primitives/primitive.hpp"
#include "simd_test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();
constexpr std::int32_t i32_min = std::numeric_limits<std::int32_t>::min();
constexpr std::int32_t i32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

const std::vector<DType>& all_dtypes = kiln::test::all_dtypes();
const std::vector<double> bool_inputs = {0, 1, 1, 0};

using kiln::test::accepts;
using kiln::test::argument_dtype;
using kiln::test::as_dtype;
using kiln::test::elementwise_ops;
using kiln::test::ElementwiseOp;
using kiln::test::make;
using kiln::test::values_of;

bool close(double got, double want, DType dtype) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  // The narrow floats compute in f32 and round once: one unit in their last place at most.
  const double rtol = dtype == DType::f32                                      ? 4e-6
                      : dtype == DType::f64                                    ? 1e-13
                      : dtype == DType::f16                                    ? 1e-3
                      : dtype == DType::bf16                                   ? 8e-3
                      : dtype == DType::f8e4m3fn || dtype == DType::f8e4m3fnuz ? 0.125
                      : dtype == DType::f8e5m2 || dtype == DType::f8e5m2fnuz   ? 0.25
                      : dtype == DType::f4e2m1fn                               ? 0.5
                                                                               : 0.0;
  return std::abs(got - want) <= rtol * (1.0 + std::abs(want));
}

void check_values(const Tensor& got, const std::vector<double>& want, DType dtype,
                  const std::string& what) {
  INFO(what << " dtype " << kiln::dtype_name(dtype));
  REQUIRE(got.dtype() == dtype);
  const auto values = values_of(got);
  REQUIRE(values.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", want " << want[i]);
    CHECK(close(values[i], want[i], dtype));
  }
}

#define CHECK_KILN_ERROR(expr, prefix)                               \
  do {                                                               \
    CHECK_THROWS_AS(expr, kiln::Error);                              \
    CHECK_THROWS_WITH(expr, Catch::StartsWith(std::string(prefix))); \
  } while (false)

/// Every table row of `arity` (elementwise_op_table.hpp) against its reference on the
/// reference inputs of every dtype it accepts, and the error naming it in every other dtype.
void check_table_values(int arity) {
  int rows = 0;
  for (const ElementwiseOp& op : elementwise_ops()) {
    if (op.op.arity() != arity) continue;
    ++rows;
    for (DType dtype : all_dtypes) {
      const std::string what = fmt::format("{} {}", op.name, kiln::dtype_name(dtype));
      if (!accepts(op, dtype)) {
        INFO(what);
        std::vector<Tensor> ones;
        for (int k = 0; k < arity; ++k)
          ones.push_back(make({1}, argument_dtype(op, static_cast<std::size_t>(k), dtype)));
        CHECK_KILN_ERROR(op.op(ones), fmt::format("[{}]", op.name));
        continue;
      }
      for (const auto& inputs : kiln::test::reference_inputs(op, dtype)) {
        std::vector<Tensor> args;
        for (std::size_t k = 0; k < inputs.size(); ++k)
          args.push_back(make(inputs[k], argument_dtype(op, k, dtype)));
        std::vector<double> want;
        for (std::size_t i = 0; i < inputs[0].size(); ++i) {
          std::vector<double> xs;
          for (const auto& values : inputs) xs.push_back(values[i]);
          want.push_back(kiln::test::expected(op, xs, dtype));
        }
        check_values(op.op(args), want, op.bool_out ? DType::boolean : dtype, what);
      }
    }
  }
  CHECK(rows > 0);
}

}  // namespace

TEST_CASE("unary ops match a double reference for every accepted dtype", "[elementwise]") {
  check_table_values(1);
}

TEST_CASE("unary special values", "[elementwise]") {
  SECTION("neg flips the sign of zeros: eager, traced and fused, vector body and tail") {
    // On the instruction set KILN_SIMD selects (scripts/test.sh runs this once per set).
    for (DType d : {kiln::f32, kiln::f64})
      for (std::size_t n : {1, 16, 67}) {
        INFO(kiln::dtype_name(d) << " n = " << n);
        std::vector<double> zeros(n, 0.0);
        for (std::size_t i = 1; i < n; i += 2) zeros[i] = -0.0;
        const Tensor x = make(zeros, d);
        const auto plain = kiln::function([](const Tensor& t) { return kiln::neg(t); });
        const auto fused =
            kiln::function([](const Tensor& t) { return kiln::neg(kiln::abs(t) * 2.0); });
        REQUIRE(fused.get_concrete_function(x).graph().to_string().find("fused[") !=
                std::string::npos);
        const auto eager_v = values_of(kiln::neg(x)), traced_v = values_of(plain(x));
        const auto fused_v = values_of(fused(x));
        for (std::size_t i = 0; i < n; ++i) {
          INFO("element " << i << " of " << zeros[i]);
          CHECK((eager_v[i] == 0 && std::signbit(eager_v[i]) != std::signbit(zeros[i])));
          CHECK((traced_v[i] == 0 && std::signbit(traced_v[i]) != std::signbit(zeros[i])));
          CHECK((fused_v[i] == 0 && std::signbit(fused_v[i])));
        }
      }
  }
  SECTION("integer neg, abs and square wrap") {
    auto a = kiln::tensor<std::int32_t>({i32_min, i32_max, -5});
    CHECK(kiln::neg(a).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{i32_min, -i32_max, 5});
    CHECK(kiln::abs(a).to_vector<std::int32_t>() == std::vector<std::int32_t>{i32_min, i32_max, 5});
    CHECK(kiln::square(a).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 25});
    auto b = kiln::tensor<std::int64_t>({i64_min, i64_max});
    CHECK(kiln::neg(b).to_vector<std::int64_t>() == std::vector<std::int64_t>{i64_min, -i64_max});
    CHECK(kiln::abs(b).to_vector<std::int64_t>() == std::vector<std::int64_t>{i64_min, i64_max});
  }
  SECTION("sigmoid and softplus saturate without overflow") {
    for (DType d : {kiln::f32, kiln::f64}) {
      const auto s = values_of(kiln::sigmoid(make({-1e30, -1000, 1000, 1e30}, d)));
      CHECK(s == std::vector<double>{0, 0, 1, 1});
      const auto p = values_of(kiln::softplus(make({-1e30, -1000, 1000, 1e30}, d)));
      CHECK(p[0] == 0);
      CHECK(p[1] == 0);
      CHECK(p[2] == 1000);
      CHECK(p[3] == as_dtype(1e30, d));
      CHECK(values_of(kiln::tanh(make({-1e4, 1e4}, d))) == std::vector<double>{-1, 1});
    }
  }
  SECTION("round is half to even and keeps large values") {
    const std::vector<double> in = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5000001, 8388609.0};
    const std::vector<double> want = {0, 2, 2, -0.0, -2, -2, 4, 8388609.0};
    check_values(kiln::round(make(in, kiln::f32)), want, kiln::f32, "round f32");
    check_values(kiln::round(make({4503599627370497.0, -0.5}, kiln::f64)), {4503599627370497.0, 0},
                 kiln::f64, "round f64");
  }
}

TEST_CASE("activations take their parameters", "[elementwise]") {
  // The table checks the default forms; these are the other settings, in f64 against double
  // formulas, and their gradients against central differences.
  const std::vector<double> xs = {-3.3, -1.2, -0.4, 0.3, 0.9, 2.5};  // none on a kink
  const Tensor x = make(xs, kiln::f64);
  struct Form {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    double (*reference)(double);
  };
  const std::vector<Form> forms = {
      {"gelu tanh", [](const Tensor& t) { return kiln::gelu(t, true); },
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       }},
      {"elu alpha 0.5", [](const Tensor& t) { return kiln::elu(t, 0.5); },
       [](double v) { return v > 0 ? v : 0.5 * std::expm1(v); }},
      {"leaky_relu alpha 0.3", [](const Tensor& t) { return kiln::leaky_relu(t, 0.3); },
       [](double v) { return v > 0 ? v : 0.3 * v; }},
      {"hard_sigmoid 1/6 0.5", [](const Tensor& t) { return kiln::hard_sigmoid(t, 1.0 / 6, 0.5); },
       [](double v) { return std::clamp(v / 6 + 0.5, 0.0, 1.0); }},
  };
  for (const Form& f : forms) {
    INFO(f.name);
    std::vector<double> want;
    for (double v : xs) want.push_back(f.reference(v));
    check_values(f.op(x), want, kiln::f64, f.name);
    kiln::Variable v(x, "x");
    kiln::GradientTape tape;
    const Tensor grad =
        tape.gradient(kiln::sum(f.op(v.value())), std::vector<kiln::Variable>{v})[0];
    const auto g = values_of(grad);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double h = 1e-6;
      const double fd = (f.reference(xs[i] + h) - f.reference(xs[i] - h)) / (2 * h);
      INFO("x = " << xs[i]);
      CHECK(std::abs(g[i] - fd) < 1e-6 * (1 + std::abs(fd)));
    }
  }
}

TEST_CASE("cast converts between all dtypes", "[elementwise]") {
  SECTION("small values round-trip through every pair") {
    for (DType from : all_dtypes)
      for (DType to : all_dtypes) {
        // Values both dtypes hold: i2 holds -2 .. 1, u2 and f4e2m1fn 0 .. 3 of these.
        const auto holds = [&](DType d, double v) {
          return (d != DType::i2 || v <= 1) && ((d != DType::u2 && d != DType::f4e2m1fn) || v <= 3);
        };
        std::vector<double> in;
        for (double v : from == DType::boolean ? bool_inputs : std::vector<double>{0, 1, 2, 3, 7})
          if (holds(from, v) && holds(to, v)) in.push_back(v);
        std::vector<double> want;
        for (double v : in) want.push_back(as_dtype(v, to));
        check_values(kiln::cast(make(in, from), to), want, to,
                     "cast from " + std::string(kiln::dtype_name(from)));
      }
  }
  SECTION("float to integer truncates, maps NaN to 0 and saturates") {
    const std::vector<double> in = {2.7,   -2.7,     not_a_number, 1e10,
                                    -1e10, infinity, -infinity,    -0.0};
    const std::vector<double> want32 = {2, -2, 0, i32_max, i32_min, i32_max, i32_min, 0};
    check_values(kiln::cast(make(in, kiln::f32), kiln::i32), want32, kiln::i32, "f32->i32");
    check_values(kiln::cast(make(in, kiln::f64), kiln::i32), want32, kiln::i32, "f64->i32");
    const auto i64 =
        kiln::cast(make({1e19, -1e19, not_a_number, 9.2e18, -2.5}, kiln::f64), kiln::i64)
            .to_vector<std::int64_t>();
    CHECK(i64 == std::vector<std::int64_t>{i64_max, i64_min, 0, 9200000000000000000, -2});
    CHECK(kiln::cast(kiln::scalar(3e9F), kiln::i64).item<std::int64_t>() == 3000000000);
  }
  SECTION("anything to bool is != 0; integer narrowing wraps") {
    CHECK(kiln::cast(make({0.5, not_a_number, -0.0, 0.0}, kiln::f32), kiln::boolean)
              .to_vector<bool>() == std::vector<bool>{true, true, false, false});
    CHECK(kiln::cast(make({-3, 0}, kiln::i64), kiln::boolean).to_vector<bool>() ==
          std::vector<bool>{true, false});
    CHECK(kiln::cast(kiln::tensor<std::int64_t>({(std::int64_t{1} << 32) + 5, -1}), kiln::i32)
              .to_vector<std::int32_t>() == std::vector<std::int32_t>{5, -1});
  }
  SECTION("same dtype returns the input; unknown dtypes are an error") {
    const auto x = make({1, 2}, kiln::f32);
    CHECK(kiln::cast(x, kiln::f32).impl() == x.impl());
    CHECK_KILN_ERROR(kiln::cast(x, static_cast<DType>(99)), "[cast] unknown dtype");
    CHECK_KILN_ERROR(kiln::cast(Tensor{}, kiln::f32), "[cast] argument 0 is an undefined");
  }
}

TEST_CASE("binary ops match a double reference for every accepted dtype", "[elementwise]") {
  check_table_values(2);
}

TEST_CASE("where matches a double reference for every dtype", "[elementwise]") {
  check_table_values(3);
}

TEST_CASE("every elementwise primitive has one row in the op table", "[elementwise]") {
  // cast takes a dtype, not only tensors: its checks are the cast tests of this file.
  using namespace kiln::detail;
  for (std::size_t p = 0; p < num_primitives; ++p) {
    const Prim prim = static_cast<Prim>(p);
    if (!is_elementwise(prim) || prim == Prim::cast) continue;
    INFO("primitive " << name(prim));
    const auto rows = std::count_if(elementwise_ops().begin(), elementwise_ops().end(),
                                    [&](const ElementwiseOp& op) { return op.name == name(prim); });
    CHECK(rows == 1);
    for (const ElementwiseOp& op : elementwise_ops())
      if (op.name == name(prim)) CHECK(op.op.arity() == info(prim).arity);
  }
  for (const ElementwiseOp& op : elementwise_ops()) {
    INFO("row " << op.name);
    CHECK(std::count_if(elementwise_ops().begin(), elementwise_ops().end(),
                        [&](const ElementwiseOp& o) { return std::string(o.name) == op.name; }) ==
          1);
  }
}

TEST_CASE("floating pow follows std::pow on special values", "[elementwise]") {
  const std::vector<double> specials = {0, -0.0,     1,         -1,           2,   -2, 0.5,
                                        3, infinity, -infinity, not_a_number, -0.5};
  std::vector<double> a, b;
  for (double x : specials)
    for (double y : specials) {
      a.push_back(x);
      b.push_back(y);
    }
  for (DType d : {kiln::f32, kiln::f64}) {
    std::vector<double> want;
    for (std::size_t i = 0; i < a.size(); ++i) want.push_back(as_dtype(std::pow(a[i], b[i]), d));
    check_values(kiln::pow(make(a, d), make(b, d)), want, d, "pow specials");
  }
}

TEST_CASE("integer division, mod and pow edge cases", "[elementwise]") {
  auto i32s = [](std::vector<std::int32_t> v) { return kiln::tensor(v); };
  const auto a = i32s({i32_min, i32_min, 7, -7, i32_max, 5});
  const auto b = i32s({-1, 0, 0, 0, -1, i32_min});
  CHECK(kiln::div(a, b).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{i32_min, 0, 0, 0, -i32_max, -1});
  CHECK(kiln::mod(a, b).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 0, 0, 0, 0, i32_min + 5});
  const auto base = i32s({2, 3, -1, -1, 1, 0, 2, 0, -2});
  const auto expo = i32s({31, 40, -3, -4, -7, -1, -1, 0, 3});
  CHECK(kiln::pow(base, expo).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{i32_min, 689956897, -1, 1, 1, 0, 0, 1, -8});
  const auto big = kiln::tensor<std::int64_t>({i64_max, i64_min, i64_min});
  const auto small = kiln::tensor<std::int64_t>({1, -1, 1});
  CHECK(kiln::add(big, small).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{i64_min, i64_max, i64_min + 1});
  CHECK(kiln::sub(big, small).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{i64_max - 1, i64_min + 1, i64_max});
  CHECK(kiln::mul(big, kiln::scalar<std::int64_t>(2)).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{-2, 0, 0});
  CHECK(kiln::div(big, small).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{i64_max, i64_min, i64_min});
  CHECK(kiln::pow(kiln::scalar<std::int64_t>(3), kiln::scalar<std::int64_t>(40))
            .item<std::int64_t>() == static_cast<std::int64_t>(12157665459056928801ULL));
}

TEST_CASE("binary ops broadcast like NumPy", "[elementwise]") {
  SECTION("[3,1] with [1,4]") {
    for (DType d : {kiln::f32, kiln::f64, kiln::i32, kiln::i64}) {
      const auto col = make({1, 2, 3}, d, Shape{3, 1});
      const auto row = make({10, 20, 30, 40}, d, Shape{1, 4});
      const auto sum = kiln::add(col, row);
      REQUIRE(sum.shape() == Shape{3, 4});
      std::vector<double> want;
      for (int i = 1; i <= 3; ++i)
        for (int j = 1; j <= 4; ++j) want.push_back(i + 10 * j);
      check_values(sum, want, d, "add broadcast");
      std::vector<double> less;
      for (int i = 1; i <= 3; ++i)
        for (int j = 1; j <= 4; ++j) less.push_back(10.0 * j - i < i * 10.0 ? 1 : 0);
      check_values(kiln::less(kiln::sub(row, col), kiln::mul(col, make({10}, d))), less,
                   kiln::boolean, "less broadcast");
    }
  }
  SECTION("rank 0 with [2,3] on either side") {
    const auto m = make({1, 2, 3, 4, 5, 6}, kiln::f64, Shape{2, 3});
    const auto s = kiln::scalar(2.0);
    check_values(kiln::sub(s, m), {1, 0, -1, -2, -3, -4}, kiln::f64, "s - m");
    check_values(kiln::div(m, s), {0.5, 1, 1.5, 2, 2.5, 3}, kiln::f64, "m / s");
    CHECK(kiln::add(s, s).shape() == Shape{});
    CHECK(kiln::add(s, s).item<double>() == 4.0);
  }
  SECTION("C++ scalars through operators take the tensor's dtype") {
    const auto x = kiln::tensor<float>({1, 2, 3, 4});
    check_values(x + 1.F, {2, 3, 4, 5}, kiln::f32, "x + 1");
    check_values(2 * x, {2, 4, 6, 8}, kiln::f32, "2 * x");
    check_values(1.0 - x / 2, {0.5, 0, -0.5, -1}, kiln::f32, "1 - x / 2");
    check_values(-x, {-1, -2, -3, -4}, kiln::f32, "-x");
    const auto n = kiln::tensor<std::int32_t>({-7, -1, 0, 7});
    check_values(n % 3, {2, 2, 0, 1}, kiln::i32, "n % 3");
    check_values(n / 2, {-4, -1, 0, 3}, kiln::i32, "n / 2");
    check_values(n < 0, {1, 1, 0, 0}, kiln::boolean, "n < 0");
    check_values(n >= 0, {0, 0, 1, 1}, kiln::boolean, "n >= 0");
    check_values(n == 7, {0, 0, 0, 1}, kiln::boolean, "n == 7");
    check_values(n != 7, {1, 1, 1, 0}, kiln::boolean, "n != 7");
    check_values(n > -1, {0, 0, 1, 1}, kiln::boolean, "n > -1");
    check_values(n <= -1, {1, 1, 0, 0}, kiln::boolean, "n <= -1");
    check_values(kiln::maximum(n, 0), {0, 0, 0, 7}, kiln::i32, "maximum(n, 0)");
    check_values(kiln::pow(2, n), {0, 0, 1, 128}, kiln::i32, "pow(2, n)");
    const auto t = kiln::tensor<bool>({true, true, false, false});
    const auto u = kiln::tensor<bool>({true, false, true, false});
    check_values(t && u, {1, 0, 0, 0}, kiln::boolean, "&&");
    check_values(t || u, {1, 1, 1, 0}, kiln::boolean, "||");
    check_values(!t, {0, 0, 1, 1}, kiln::boolean, "!");
    check_values(!make({0.0, -0.0, not_a_number, 2}, kiln::f32), {1, 1, 0, 0}, kiln::boolean,
                 "! f32");
  }
}

TEST_CASE("where and clip", "[elementwise]") {
  SECTION("where broadcasts condition, a and b for every dtype") {
    const auto cond = kiln::tensor<bool>({true, false, true}, Shape{3, 1});
    for (DType d : all_dtypes) {
      const auto a = make({1, 0, 1, 1}, d, Shape{1, 4});
      const auto b = make({0}, d);
      std::vector<double> want;
      for (int i = 0; i < 3; ++i)
        for (double v : {1.0, 0.0, 1.0, 1.0}) want.push_back(i == 1 ? 0.0 : v);
      const auto r = kiln::where(cond, a, b);
      CHECK(r.shape() == Shape{3, 4});
      check_values(r, want, d, "where");
    }
    check_values(kiln::where(kiln::scalar(false), make({1, 2}, kiln::i64), make({3, 4}, kiln::i64)),
                 {3, 4}, kiln::i64, "where scalar cond");
  }
  SECTION("clip") {
    check_values(kiln::clip(make({-2, 0.5, 3, not_a_number}, kiln::f32), -1, 1),
                 {-1, 0.5, 1, not_a_number}, kiln::f32, "clip f32");
    check_values(kiln::clip(make({-2, 0, 1, 3}, kiln::i32), -0.5, 2.5), {0, 0, 1, 2}, kiln::i32,
                 "clip i32 rounds the bounds inward");
    check_values(kiln::clip(make({-5, 5}, kiln::i64), -1e300, 1e300), {-5, 5}, kiln::i64,
                 "clip i64 with huge bounds");
  }
}

TEST_CASE("zero-size, non-contiguous and long inputs", "[elementwise]") {
  SECTION("zero-size") {
    const auto empty = kiln::zeros({0, 3});
    CHECK(kiln::add(empty, kiln::ones({1, 3})).shape() == Shape{0, 3});
    CHECK(kiln::exp(empty).shape() == Shape{0, 3});
    CHECK(kiln::cast(empty, kiln::i32).shape() == Shape{0, 3});
    CHECK(kiln::where(kiln::zeros({0, 1}, kiln::boolean), kiln::ones({3}), kiln::zeros({3}))
              .shape() == Shape{0, 3});
    CHECK_KILN_ERROR(kiln::add(empty, kiln::ones({2})), "[add] shapes [0,3] and [2]");
  }
  SECTION("transposed, strided and broadcast views") {
    std::vector<double> base_values(12);
    for (int i = 0; i < 12; ++i) base_values[static_cast<std::size_t>(i)] = i - 4;
    for (DType d : {kiln::f32, kiln::f64, kiln::i32, kiln::i64}) {
      const auto base = make(base_values, d, Shape{3, 4});
      const auto t = kiln::detail::make_view(base, Shape{4, 3}, Shape{1, 4}, 0);
      const auto col2 = kiln::detail::make_view(base, Shape{3}, Shape{4}, 2);  // base[:, 2]
      std::vector<double> want_t, want_sum;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j) {
          want_t.push_back(std::fabs(j * 4 + i - 4));
          want_sum.push_back((j * 4 + i - 4) + (j * 4 + 2 - 4));
        }
      check_values(kiln::abs(t), want_t, d, "abs transposed");
      check_values(kiln::add(t, col2), want_sum, d, "transposed + strided column");
      const auto bcast = kiln::detail::make_view(base, Shape{2, 4}, Shape{0, 1}, 4);  // row 1
      check_values(kiln::neg(bcast), {-0.0, -1, -2, -3, -0.0, -1, -2, -3}, d, "neg broadcast");
      check_values(
          kiln::cast(t, kiln::f64),
          [&] {
            std::vector<double> v;
            for (int i = 0; i < 4; ++i)
              for (int j = 0; j < 3; ++j) v.push_back(j * 4 + i - 4);
            return v;
          }(),
          kiln::f64, "cast transposed");
      const auto flags = kiln::tensor<bool>({true, false});
      const auto all_true = kiln::detail::make_view(flags, Shape{4, 3}, Shape{0, 0}, 0);
      const auto all_false = kiln::detail::make_view(flags, Shape{4, 3}, Shape{0, 0}, 1);
      check_values(kiln::where(all_true, kiln::abs(t), t), want_t, d, "where stride-0 true");
      std::vector<double> neg_t;
      for (double v : want_t) neg_t.push_back(-v);
      check_values(kiln::where(all_false, t, kiln::neg(kiln::abs(t))), neg_t, d,
                   "where stride-0 false");
    }
  }
  SECTION("sizes around SIMD widths and the parallel threshold") {
    for (std::int64_t n : {1, 3, 7, 17, 1000003}) {
      INFO("n = " << n);
      const auto a = kiln::arange(0.0, static_cast<double>(n), 1.0, kiln::f32);
      const auto b = kiln::full({n}, 0.5);
      const auto sum = kiln::add(a, b).to_vector<float>();
      const auto sig = kiln::sigmoid(kiln::sub(a, static_cast<float>(n / 2))).to_vector<float>();
      const auto ints = kiln::mul(kiln::arange(n, kiln::i64), kiln::scalar<std::int64_t>(3))
                            .to_vector<std::int64_t>();
      bool sum_ok = true, sig_ok = true, ints_ok = true;
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        sum_ok = sum_ok && sum[k] == static_cast<float>(i) + 0.5F;
        const double x = static_cast<double>(static_cast<float>(i) - static_cast<float>(n / 2));
        sig_ok = sig_ok && std::abs(sig[k] - 1.0 / (1.0 + std::exp(-x))) < 1e-6;
        ints_ok = ints_ok && ints[k] == 3 * i;
      }
      CHECK(sum_ok);
      CHECK(sig_ok);
      CHECK(ints_ok);
    }
  }
  SECTION("large transposed input goes through the gather path on both threads") {
    const std::int64_t rows = 1031, cols = 1029;
    const auto base = kiln::arange(0.0, static_cast<double>(rows * cols), 1.0, kiln::f64);
    const auto m = kiln::detail::make_view(base, Shape{cols, rows}, Shape{1, cols}, 0);
    const auto r = kiln::sub(m, kiln::scalar(1.0)).to_vector<double>();
    bool ok = true;
    for (std::int64_t i = 0; i < cols; ++i)
      for (std::int64_t j = 0; j < rows; ++j)
        ok = ok &&
             r[static_cast<std::size_t>(i * rows + j)] == static_cast<double>(j * cols + i - 1);
    CHECK(ok);
  }
}

TEST_CASE("every instruction set's row kernels agree", "[elementwise]") {
  using namespace kiln::detail;
  const auto tables = kiln::test::row_tables_of_this_cpu();
  std::vector<double> in;
  for (int i = 0; i < 37; ++i) in.push_back(-9.0 + 0.5 * i);
  const auto n = static_cast<std::int64_t>(in.size());
  std::vector<float> out_ref(in.size()), out(in.size());
  std::vector<float> in_f(in.begin(), in.end());
  for (std::size_t p = 0; p < unary_row_index(kiln::detail::Prim::logical_not); ++p) {
    tables[0]->unary[p][dtype_index(kiln::f32)](in_f.data(), 1, out_ref.data(), n);
    for (const auto* table : tables) {
      INFO(table->isa_name << " unary primitive " << p);
      table->unary[p][dtype_index(kiln::f32)](in_f.data(), 1, out.data(), n);
      for (std::size_t i = 0; i < in.size(); ++i) CHECK(close(out[i], out_ref[i], kiln::f32));
    }
  }
}

namespace {

/// Every `step`th float from +0 up to the bit pattern `below`, each with both signs, then both
/// signs of the normal powers of two up to 2^6: the inputs of the ulp sweeps below.
std::vector<float> float_sweep(std::uint32_t below, std::uint32_t step) {
  std::vector<float> in;
  for (std::uint32_t bits = 0; bits < below; bits += step) {
    float v = 0;
    std::memcpy(&v, &bits, sizeof v);
    in.push_back(v);
    in.push_back(-v);
  }
  for (int e = -126; e < 7; ++e) {
    in.push_back(std::ldexp(1.f, e));
    in.push_back(-std::ldexp(1.f, e));
  }
  return in;
}

/// |got - want| in floats' spacing at want's magnitude; below the normal range the unit is
/// `tiny` (the smallest normal float where a result may be flushed to zero, the subnormals'
/// spacing where it may not).
double ulps_from(float got, double want, float tiny) {
  const float mag = std::abs(static_cast<float>(want));
  const double ulp = mag < std::numeric_limits<float>::min()
                         ? tiny
                         : std::nextafter(mag, std::numeric_limits<float>::infinity()) - mag;
  return std::abs(static_cast<double>(got) - want) / ulp;
}

}  // namespace

TEST_CASE("f32 sigmoid and tanh stay within a few ulp of double on every instruction set",
          "[elementwise]") {
  using namespace kiln::detail;
  const auto tables = kiln::test::row_tables_of_this_cpu();
  // Every 4099th float in [-100, 100] (about a million, reaching down to 1e-38 in magnitude).
  const std::vector<float> in = float_sweep(0x42c80000u, 4099);
  const auto n = static_cast<std::int64_t>(in.size());
  std::vector<float> out(in.size());
  struct Case {
    Prim prim;
    double (*reference)(double);
    double max_ulp;
  };
  const Case cases[] = {
      {Prim::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 4},
      {Prim::tanh, [](double x) { return std::tanh(x); }, 6},
  };
  for (const auto* table : tables) {
    for (const Case& c : cases) {
      INFO(table->isa_name << " " << name(c.prim));
      table->unary[unary_row_index(c.prim)][dtype_index(kiln::f32)](in.data(), 1, out.data(), n);
      double worst = 0;
      float worst_at = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        // A result below the normal range may be flushed to zero.
        const double err = ulps_from(out[i], c.reference(in[i]), std::numeric_limits<float>::min());
        if (err > worst) {
          worst = err;
          worst_at = in[i];
        }
      }
      INFO("worst " << worst << " ulp at x = " << worst_at);
      CHECK(worst <= c.max_ulp);
    }
  }
}

TEST_CASE(
    "f32 exp stays within 1 ulp of double with kiln's exp (AVX-512 down to its subnormal "
    "results, AVX2), and within 1.5 with xsimd's (SSE2)",
    "[elementwise]") {
  using namespace kiln::detail;
  const auto tables = kiln::test::row_tables_of_this_cpu();
  // Every 1021st float in [-105, 105] (about two million) and the range's edges (overflow from
  // ln(FLT_MAX) = 88.72, subnormal results below -87.34, AVX2's 0 below -87.68, 0 below
  // -103.97).
  std::vector<float> in = float_sweep(0x42d20000u, 1021);
  for (const float edge : {88.72f,   88.7228f, 88.72284f, 88.7229f, 88.73f,   89.0f,   89.5f,
                           -87.33f,  -87.34f,  -87.67f,   -87.68f,  -87.69f,  -88.0f,  -100.0f,
                           -103.27f, -103.28f, -103.9f,   -103.97f, -103.98f, -104.0f, -104.5f})
    in.push_back(edge);
  const auto n = static_cast<std::int64_t>(in.size());
  const std::size_t exp_row = unary_row_index(Prim::exp);
  std::vector<std::vector<float>> outs;
  std::vector<std::string_view> isas;
  for (const auto* table : tables) {
    const std::string_view isa = table->isa_name;
    INFO(isa);
    std::vector<float>& out = outs.emplace_back(in.size());
    isas.push_back(isa);
    table->unary[exp_row][dtype_index(kiln::f32)](in.data(), 1, out.data(), n);
    // AVX-512 runs exp_f32_avx512, which keeps subnormal results; AVX2 runs exp_f32_avx2, which
    // gives 0 below -87.68, and SSE2 xsimd's, 0 below -87.34: there the unit is the smallest
    // normal float. Both but AVX-512's need ExpOp's test near overflow.
    const bool keeps_subnormals = isa == "avx512";
    const bool kiln_exp = keeps_subnormals || isa == "avx2";
    const float tiny = keeps_subnormals ? std::numeric_limits<float>::denorm_min()
                                        : std::numeric_limits<float>::min();
    double worst = 0;
    float worst_at = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double want = std::exp(static_cast<double>(in[i]));
      if (want > std::numeric_limits<float>::max()) {  // rounds to +inf (above the halfway
        INFO("x = " << in[i]);                         // point to the next power of two)
        CHECK((out[i] == std::numeric_limits<float>::infinity() ||
               out[i] == std::numeric_limits<float>::max()));
        continue;
      }
      const double err = ulps_from(out[i], want, tiny);
      // Where 2^n in the exponent bits would overflow early, kiln computes exp(x - h) e^h.
      if (!keeps_subnormals && in[i] >= 88.37f) {
        INFO("near overflow: x = " << in[i] << ", " << out[i] << " for " << want);
        CHECK(err <= 3.0);
        continue;
      }
      if (err > worst) {
        worst = err;
        worst_at = in[i];
      }
    }
    INFO("worst " << worst << " ulp at x = " << worst_at);
    CHECK(worst <= (kiln_exp ? 1.0 : 1.5));  // xsimd's: 1.43 (AVX2) and 1.47 (SSE2) measured
  }
  // kiln's two exps share their steps up to 2^n: the same bits wherever exp(x) is a normal
  // float below the near-overflow range.
  const auto avx512 = std::find(isas.begin(), isas.end(), "avx512");
  const auto avx2 = std::find(isas.begin(), isas.end(), "avx2");
  if (avx512 != isas.end() && avx2 != isas.end()) {
    const auto& a = outs[static_cast<std::size_t>(avx512 - isas.begin())];
    const auto& b = outs[static_cast<std::size_t>(avx2 - isas.begin())];
    std::size_t compared = 0, differ = 0;
    float first_differ = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (!(in[i] < 88.37f) || !(a[i] >= std::numeric_limits<float>::min())) continue;
      ++compared;
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0) first_differ = in[i];
    }
    INFO(differ << " of " << compared << " differ, the first at x = " << first_differ);
    CHECK(compared > 1000000);
    CHECK(differ == 0);
  }
}

TEST_CASE("f64 exp stays finite up to the overflow point on every instruction set",
          "[elementwise]") {
  using namespace kiln::detail;
  // xsimd's exp gave +inf from 709.436 on (2^1024 does not fit the exponent bits).
  const std::vector<double> in = {
      709.0, 709.43, 709.436, 709.4362, 709.5,
      709.6, 709.7,  709.78,  709.7827, 709.7828,
      709.8, 710.0,  -1.0,    1000.0,   std::numeric_limits<double>::infinity()};
  std::vector<double> out(in.size());
  for (const auto* table : kiln::test::row_tables_of_this_cpu()) {
    table->unary[unary_row_index(Prim::exp)][dtype_index(kiln::f64)](
        in.data(), 1, out.data(), static_cast<std::int64_t>(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i) {
      INFO(table->isa_name << ": exp(" << in[i] << ") = " << out[i]);
      const long double want = std::exp(static_cast<long double>(in[i]));
      if (want > std::numeric_limits<double>::max()) {
        CHECK(out[i] == std::numeric_limits<double>::infinity());
        continue;
      }
      const double ulp =
          std::nextafter(static_cast<double>(want), std::numeric_limits<double>::infinity()) -
          static_cast<double>(want);
      CHECK(std::abs(static_cast<long double>(out[i]) - want) <= 3.0L * ulp);
    }
  }
}

TEST_CASE("parallel_for covers the range once, nests inline and rethrows", "[elementwise]") {
  using kiln::detail::parallel_for;
  const std::int64_t n = 1000;
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::atomic<int> nested_calls{0}, nested_split{0};  // workers count; Catch2 checks here
  parallel_for(n, 10, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
    parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) {
      if (b != 0 || e != 100) nested_split++;
      nested_calls++;
    });
  });
  CHECK(nested_split.load() == 0);
  bool once = true;
  for (auto& h : hits) once = once && h.load() == 1;
  CHECK(once);
  CHECK(nested_calls.load() >= 1);
  CHECK(nested_calls.load() <= kiln::detail::num_threads());
  CHECK_THROWS_AS(parallel_for(n, 1,
                               [](std::int64_t begin, std::int64_t) {
                                 if (begin == 0) throw std::runtime_error("chunk failed");
                               }),
                  std::runtime_error);
  std::int64_t calls = 0;
  parallel_for(5, 100, [&](std::int64_t begin, std::int64_t end) {
    calls++;
    CHECK((begin == 0 && end == 5));
  });
  CHECK(calls == 1);
  parallel_for(0, 1, [&](std::int64_t, std::int64_t) { calls++; });
  CHECK(calls == 1);
}

TEST_CASE("elementwise errors name the op", "[elementwise]") {
  const auto f = kiln::ones({2, 3});
  const auto d = kiln::ones({2, 3}, kiln::f64);
  const auto b = kiln::ones({2, 3}, kiln::boolean);
  const Tensor undefined;
  for (const ElementwiseOp& op : elementwise_ops()) {
    const std::string prefix = fmt::format("[{}]", op.name);
    const auto n = static_cast<std::size_t>(op.op.arity());
    // f32 [2,3] (i32 for integer ops; a ternary op's condition bool), and another dtype.
    const bool integer = !kiln::test::accepts(op, kiln::f32);
    const Tensor value = integer ? kiln::ones({2, 3}, kiln::i32) : f;
    const Tensor other = integer ? kiln::ones({2, 3}, kiln::i64) : d;
    std::vector<Tensor> args;
    for (std::size_t k = 0; k < n; ++k)
      args.push_back(argument_dtype(op, k, value.dtype()) == DType::boolean ? b : value);
    for (std::size_t k = 0; k < n; ++k) {
      auto with_undefined = args;
      with_undefined[k] = undefined;
      CHECK_KILN_ERROR(op.op(with_undefined),
                       fmt::format("{} argument {} is an undefined", prefix, k));
    }
    if (n < 2) continue;
    auto mixed = args;
    mixed.back() = other;
    CHECK_KILN_ERROR(op.op(mixed),
                     fmt::format("{} dtypes differ: {} vs {}", prefix,
                                 kiln::dtype_name(value.dtype()), kiln::dtype_name(other.dtype())));
    auto unbroadcastable = args;
    unbroadcastable.back() = kiln::ones({4}, value.dtype());
    CHECK_KILN_ERROR(op.op(unbroadcastable),
                     fmt::format("{} shapes [2,3] and [4] cannot be broadcast", prefix));
  }
  CHECK_KILN_ERROR(kiln::exp(kiln::ones({2}, kiln::i32)), "[exp] needs a floating-point dtype");
  CHECK_KILN_ERROR(kiln::neg(b), "[neg] needs a numeric dtype");
  CHECK_KILN_ERROR(kiln::bitwise_not(f), "[bitwise_not] needs an integer dtype, got f32");
  CHECK_KILN_ERROR(kiln::add(b, b), "[add] needs a numeric dtype");
  CHECK_KILN_ERROR(f + 1.0 + d, "[add] dtypes differ");
  CHECK_KILN_ERROR(kiln::where(f, f, f), "[where] condition must have dtype bool, got f32");
  CHECK_KILN_ERROR(kiln::where(b, f, d), "[where] dtypes differ: f32 vs f64");
  CHECK_KILN_ERROR(kiln::where(b, f, kiln::ones({4})), "[where] shapes [2,3] and [4]");
  CHECK_KILN_ERROR(kiln::where(undefined, f, f), "[where] argument 0 is an undefined");
  CHECK_KILN_ERROR(kiln::where(b, f, undefined), "[where] argument 2 is an undefined");
  CHECK_KILN_ERROR(kiln::clip(f, 2, 1), "[clip] needs lo <= hi");
  CHECK_KILN_ERROR(kiln::clip(f, not_a_number, 1), "[clip] needs lo <= hi");
  CHECK_KILN_ERROR(kiln::clip(b, 0, 1), "[clip] needs a numeric dtype");
  CHECK_KILN_ERROR(kiln::clip(undefined, 0, 1), "[clip] argument 0 is an undefined");
  CHECK_KILN_ERROR(kiln::detail::scalar_like(1.0, undefined), "[scalar_like] argument 0");
  CHECK_KILN_ERROR(undefined + 1, "[scalar_like] argument 0");
}

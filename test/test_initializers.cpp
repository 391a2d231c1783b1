// Initializers: values, statistics, fans, reproducibility, errors.
#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;
namespace init = kiln::init;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         kiln::all(kiln::equal(a, b)).item<bool>();
}

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Moments moments(const Tensor& t) {
  auto v = kiln::cast(t, kiln::f64).to_vector<double>();
  Moments m{0, 0, v.at(0), v.at(0)};
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size()));
  return m;
}

}  // namespace

TEST_CASE("constant initializers work for every dtype", "[init]") {
  CHECK(same(init::zeros()({2, 3}), kiln::zeros({2, 3})));
  CHECK(same(init::ones()({4}, kiln::i32), kiln::ones({4}, kiln::i32)));
  CHECK(same(init::constant(2.5)({2}, kiln::f64), kiln::full({2}, 2.5, kiln::f64)));
  CHECK(same(init::constant(1)({3}, kiln::boolean), kiln::full({3}, 1, kiln::boolean)));
  Tensor value = kiln::tensor({1.f, 2.f});
  CHECK(same(init::from_value(value)({2}), value));
  CHECK_THROWS_WITH(init::from_value(value)({3}),
                    "[init.from_value] the value is f32 [2]; the variable is f32 [3]");
  CHECK(init::glorot_uniform().name() == "glorot_uniform");
  CHECK_THROWS_WITH(init::constant(NAN), "[init.constant] value must be finite, got nan");
}

TEST_CASE("fans follow the Keras convention", "[init]") {
  auto fans = init::compute_fans({});
  CHECK((fans.fan_in == 1 && fans.fan_out == 1));
  fans = init::compute_fans({7});
  CHECK((fans.fan_in == 7 && fans.fan_out == 7));
  fans = init::compute_fans({20, 30});
  CHECK((fans.fan_in == 20 && fans.fan_out == 30));
  fans = init::compute_fans({3, 3, 16, 32});  // conv kernel: receptive field 9
  CHECK((fans.fan_in == 144 && fans.fan_out == 288));
}

TEST_CASE("random initializers have the documented statistics", "[init]") {
  const Shape shape{400, 300};
  SECTION("glorot_uniform stays within its limit and fills it") {
    const double limit = std::sqrt(6.0 / (400 + 300));
    auto m = moments(init::glorot_uniform(7)(shape));
    CHECK(m.max < limit);
    CHECK(m.min >= -limit);
    CHECK(m.max > 0.99 * limit);
    CHECK(m.min < -0.99 * limit);
    CHECK(std::abs(m.mean) < 0.01 * limit);
    CHECK(m.stddev == Approx(limit / std::sqrt(3.0)).epsilon(0.01));
  }
  SECTION("he_normal has stddev sqrt(2 / fan_in) after truncation") {
    const double stddev = std::sqrt(2.0 / 400);
    auto m = moments(init::he_normal(8)(shape, kiln::f64));
    CHECK(m.stddev == Approx(stddev).epsilon(0.02));
    CHECK(std::abs(m.mean) < 0.01 * stddev);
    const double bound = 2 * stddev / 0.87962566103423978;
    CHECK(m.max <= bound);
    CHECK(m.min >= -bound);
  }
  SECTION("random_normal, random_uniform and truncated_normal") {
    auto n = moments(init::random_normal(1.0, 2.0, 9)(shape));
    CHECK(n.mean == Approx(1.0).margin(0.02));
    CHECK(n.stddev == Approx(2.0).epsilon(0.02));
    auto u = moments(init::random_uniform(-3.0, 5.0, 10)(shape));
    CHECK(u.min >= -3.0);
    CHECK(u.max < 5.0);
    CHECK(u.mean == Approx(1.0).margin(0.03));
    auto t = moments(init::truncated_normal(0.0, 1.0, 11)(shape));
    CHECK(t.min >= -2.0);
    CHECK(t.max <= 2.0);
    CHECK(t.stddev == Approx(0.87962566103423978).epsilon(0.02));
  }
}

TEST_CASE("orthogonal gives orthonormal rows or columns", "[init]") {
  auto check_orthonormal = [](const Shape& shape, double gain) {
    Tensor q = init::orthogonal(gain, 3)(shape, kiln::f64);
    REQUIRE(q.shape() == shape);
    const std::int64_t cols = shape.back();
    const std::int64_t rows = shape.numel() / cols;
    Tensor m = kiln::reshape(q, {rows, cols});
    Tensor gram =
        rows >= cols ? kiln::matmul(kiln::transpose(m), m) : kiln::matmul(m, kiln::transpose(m));
    const std::int64_t n = std::min(rows, cols);
    Tensor expected = kiln::eye(n, -1, kiln::f64) * (gain * gain);
    CHECK(kiln::max(kiln::abs(gram - expected)).item<double>() < 1e-10);
  };
  check_orthonormal({64, 64}, 1.0);
  check_orthonormal({100, 20}, 1.0);
  check_orthonormal({20, 100}, 2.0);
  check_orthonormal({4, 5, 30}, 1.0);  // flattened to [20, 30]
  // f32 output is the same matrix rounded.
  Tensor q32 = init::orthogonal(1.0, 3)({32, 16});
  Tensor q64 = init::orthogonal(1.0, 3)({32, 16}, kiln::f64);
  CHECK(same(q32, kiln::cast(q64, kiln::f32)));
  CHECK_THROWS_WITH(init::orthogonal()({5}),
                    "[init.orthogonal] needs a shape of rank 2 or more, got [5]");
  CHECK(init::orthogonal()({0, 4}).shape() == Shape{0, 4});
}

TEST_CASE("initializers are reproducible", "[init]") {
  // The same seed gives the same values; another seed other values.
  CHECK(same(init::glorot_uniform(5)({10, 10}), init::glorot_uniform(5)({10, 10})));
  CHECK_FALSE(same(init::glorot_uniform(5)({10, 10}), init::glorot_uniform(6)({10, 10})));
  CHECK(same(init::orthogonal(1.0, 5)({8, 8}), init::orthogonal(1.0, 5)({8, 8})));

  // Unseeded initializers draw from the global stream: different per call, repeatable after
  // set_global_seed or clear_session.
  kiln::random::set_global_seed(123);
  CHECK(kiln::random::global_seed() == 123);
  auto he = init::he_normal();
  Tensor a = he({6, 6}), b = he({6, 6});
  CHECK_FALSE(same(a, b));
  kiln::random::set_global_seed(123);
  CHECK(same(he({6, 6}), a));
  CHECK(same(he({6, 6}), b));
  kiln::clear_session();
  CHECK(same(init::he_normal()({6, 6}), a));
  kiln::random::set_global_seed(0);
}

TEST_CASE("initializers reject bad dtypes and custom rules are checked", "[init]") {
  CHECK_THROWS_WITH(init::glorot_uniform()({2, 2}, kiln::i32),
                    "[init.glorot_uniform] dtype must be f32 or f64, got i32");
  CHECK_THROWS_WITH(init::he_normal()({2, 2}, kiln::boolean),
                    "[init.he_normal] dtype must be f32 or f64, got bool");
  CHECK_THROWS_WITH(init::zeros()({-1, 2}), "[init.zeros] negative dimension in shape [-1,2]");
  init::Initializer wrong("wrong", [](const Shape&, kiln::DType) { return kiln::zeros({1}); });
  CHECK_THROWS_WITH(wrong({2}), "[init.wrong] returned f32 [1] for a requested f32 [2]");
  CHECK_THROWS_WITH(init::Initializer("empty", nullptr),
                    "[init] initializer 'empty' has an empty rule");
}

TEST_CASE("initial values are computed eagerly while tracing", "[init]") {
  kiln::clear_session();
  auto f = kiln::function([](const Tensor& x) {
    Tensor w = init::glorot_uniform(1)({3});
    return x + w;
  });
  Tensor x = kiln::zeros({3});
  CHECK(same(f(x), init::glorot_uniform(1)({3})));
  // The initial value became one constant of the graph, not random ops.
  CHECK(f.get_concrete_function(x).graph().num_nodes() == 3);
}

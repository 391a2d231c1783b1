// Initializers: values, statistics, fans, reproducibility, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/kiln.hpp>

#include "kernels/linalg.hpp"

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

namespace {

/// The orthogonal initializer's value as a [rows, cols] f64 matrix (rows = product of all dims
/// but the last).
Tensor as_matrix(const Tensor& q) {
  const std::int64_t cols = q.shape().back();
  return kiln::reshape(kiln::cast(q, kiln::f64), {q.shape().numel() / cols, cols});
}

/// max |G - gain^2 I| for G = M^T M (rows >= cols) or M M^T (rows < cols), in f64.
double orthonormality_error(const Tensor& q, double gain) {
  const Tensor m = as_matrix(q);
  const std::int64_t rows = m.shape()[0], cols = m.shape()[1];
  const Tensor gram =
      rows >= cols ? kiln::matmul(kiln::transpose(m), m) : kiln::matmul(m, kiln::transpose(m));
  const Tensor expected = kiln::eye(std::min(rows, cols), -1, kiln::f64) * (gain * gain);
  return kiln::max(kiln::abs(gram - expected)).item<double>();
}

/// The draw the initializer factors: a standard normal [tall, narrow] matrix, read column-major
/// from random::normal's values (tall = max(rows, cols), narrow = min(rows, cols)), in f64.
Tensor normal_draw(std::int64_t rows, std::int64_t cols, std::uint64_t seed, kiln::DType dtype) {
  const std::int64_t tall = std::max(rows, cols), narrow = std::min(rows, cols);
  const Tensor draw = kiln::random::normal({tall * narrow}, 0.0, 1.0, seed, dtype);
  return kiln::transpose(kiln::reshape(kiln::cast(draw, kiln::f64), {narrow, tall}));
}

struct OrthogonalCase {
  Shape shape;
  double gain;
};

// Tall, wide, square, > 2-d (flattened to [20, 30] and [12, 2]), a single row and column.
const std::vector<OrthogonalCase> orthogonal_cases = {
    {{64, 64}, 1.0},  {{100, 20}, 1.0}, {{20, 100}, 2.0}, {{4, 5, 30}, 1.0},
    {{3, 4, 2}, 0.5}, {{1, 9}, 1.0},    {{9, 1}, 3.0},    {{1, 1}, 1.0},
};

struct DTypeCase {
  kiln::DType dtype;
  double tolerance;  // of Q^T Q = I (and of the checks below that are as exact)
};

const std::vector<DTypeCase> dtype_cases = {{kiln::f32, 1e-5}, {kiln::f64, 1e-12}};

}  // namespace

TEST_CASE("orthogonal gives orthonormal rows or columns", "[init]") {
  for (const auto& [dtype, tolerance] : dtype_cases)
    for (const auto& [shape, gain] : orthogonal_cases) {
      INFO(kiln::dtype_name(dtype) << " " << shape.to_string() << " gain " << gain);
      const Tensor q = init::orthogonal(gain, 3)(shape, dtype);
      REQUIRE(q.shape() == shape);
      REQUIRE(q.dtype() == dtype);
      CHECK(orthonormality_error(q, gain) < tolerance * gain * gain);
    }
  CHECK_THROWS_WITH(init::orthogonal()({5}),
                    "[init.orthogonal] needs a shape of rank 2 or more, got [5]");
  CHECK(init::orthogonal()({0, 4}).shape() == Shape{0, 4});
}

TEST_CASE("orthogonal is the Q factor of its normal draw with R's diagonal positive", "[init]") {
  // Q R = A with R upper triangular and diag(R) > 0 determines Q uniquely: the value is fixed by
  // the seed's draw (Keras's construction: Q's columns times the signs of R's diagonal).
  for (const auto& [dtype, tolerance] : dtype_cases)
    for (const auto& [shape, gain] : orthogonal_cases) {
      INFO(kiln::dtype_name(dtype) << " " << shape.to_string());
      const Tensor m = as_matrix(init::orthogonal(1.0, 11)(shape, dtype));
      const std::int64_t rows = m.shape()[0], cols = m.shape()[1];
      const Tensor q = rows >= cols ? m : kiln::transpose(m);  // [tall, narrow]
      const Tensor a = normal_draw(rows, cols, 11, dtype);
      const Tensor r = kiln::matmul(kiln::transpose(q), a);  // [narrow, narrow]
      const std::int64_t n = r.shape()[0];
      const std::vector<double> rv = r.to_vector<double>();
      double scale = 0, below = 0, smallest_diagonal = INFINITY;
      for (double x : rv) scale = std::max(scale, std::abs(x));
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          if (i == j) smallest_diagonal = std::min(smallest_diagonal, rv[i * n + j]);
          if (i > j) below = std::max(below, std::abs(rv[i * n + j]));
        }
      CHECK(smallest_diagonal > 0);
      CHECK(below < tolerance * scale);
      CHECK(kiln::max(kiln::abs(kiln::matmul(q, r) - a)).item<double>() < tolerance * scale);
    }
}

TEST_CASE("orthogonal of one row or one column is the normalized draw", "[init]") {
  for (const auto& [dtype, tolerance] : dtype_cases)
    for (const Shape& shape : {Shape{1, 7}, Shape{7, 1}}) {
      INFO(kiln::dtype_name(dtype) << " " << shape.to_string());
      const Tensor draw = kiln::cast(kiln::random::normal({7}, 0.0, 1.0, 4, dtype), kiln::f64);
      const Tensor expected = draw / kiln::sqrt(kiln::sum(draw * draw));
      const Tensor q =
          kiln::reshape(kiln::cast(init::orthogonal(1.0, 4)(shape, dtype), kiln::f64), {7});
      CHECK(kiln::max(kiln::abs(q - expected)).item<double>() < tolerance);
    }
}

TEST_CASE("orthogonal is reproducible, scales by its gain and computes in its dtype", "[init]") {
  for (const auto& [dtype, tolerance] : dtype_cases) {
    INFO(kiln::dtype_name(dtype));
    const Tensor q = init::orthogonal(1.0, 5)({24, 10}, dtype);
    CHECK(same(init::orthogonal(1.0, 5)({24, 10}, dtype), q));
    CHECK_FALSE(same(init::orthogonal(1.0, 6)({24, 10}, dtype), q));
    // gain * value, rounded once: exactly the unit value times the gain.
    CHECK(same(init::orthogonal(2.5, 5)({24, 10}, dtype), q * 2.5));
    CHECK(same(init::orthogonal(-1.0, 5)({24, 10}, dtype), -q));
  }
  // f32 is computed in f32 from the f64 draw rounded: the f64 matrix to f32 accuracy.
  const Tensor q32 = init::orthogonal(1.0, 3)({32, 16});
  const Tensor q64 = init::orthogonal(1.0, 3)({32, 16}, kiln::f64);
  CHECK(q32.dtype() == kiln::f32);
  CHECK(kiln::max(kiln::abs(kiln::cast(q32, kiln::f64) - q64)).item<double>() < 1e-5);
}

TEST_CASE("an LSTM(512)'s recurrent kernel is orthogonal", "[init]") {
  kiln::clear_session();
  kiln::nn::LSTM lstm(512);
  lstm(kiln::random::normal({1, 1, 3}, 0, 1, 7));
  const Tensor r = lstm.recurrent_kernel().value();
  REQUIRE(r.shape() == Shape{512, 2048});
  CHECK(orthonormality_error(r, 1.0) < 1e-5);
  CHECK(orthonormality_error(init::orthogonal(1.0, 8)({512, 2048}, kiln::f64), 1.0) < 1e-12);
  kiln::clear_session();
}

TEST_CASE("orthogonal's QR rejects rank-deficient matrices", "[init]") {
  // Column 1 repeats column 0; column-major 4 x 2 (f64) and 3 x 2 with a zero column (f32).
  std::vector<double> repeated = {1, 2, 3, 4, 1, 2, 3, 4};
  CHECK_THROWS_WITH(kiln::detail::qr_orthonormal("init.orthogonal", repeated.data(), 4, 2),
                    "[init.orthogonal] the random matrix is rank deficient (column 1)");
  std::vector<float> zero = {0, 0, 0, 1, 2, 3};
  CHECK_THROWS_WITH(kiln::detail::qr_orthonormal("init.orthogonal", zero.data(), 3, 2),
                    "[init.orthogonal] the random matrix is rank deficient (column 0)");
  std::vector<double> wide(6, 1.0);
  CHECK_THROWS_WITH(kiln::detail::qr_orthonormal("init.orthogonal", wide.data(), 2, 3),
                    Catch::Contains("QR of a 2 x 3 matrix is not supported"));
  // A well-conditioned one is factored, with R's diagonal positive: [[-2, 0], [0, 3]] -> -I...
  std::vector<double> diagonal = {-2, 0, 0, 3};
  kiln::detail::qr_orthonormal("init.orthogonal", diagonal.data(), 2, 2);
  CHECK(diagonal == std::vector<double>{-1, 0, 0, 1});
}

TEST_CASE("initializers are reproducible", "[init]") {
  // The same seed gives the same values; another seed other values.
  CHECK(same(init::glorot_uniform(5)({10, 10}), init::glorot_uniform(5)({10, 10})));
  CHECK_FALSE(same(init::glorot_uniform(5)({10, 10}), init::glorot_uniform(6)({10, 10})));

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

// kiln::nn::losses against reference values computed in double precision from the definitions,
// their gradients, shape rules and errors.
#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/kiln.hpp>

using kiln::Tensor;
namespace losses = kiln::nn::losses;

namespace {

double value(const Tensor& t) { return kiln::cast(t, kiln::f64).item<double>(); }

double clip(double p) { return std::min(std::max(p, 1e-7), 1 - 1e-7); }

const std::vector<float> labels{0.f, 1.f, 1.f, 0.f, 1.f, 0.f};
const std::vector<float> probs{0.1f, 0.8f, 0.6f, 0.3f, 1.0f, 0.0f};

}  // namespace

TEST_CASE("regression losses", "[nn][losses]") {
  const Tensor y = kiln::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  const Tensor p = kiln::tensor({1.5f, 1.f, 3.f, 2.f}, {2, 2});
  CHECK(value(losses::mean_squared_error(y, p)) == Approx((0.25 + 1 + 0 + 4) / 4));
  CHECK(value(losses::mean_absolute_error(y, p)) == Approx((0.5 + 1 + 0 + 2) / 4));
  // [batch] labels against [batch, 1] predictions; integer labels are cast.
  const Tensor y1 = kiln::tensor({1, 0, 2});
  const Tensor p1 = kiln::tensor({1.f, 1.f, 1.f}, {3, 1});
  CHECK(value(losses::mean_squared_error(y1, p1)) == Approx(2.0 / 3));
  CHECK_THROWS_WITH(losses::mean_squared_error(kiln::ones({3}), kiln::ones({2})),
                    "[losses.mean_squared_error] y_true [3] and y_pred [2] have different shapes");
  CHECK_THROWS_WITH(losses::mean_squared_error(kiln::ones({3}), kiln::ones({3}, kiln::i32)),
                    "[losses.mean_squared_error] y_pred must be f32 or f64, got i32 [3]");
}

TEST_CASE("binary cross-entropy from probabilities and from logits", "[nn][losses]") {
  const Tensor y = kiln::tensor(labels, {6, 1});
  const Tensor p = kiln::tensor(probs, {6, 1});
  double expected = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const double q = clip(probs[i]);
    expected -= labels[i] * std::log(q + 1e-7) + (1 - labels[i]) * std::log(1 - q + 1e-7);
  }
  expected /= 6;
  CHECK(value(losses::binary_crossentropy(y, p)) == Approx(expected).epsilon(1e-5));
  // p = 0 and p = 1 are clipped: finite.
  CHECK(std::isfinite(
      value(losses::binary_crossentropy(kiln::tensor({1.f, 0.f}), kiln::tensor({0.f, 1.f})))));

  const std::vector<float> logits{-3.f, 2.f, 0.5f, 100.f, -100.f, 0.f};
  double from_logits = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double x = logits[i], z = labels[i];
    from_logits += std::max(x, 0.0) - x * z + std::log1p(std::exp(-std::abs(x)));
  }
  from_logits /= 6;
  const Tensor lg = kiln::tensor(logits, {6, 1});
  CHECK(value(losses::binary_crossentropy_from_logits(y, lg)) == Approx(from_logits).epsilon(1e-5));
  // Its gradient is (sigmoid(x) - y) / n, exactly, also for large logits.
  kiln::GradientTape tape;
  tape.watch(lg);
  const Tensor g = tape.gradient(losses::binary_crossentropy_from_logits(y, lg), lg);
  const Tensor expected_g = (kiln::sigmoid(lg) - y) / 6.f;
  CHECK(kiln::max(kiln::abs(g - expected_g)).item<float>() < 1e-7f);
}

TEST_CASE("categorical cross-entropy: probabilities, logits, sparse labels", "[nn][losses]") {
  const std::vector<float> logits{1.f, 2.f, 0.5f, -1.f, 0.f, 3.f};
  const Tensor lg = kiln::tensor(logits, {2, 3});
  const Tensor onehot = kiln::tensor({0.f, 1.f, 0.f, 0.f, 0.f, 1.f}, {2, 3});
  const Tensor sparse = kiln::tensor({1, 2});
  // Reference: -log softmax at the label, averaged.
  double expected = 0;
  for (int row = 0; row < 2; ++row) {
    double z = 0;
    for (int c = 0; c < 3; ++c) z += std::exp(logits[static_cast<std::size_t>(row * 3 + c)]);
    const int label = row == 0 ? 1 : 2;
    expected -= logits[static_cast<std::size_t>(row * 3 + label)] - std::log(z);
  }
  expected /= 2;
  CHECK(value(losses::categorical_crossentropy_from_logits(onehot, lg)) ==
        Approx(expected).epsilon(1e-5));
  CHECK(value(losses::sparse_categorical_crossentropy_from_logits(sparse, lg)) ==
        Approx(expected).epsilon(1e-5));
  const Tensor probs = kiln::softmax(lg, -1);
  CHECK(value(losses::categorical_crossentropy(onehot, probs)) == Approx(expected).epsilon(1e-5));
  CHECK(value(losses::sparse_categorical_crossentropy(sparse, probs)) ==
        Approx(expected).epsilon(1e-5));
  // Probabilities are renormalized: scaling them changes nothing.
  CHECK(value(losses::categorical_crossentropy(onehot, probs * 3.f)) ==
        Approx(expected).epsilon(1e-5));
  // Labels with a trailing 1, as i64 or float.
  CHECK(value(losses::sparse_categorical_crossentropy_from_logits(
            kiln::tensor<std::int64_t>({1, 2}, {2, 1}), lg)) == Approx(expected).epsilon(1e-5));
  CHECK(value(losses::sparse_categorical_crossentropy_from_logits(kiln::tensor({1.f, 2.f}), lg)) ==
        Approx(expected).epsilon(1e-5));
  // Stable for huge logits.
  const Tensor huge = kiln::tensor({1000.f, 0.f, -1000.f}, {1, 3});
  CHECK(value(losses::sparse_categorical_crossentropy_from_logits(kiln::tensor({0}), huge)) ==
        Approx(0.0).margin(1e-6));
  CHECK(value(losses::sparse_categorical_crossentropy_from_logits(kiln::tensor({2}), huge)) ==
        Approx(2000.0));
  CHECK_THROWS_WITH(
      losses::sparse_categorical_crossentropy_from_logits(kiln::tensor({1, 2, 0}), lg),
      "[losses.sparse_categorical_crossentropy_from_logits] labels [3] do not match "
      "y_pred [2,3] (expected labels of shape [2])");
  CHECK_THROWS_WITH(losses::categorical_crossentropy(kiln::ones({2, 2}), probs),
                    Catch::StartsWith("[losses.categorical_crossentropy] y_true [2,2] and y_pred "
                                      "[2,3] have different shapes"));
}

TEST_CASE("losses trace with a dynamic batch", "[nn][losses][function]") {
  kiln::FunctionOptions options;
  options.input_signature = {kiln::TensorSpec({-1, 1}), kiln::TensorSpec({-1, 1})};
  auto f = kiln::function(
      [](const Tensor& y, const Tensor& p) {
        return std::vector<Tensor>{losses::binary_crossentropy(y, p),
                                   losses::mean_squared_error(y, p)};
      },
      options);
  for (std::int64_t n : {6, 2}) {
    const Tensor y = kiln::slice(kiln::tensor(labels, {6, 1}), 0, 0, n);
    const Tensor p = kiln::slice(kiln::tensor(probs, {6, 1}), 0, 0, n);
    const auto traced = f(y, p);
    CHECK(value(traced[0]) == Approx(value(losses::binary_crossentropy(y, p))).epsilon(1e-6));
    CHECK(value(traced[1]) == Approx(value(losses::mean_squared_error(y, p))).epsilon(1e-6));
  }
  CHECK(f.tracing_count() == 1);
}

#pragma once
// Shared checks of the composite ops' tests (test_nn_ops.cpp, test_nn_functional.cpp): host
// arrays for reference loops, closeness, finite-difference gradients and eager against traced.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "finite_difference.hpp"

namespace kiln::test {

using Args = std::vector<Tensor>;
using OpFn = std::function<Tensor(const Args&)>;

/// Deterministic values in [lo, hi) (host-side, for reference loops).
inline std::vector<double> host_values(std::size_t n, std::uint32_t seed, double lo = -1.0,
                                       double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::int64_t element_count(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

/// A tensor of `shape` holding host_values in dtype (values rounded to f32 first for f32, so
/// the reference sees exactly what the op sees).
inline Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return cast(tensor(values, shape), dtype);
}

/// The elements of t as doubles.
inline std::vector<double> values_of(const Tensor& t) {
  return cast(t, DType::f64).to_vector<double>();
}

/// The host values as the op sees them in dtype (f32 rounding).
inline std::vector<double> as_seen(const std::vector<double>& values, DType dtype) {
  return values_of(make_tensor(values, Shape{static_cast<std::int64_t>(values.size())}, dtype));
}

/// got has `shape` and matches want within a tolerance for its dtype.
inline void check_close(const Tensor& got, const Shape& shape, const std::vector<double>& want,
                        double f64_tolerance = 1e-10) {
  REQUIRE(got.shape() == shape);
  const std::vector<double> g = values_of(got);
  REQUIRE(g.size() == want.size());
  const double tolerance = got.dtype() == DType::f32 ? 2e-5 : f64_tolerance;
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << want[i]);
    CHECK(std::abs(g[i] - want[i]) <= tolerance * (1 + std::abs(want[i])));
  }
}

/// The tape's gradient of sum(f(args) * w) for every (f64) argument against central differences.
inline void check_gradient(const std::string& name, const OpFn& f, const Args& args) {
  INFO("gradient of " << name);
  const Tensor probe = f(args);
  const Tensor w = make_tensor(host_values(static_cast<std::size_t>(probe.size()), 99, 0.5, 1.5),
                               probe.shape(), DType::f64);
  const auto loss = [&](const Args& a) { return sum(f(a) * w).item<double>(); };
  GradientTape tape;
  for (const Tensor& a : args) tape.watch(a);
  const std::vector<Tensor> grads = tape.gradient(sum(f(args) * w), args);
  REQUIRE(grads.size() == args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    INFO("input " << i);
    REQUIRE(grads[i].defined());
    REQUIRE(grads[i].shape() == args[i].shape());
    const std::vector<double> analytic = values_of(grads[i]);
    const std::vector<double> numeric = numeric_gradient(loss, args, i);
    for (std::size_t j = 0; j < analytic.size(); ++j) {
      INFO("element " << j);
      CHECK(analytic[j] == Approx(numeric[j]).margin(1e-6).epsilon(1e-5));
    }
  }
}

/// A kiln::function of f gives f's eager result (traced once).
inline void check_traced(const std::string& name, const OpFn& f, const Args& args) {
  INFO("traced " << name);
  const Tensor eager = f(args);
  auto traced_fn = function([&f](const Args& v) { return f(v); });
  const Tensor traced = traced_fn(args);
  REQUIRE(traced.dtype() == eager.dtype());
  REQUIRE(traced.shape() == eager.shape());
  const std::vector<double> a = values_of(traced), b = values_of(eager);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(a[i] - b[i]) <= 1e-6 * (1 + std::abs(b[i])));
  }
  CHECK(traced_fn.tracing_count() == 1);
}

}  // namespace kiln::test

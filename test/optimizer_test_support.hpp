#pragma once
// Helpers shared by the optimizer tests (test_optimizers.cpp, test_optimizer_updates.cpp).

#include <catch2/catch.hpp>

#include <vector>

#include <kiln/kiln.hpp>

namespace kiln::test {

/// A variable's values as f64.
inline std::vector<double> values_of(const Variable& v) {
  return kiln::cast(v.value(), kiln::f64).to_vector<double>();
}

/// Each of v's values within tol of expected's.
inline void check_values(const Variable& v, const std::vector<double>& expected,
                         double tol = 1e-6) {
  const auto got = values_of(v);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(v.name() << "[" << i << "]");
    CHECK(got[i] == Approx(expected[i]).margin(tol));
  }
}

}  // namespace kiln::test

#pragma once
// What the dtype tests (test_dtypes.cpp, test_narrow_dtypes.cpp) share: special values, a 1-D
// tensor from a vector, and the check that an expression throws a kiln::Error with a text.

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

namespace dtype_test {

inline constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
inline constexpr double inf_value = std::numeric_limits<double>::infinity();

/// A 1-D tensor holding v (its dtype from the element type).
template <class T>
kiln::Tensor vec(const std::vector<T>& v) {
  return kiln::tensor(v, {static_cast<std::int64_t>(v.size())});
}

}  // namespace dtype_test

#define CHECK_KILN_ERROR(expr, text)                             \
  do {                                                           \
    CHECK_THROWS_AS(expr, kiln::Error);                          \
    CHECK_THROWS_WITH(expr, Catch::Contains(std::string(text))); \
  } while (false)

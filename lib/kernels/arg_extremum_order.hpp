#pragma once
// Which element argmax and argmin pick, shared by kernels/arg_extremum.cpp and the row kernels
// of kernels/arg_extremum_rows_arch.hpp (compiled once per instruction set: everything here is
// in an anonymous namespace, so each translation unit keeps its own copy; see
// kernels/elementwise_arch.hpp).

#include <cstdint>
#include <type_traits>

namespace kiln::detail {

namespace {

/// Whether an element is NaN (never, for a type that is not floating point): kernel.hpp's
/// is_nan_element, here in each translation unit's own copy, since an inline function shared by
/// translation units compiled for different instruction sets may keep the widest one's code.
template <class T>
constexpr bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

/// True when v should replace best as the running arg-extremum: NaN wins and stays (the first
/// NaN, or with kLast the last one); with kLast an equal value replaces it too.
template <class T, bool kMax, bool kLast = false>
bool replaces(T v, T best) {
  if (is_nan_value(best)) return kLast && is_nan_value(v);
  if (is_nan_value(v)) return true;
  if constexpr (kLast) return kMax ? v >= best : v <= best;
  return kMax ? v > best : v < best;
}

/// The index replaces<> picks in row[0, n) (n >= 1), one element after another.
template <class T, bool kMax, bool kLast>
std::int64_t one_pass_arg_extremum(const T* row, std::int64_t n) {
  std::int64_t best_at = 0;
  for (std::int64_t i = 1; i < n; ++i)
    if (replaces<T, kMax, kLast>(row[i], row[best_at])) best_at = i;
  return best_at;
}

}  // namespace

}  // namespace kiln::detail

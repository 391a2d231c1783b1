// What each instruction set's row kernels compute, bit for bit: every table this CPU runs, on
// signed zeros, infinities, NaN, rounding ties, integer limits and values just outside the
// integer ranges, at lengths that reach the full vector body and the zero-padded tail, against
// scalar references of kiln's rules (docs/architecture.md, "What each instruction set
// computes"). Also: KILN_SIMD selects what it names, for the row tables and for libxsmm.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"
#include "simd_test_support.hpp"

namespace {

using kiln::DType;
using kiln::detail::binary_row_index;
using kiln::detail::dtype_index;
using kiln::detail::ElementwiseRowTable;
using kiln::detail::Prim;
using kiln::detail::unary_row_index;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double two63 = 9223372036854775808.0;

/// The dtype a row kernel's element type stores (bool is stored as std::uint8_t 0 or 1).
template <class T>
constexpr DType dtype_for() {
  if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::boolean;
  else
    return kiln::dtype_of<T>();
}

// ------------------------------------------------------------------ inputs

/// Floating-point inputs for the exactly rounded ops (as double; converted to the element
/// type, where some become other values, e.g. 2^31 - 0.5 is 2^31 in float).
std::vector<double> exact_inputs() {
  const std::vector<std::vector<double>> groups = {
      {0.0, -0.0, inf, -inf, nan},
      // rounding ties and their neighbours; -0.4 rounds to -0
      {0.5, -0.5, 1.5, -1.5, 2.5, -2.5, -0.4, 0.49999997, 0.7, -0.7, 1.0, -1.0},
      {8388607.5, 8388609.0, 4503599627370495.5, 4503599627370497.0},  // near 2^23 and 2^52
      // tiny, subnormal, huge, and outside float's range
      {1e-30, -1e-30, 1e-40, -1e-45, 1e-310, 3e38, -3e38, 1e39, -1e39, 1e-50, -1e-50},
      {1.7e308, -1.7e308, 1e10, -1e10, 1e19, -1e19, 3e9, -3e9},
      // at and just outside the int32 and int64 ranges
      {2147483647.5, 2147483648.0, 2147483520.0, -2147483648.0, -2147483648.5, -2147483904.0},
      {-2147483649.0, two63, -two63, 9223372036854774784.0, 9223371487098961920.0},
      {-9223372036854777856.0},
  };
  std::vector<double> all;
  for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
  return all;
}

/// Inputs of the binary ops: every pair of these.
const std::vector<double> pair_inputs = {0.0,  -0.0, inf,  -inf, nan,  1.0,
                                         -1.0, 2.5,  -0.5, 3.0,  1e300};

template <class T>
std::vector<T> int_inputs() {
  using L = std::numeric_limits<T>;
  return {0, 1, -1, 2, -2, 7, -7, 100, L::min(), L::max(), L::min() + 1, L::max() - 1};
}

/// The special inputs of an op whose results are not exactly rounded: only those where the
/// result is exact (zeros, infinities, NaN, 1, saturation).
std::vector<double> transcendental_inputs(Prim p) {
  switch (p) {
    case Prim::exp:
      return {0.0, -0.0, inf, -inf, nan, 1000.0, -1000.0};
    case Prim::log:
      return {0.0, -0.0, inf, -inf, nan, 1.0, -1.0};
    case Prim::log1p:
      return {0.0, -0.0, inf, -inf, nan, -1.0, -2.0};
    case Prim::sin:
    case Prim::cos:
      return {0.0, -0.0, inf, -inf, nan};
    case Prim::tanh:
      return {0.0, -0.0, inf, -inf, nan, 30.0, -30.0, 1000.0, -1000.0};
    case Prim::sigmoid:
      return {0.0, -0.0, inf, -inf, nan, 1000.0, -1000.0};
    default:  // softplus: softplus(0) = log 2 is not exact
      return {inf, -inf, nan, 1000.0, -1000.0};
  }
}

// ------------------------------------------------------------------ references

template <class T>
T wrap(std::make_unsigned_t<T> v) {
  return static_cast<T>(v);
}
template <class T>
using U = std::make_unsigned_t<T>;

/// kiln::cast's rule: to bool is x != 0; float to integer truncates, NaN gives 0, and values
/// outside the range saturate; integer narrowing wraps; everything else rounds (IEEE).
template <class To, class From>
To cast_reference(From x) {
  if constexpr (std::is_same_v<To, std::uint8_t>) {
    return x != 0 ? 1 : 0;
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    using L = std::numeric_limits<To>;
    if (std::isnan(x)) return 0;
    if (static_cast<double>(x) <= static_cast<double>(L::min())) return L::min();
    if (static_cast<double>(x) >= static_cast<double>(L::max())) return L::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

/// Unary primitive p on one element, as kiln defines it. Predicates return 0 or 1.
template <class T>
T unary_reference(Prim p, T x) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (p) {
      case Prim::neg:
        return -x;
      case Prim::abs:
        return std::fabs(x);
      case Prim::sign:
        return std::isnan(x) ? x : x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
      case Prim::square:
        return x * x;
      case Prim::relu:
        return x < 0 ? T(0) : x;
      case Prim::floor:
        return std::floor(x);
      case Prim::ceil:
        return std::ceil(x);
      case Prim::round:
        return std::nearbyint(x);  // half to even
      case Prim::sqrt:
        return std::sqrt(x);
      case Prim::rsqrt:
        return T(1) / std::sqrt(x);
      case Prim::exp:
        return std::exp(x);
      case Prim::log:
        return std::log(x);
      case Prim::log1p:
        return std::log1p(x);
      case Prim::sin:
        return std::sin(x);
      case Prim::cos:
        return std::cos(x);
      case Prim::tanh:
        return std::tanh(x);
      case Prim::sigmoid:
        return T(1) / (T(1) + std::exp(-x));
      case Prim::softplus:
        return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
      case Prim::logical_not:
        return x == 0;
      case Prim::isnan:
        return std::isnan(x);
      case Prim::isfinite:
        return std::isfinite(x);
      default:
        break;
    }
  } else {
    switch (p) {
      case Prim::neg:
        return wrap<T>(U<T>{0} - static_cast<U<T>>(x));
      case Prim::abs:
        return x < 0 ? wrap<T>(U<T>{0} - static_cast<U<T>>(x)) : x;
      case Prim::sign:
        return x > 0 ? 1 : x < 0 ? -1 : 0;
      case Prim::square:
        return wrap<T>(static_cast<U<T>>(x) * static_cast<U<T>>(x));
      case Prim::relu:
        return x < 0 ? 0 : x;
      case Prim::floor:
      case Prim::ceil:
      case Prim::round:
        return x;
      case Prim::logical_not:
        return x == 0;
      case Prim::isnan:
        return 0;
      case Prim::isfinite:
        return 1;
      default:
        break;
    }
  }
  FAIL("no reference for " << kiln::detail::name(p));
  return 0;
}

/// Binary primitive p, as kiln defines it: NaN propagates through maximum and minimum, whose
/// ties (also -0 against +0) give the first operand, as numpy.maximum does; integers wrap,
/// divide with floor, x / 0 == 0 and x mod 0 == 0; float mod takes the divisor's sign.
template <class T>
T binary_reference(Prim p, T a, T b) {
  switch (p) {
    case Prim::maximum:
      if constexpr (std::is_floating_point_v<T>)
        if (std::isnan(a)) return a;
      return a >= b ? a : b;
    case Prim::minimum:
      if constexpr (std::is_floating_point_v<T>)
        if (std::isnan(a)) return a;
      return a <= b ? a : b;
    case Prim::equal:
      return a == b;
    case Prim::not_equal:
      return a != b;
    case Prim::less:
      return a < b;
    case Prim::less_equal:
      return a <= b;
    case Prim::greater:
      return a > b;
    case Prim::greater_equal:
      return a >= b;
    case Prim::logical_and:
      return a != 0 && b != 0;
    case Prim::logical_or:
      return a != 0 || b != 0;
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (p) {
      case Prim::add:
        return a + b;
      case Prim::sub:
        return a - b;
      case Prim::mul:
        return a * b;
      case Prim::div:
        return a / b;
      case Prim::pow:
        return std::pow(a, b);
      case Prim::mod: {
        const T r = std::fmod(a, b);
        if (r != 0) return (r < 0) != (b < 0) ? r + b : r;
        return std::copysign(T(0), b);
      }
      default:
        break;
    }
  } else {
    const U<T> ua = static_cast<U<T>>(a), ub = static_cast<U<T>>(b);
    switch (p) {
      case Prim::add:
        return wrap<T>(ua + ub);
      case Prim::sub:
        return wrap<T>(ua - ub);
      case Prim::mul:
        return wrap<T>(ua * ub);
      case Prim::div: {
        if (b == 0) return 0;
        if (b == -1) return wrap<T>(U<T>{0} - ua);
        const T q = a / b;
        return (a % b != 0 && ((a % b < 0) != (b < 0))) ? q - 1 : q;
      }
      case Prim::mod: {
        if (b == 0 || b == -1) return 0;
        const T r = a % b;
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
      }
      default:
        break;
    }
  }
  FAIL("no reference for " << kiln::detail::name(p));
  return 0;
}

// ------------------------------------------------------------------ comparing

/// Equal bits, or both NaN (NaN's sign and payload are not pinned).
template <class T>
bool same(T got, T want) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
    return std::memcmp(&got, &want, sizeof(T)) == 0;
  } else {
    return got == want;
  }
}

template <class T>
std::string show(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return fmt::format("{}{}", std::signbit(v) && v == 0 ? "-" : "", std::fabs(v) == 0 ? 0 : v);
  else
    return fmt::format("{}", static_cast<std::int64_t>(v));
}

/// Mismatches of one (table, primitive, dtype): the first few, and how many.
struct Mismatches {
  std::vector<std::string> first;
  std::size_t count = 0;
  void add(const std::string& text) {
    if (first.size() < 8) first.push_back(text);
    ++count;
  }
  void check(const std::string& what) const {
    std::string text = fmt::format("{}: {} mismatches", what, count);
    for (const auto& m : first) text += "\n  " + m;
    INFO(text);
    CHECK(count == 0);
  }
};

/// Lengths and layouts: each rotation of the inputs at a length that fills several vectors of
/// every width (2 to 16 lanes) and leaves a tail, so every input is seen in the body and as the
/// last, zero-padded element; and each input broadcast (stride 0) at 35 = 2 x 16 + 3.
std::int64_t rotation_length(std::size_t k) {
  return static_cast<std::int64_t>(std::max<std::size_t>(3 * k, 48)) | 1;
}
constexpr std::int64_t broadcast_length = 35;

template <class T, class Out>
void check_unary(const char* isa, Prim p, const std::vector<T>& inputs, kiln::detail::UnaryRowFn fn,
                 Out (*reference)(T)) {
  Mismatches bad;
  const std::size_t k = inputs.size();
  const std::int64_t n = rotation_length(k);
  std::vector<T> in(static_cast<std::size_t>(n));
  std::vector<Out> out(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < k; ++r) {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = inputs[(i + r) % k];
    fn(in.data(), 1, out.data(), n);
    for (std::size_t i = 0; i < in.size(); ++i)
      if (!same(out[i], reference(in[i])))
        bad.add(fmt::format("x = {} at {} of {}: got {}, want {}", show(in[i]), i, n, show(out[i]),
                            show(reference(in[i]))));
  }
  for (const T x : inputs) {
    fn(&x, 0, out.data(), broadcast_length);
    for (std::int64_t i = 0; i < broadcast_length; ++i)
      if (!same(out[static_cast<std::size_t>(i)], reference(x)))
        bad.add(fmt::format("broadcast x = {} at {}: got {}, want {}", show(x), i,
                            show(out[static_cast<std::size_t>(i)]), show(reference(x))));
  }
  bad.check(fmt::format("{} {} {}", isa, kiln::detail::name(p), kiln::dtype_name(dtype_for<T>())));
}

template <class T>
std::vector<T> converted(const std::vector<double>& values) {
  std::vector<T> out;
  for (double v : values) out.push_back(static_cast<T>(v));
  return out;
}

/// The op's reference as a plain function of one element (check_unary takes a pointer).
template <class T, Prim P>
T unary_as_t(T x) {
  return static_cast<T>(unary_reference<T>(P, x));
}
template <class T, Prim P>
std::uint8_t unary_as_bool(T x) {
  return unary_reference<T>(P, x) != 0 ? 1 : 0;
}

template <class T, Prim P>
void check_unary_prim(const ElementwiseRowTable& table, const std::vector<T>& inputs) {
  const auto fn = table.unary[unary_row_index(P)][dtype_index(dtype_for<T>())];
  REQUIRE(fn != nullptr);
  if constexpr (P == Prim::logical_not || P == Prim::isnan || P == Prim::isfinite)
    check_unary<T, std::uint8_t>(table.isa_name, P, inputs, fn, &unary_as_bool<T, P>);
  else
    check_unary<T, T>(table.isa_name, P, inputs, fn, &unary_as_t<T, P>);
}

template <class T>
void check_float_unary(const ElementwiseRowTable& table) {
  const std::vector<T> in = converted<T>(exact_inputs());
  check_unary_prim<T, Prim::neg>(table, in);
  check_unary_prim<T, Prim::abs>(table, in);
  check_unary_prim<T, Prim::sign>(table, in);
  check_unary_prim<T, Prim::square>(table, in);
  check_unary_prim<T, Prim::relu>(table, in);
  check_unary_prim<T, Prim::floor>(table, in);
  check_unary_prim<T, Prim::ceil>(table, in);
  check_unary_prim<T, Prim::round>(table, in);
  check_unary_prim<T, Prim::sqrt>(table, in);
  check_unary_prim<T, Prim::rsqrt>(table, in);
  check_unary_prim<T, Prim::logical_not>(table, in);
  check_unary_prim<T, Prim::isnan>(table, in);
  check_unary_prim<T, Prim::isfinite>(table, in);
  const auto special = [](Prim p) { return converted<T>(transcendental_inputs(p)); };
  check_unary_prim<T, Prim::exp>(table, special(Prim::exp));
  check_unary_prim<T, Prim::log>(table, special(Prim::log));
  check_unary_prim<T, Prim::log1p>(table, special(Prim::log1p));
  check_unary_prim<T, Prim::sin>(table, special(Prim::sin));
  check_unary_prim<T, Prim::cos>(table, special(Prim::cos));
  check_unary_prim<T, Prim::tanh>(table, special(Prim::tanh));
  check_unary_prim<T, Prim::sigmoid>(table, special(Prim::sigmoid));
  check_unary_prim<T, Prim::softplus>(table, special(Prim::softplus));
}

template <class T>
void check_int_unary(const ElementwiseRowTable& table) {
  const std::vector<T> in = int_inputs<T>();
  check_unary_prim<T, Prim::neg>(table, in);
  check_unary_prim<T, Prim::abs>(table, in);
  check_unary_prim<T, Prim::sign>(table, in);
  check_unary_prim<T, Prim::square>(table, in);
  check_unary_prim<T, Prim::relu>(table, in);
  check_unary_prim<T, Prim::floor>(table, in);
  check_unary_prim<T, Prim::ceil>(table, in);
  check_unary_prim<T, Prim::round>(table, in);
  check_unary_prim<T, Prim::logical_not>(table, in);
  check_unary_prim<T, Prim::isnan>(table, in);
  check_unary_prim<T, Prim::isfinite>(table, in);
}

// ------------------------------------------------------------------ casts

template <class From, class To>
To cast_as(From x) {
  return cast_reference<To, From>(x);
}

template <class From>
std::vector<From> cast_inputs() {
  using L = std::numeric_limits<From>;
  if constexpr (std::is_floating_point_v<From>) {
    return converted<From>(exact_inputs());
  } else if constexpr (std::is_same_v<From, std::uint8_t>) {
    return {0, 1, 1, 0, 0};
  } else if constexpr (std::is_same_v<From, std::int32_t>) {
    return {0, 1, -1, 16777217, -16777217, 16777219, L::min(), L::max()};
  } else {
    // Near 2^53 and 2^63, and ties of f32 rounding: one rounding to f32, never two.
    constexpr std::int64_t p53 = std::int64_t{1} << 53, p29 = std::int64_t{1} << 29;
    constexpr std::int64_t p40 = std::int64_t{1} << 40, p16 = std::int64_t{1} << 16;
    return {0,
            -1,
            p53 + 1,
            -p53 - 1,
            p53 + p29 + 1,
            p53 + p29,
            p40 + p16 + 1,
            p40 + p16 - 1,
            L::min(),
            L::max(),
            (std::int64_t{1} << 32) + 5};
  }
}

template <class From, class To>
void check_cast(const ElementwiseRowTable& table) {
  const auto fn = table.cast[dtype_index(dtype_for<From>())][dtype_index(dtype_for<To>())];
  REQUIRE(fn != nullptr);
  INFO("cast " << kiln::dtype_name(dtype_for<From>()) << " -> "
               << kiln::dtype_name(dtype_for<To>()));
  check_unary<From, To>(table.isa_name, Prim::cast, cast_inputs<From>(), fn, &cast_as<From, To>);
}

template <class From>
void check_casts_from(const ElementwiseRowTable& table) {
  check_cast<From, float>(table);
  check_cast<From, double>(table);
  check_cast<From, std::int32_t>(table);
  check_cast<From, std::int64_t>(table);
  check_cast<From, std::uint8_t>(table);
}

// ------------------------------------------------------------------ binary ops

template <class T, class Out>
void check_binary(const ElementwiseRowTable& table, Prim p, const std::vector<T>& values) {
  const auto fn = table.binary[binary_row_index(p)][dtype_index(dtype_for<T>())];
  REQUIRE(fn != nullptr);
  std::vector<T> as, bs;
  for (T a : values)
    for (T b : values) {
      as.push_back(a);
      bs.push_back(b);
    }
  const auto want = [p](T a, T b) {
    const T r = binary_reference<T>(p, a, b);
    if constexpr (std::is_same_v<Out, std::uint8_t>)
      return static_cast<Out>(r != 0 ? 1 : 0);
    else
      return static_cast<Out>(r);
  };
  Mismatches bad;
  const auto note = [&](const char* layout, T a, T b, Out got, std::int64_t i) {
    if (!same(got, want(a, b)))
      bad.add(fmt::format("{}: a = {}, b = {} at {}: got {}, want {}", layout, show(a), show(b), i,
                          show(got), show(want(a, b))));
  };
  const std::size_t k = as.size();
  const std::int64_t n = rotation_length(k);
  std::vector<T> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
  std::vector<Out> out(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < k; ++r) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = as[(i + r) % k];
      b[i] = bs[(i + r) % k];
    }
    fn(a.data(), 1, b.data(), 1, out.data(), n);
    for (std::size_t i = 0; i < a.size(); ++i)
      note("contiguous", a[i], b[i], out[i], static_cast<std::int64_t>(i));
  }
  // One operand broadcast (stride 0), the other a run of one value or broadcast too.
  for (std::size_t j = 0; j < k; ++j) {
    const std::vector<T> run_a(broadcast_length, as[j]), run_b(broadcast_length, bs[j]);
    for (int strides = 0; strides < 3; ++strides) {
      const std::int64_t sa = strides == 1 ? 1 : 0, sb = strides == 2 ? 1 : 0;
      fn(run_a.data(), sa, run_b.data(), sb, out.data(), broadcast_length);
      for (std::int64_t i = 0; i < broadcast_length; ++i)
        note(strides == 0   ? "both broadcast"
             : strides == 1 ? "b broadcast"
                            : "a broadcast",
             as[j], bs[j], out[static_cast<std::size_t>(i)], i);
    }
  }
  bad.check(fmt::format("{} {} {}", table.isa_name, kiln::detail::name(p),
                        kiln::dtype_name(dtype_for<T>())));
}

template <class T>
void check_binaries(const ElementwiseRowTable& table) {
  std::vector<T> values;
  if constexpr (std::is_floating_point_v<T>)
    values = converted<T>(pair_inputs);
  else
    values = int_inputs<T>();
  for (Prim p :
       {Prim::add, Prim::sub, Prim::mul, Prim::div, Prim::maximum, Prim::minimum, Prim::mod})
    check_binary<T, T>(table, p, values);
  if constexpr (std::is_floating_point_v<T>) check_binary<T, T>(table, Prim::pow, values);
  for (Prim p : {Prim::equal, Prim::not_equal, Prim::less, Prim::less_equal, Prim::greater,
                 Prim::greater_equal, Prim::logical_and, Prim::logical_or})
    check_binary<T, std::uint8_t>(table, p, values);
}

template <class T>
void check_where(const ElementwiseRowTable& table) {
  const auto fn = table.where[dtype_index(dtype_for<T>())];
  const std::vector<T> a =
      converted<T>({-0.0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  std::vector<T> b(a.size());
  std::vector<std::uint8_t> c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    b[i] =
        static_cast<T>(std::is_floating_point_v<T> && i % 3 == 0 ? 0.0 : -static_cast<double>(i));
    c[i] = i % 2 == 0 ? 1 : 0;
  }
  std::vector<T> out(a.size());
  fn(c.data(), 1, a.data(), 1, b.data(), 1, out.data(), static_cast<std::int64_t>(a.size()));
  bool ok = true;
  for (std::size_t i = 0; i < a.size(); ++i) ok = ok && same(out[i], c[i] != 0 ? a[i] : b[i]);
  INFO(table.isa_name << " where " << kiln::dtype_name(dtype_for<T>()));
  CHECK(ok);
}

}  // namespace

TEST_CASE("xsimd semantics pinned per instruction set", "[simd]") {
  for (const ElementwiseRowTable* table : kiln::test::row_tables_of_this_cpu()) {
    check_float_unary<float>(*table);
    check_float_unary<double>(*table);
    check_int_unary<std::int32_t>(*table);
    check_int_unary<std::int64_t>(*table);
    check_casts_from<float>(*table);
    check_casts_from<double>(*table);
    check_casts_from<std::int32_t>(*table);
    check_casts_from<std::int64_t>(*table);
    check_casts_from<std::uint8_t>(*table);
    check_binaries<float>(*table);
    check_binaries<double>(*table);
    check_binaries<std::int32_t>(*table);
    check_binaries<std::int64_t>(*table);
    check_where<float>(*table);
    check_where<double>(*table);
    check_where<std::int32_t>(*table);
    check_where<std::int64_t>(*table);
  }
}

TEST_CASE("KILN_SIMD selects the instruction set it names", "[simd]") {
  using namespace kiln::detail;
  const auto tables = kiln::test::row_tables_of_this_cpu();
  for (std::size_t level = 0; level < tables.size(); ++level)
    CHECK(std::string(tables[level]->isa_name) == simd_level_name(static_cast<SimdLevel>(level)));
  const char* env = std::getenv("KILN_SIMD");
  const std::string requested = env != nullptr ? env : "";
  INFO("KILN_SIMD=" << requested << ", this CPU: " << simd_level_name(cpu_simd_level()));
  if (requested.empty()) {
    CHECK(simd_level() == cpu_simd_level());
  } else {
    // A misspelled name or a set this CPU cannot run would silently test another one.
    CHECK(requested_simd_level() >= 0);
    CHECK(simd_level_name(simd_level()) == requested);
  }
  CHECK(std::string(elementwise_rows().isa_name) == simd_level_name(simd_level()));
  // libxsmm's generated matmul kernels follow a lowered level.
  const std::string jit = matmul_jit_target();
  INFO("libxsmm target " << jit);
  if (std::getenv("LIBXSMM_TARGET") == nullptr && simd_level() == SimdLevel::sse2 &&
      cpu_simd_level() != SimdLevel::sse2)
    CHECK(jit == "x86");
  if (std::getenv("LIBXSMM_TARGET") == nullptr && simd_level() == SimdLevel::avx2 &&
      cpu_simd_level() == SimdLevel::avx512)
    CHECK(jit == "hsw");
}

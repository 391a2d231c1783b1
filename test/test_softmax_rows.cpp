// The softmax-class row kernels (issue 18): softmax, log_softmax and logsumexp, eager and
// traced, against their definitions in long double and against the composites they replace,
// on every instruction set this CPU runs, with logsumexp's overlapped rows (each row's range
// read while the row before adds its exps) giving each row the value it has alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <kiln/kiln.hpp>

#include "kernels/kernel.hpp"
#include "simd_test_support.hpp"

namespace {

using kiln::Shape;
using kiln::Tensor;
using kiln::test::StreamAbove8MiB;  // so the streaming paths run on test-sized data

}  // namespace

namespace {

/// softmax as lib/ops/reduce.cpp composes it where the primitive does not apply (an axis that
/// is not the last, dynamic shapes): max, shift, exp, pairwise sum, product by the reciprocal.
Tensor composite_softmax(const Tensor& x, std::int64_t axis) {
  const Tensor m = kiln::max(x, {axis}, true);
  const Tensor shift = kiln::where(kiln::isfinite(m), m, kiln::zeros_like(m));
  const Tensor e = kiln::exp(x - shift);
  return e * (1.0 / kiln::sum(e, {axis}, true));
}

/// Bitwise equality, NaN equal to NaN.
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor a64 = kiln::cast(a, kiln::f64), b64 = kiln::cast(b, kiln::f64);
  const std::vector<double> u = a64.to_vector<double>(), v = b64.to_vector<double>();
  for (std::size_t i = 0; i < u.size(); ++i)
    if (!(u[i] == v[i] || (u[i] != u[i] && v[i] != v[i]))) return false;
  return true;
}

/// One element of softmax from its definition, in long double, and the error allowed to a
/// computation in the dtype: `slack` ulps of the result, where slack is 8 plus the size of the
/// exp's argument |x - max| (the subtraction x - max rounds by half an ulp of its result, which
/// the exp turns into a relative error of |x - max| / 2 ulps). `exact` marks the rows whose max
/// is not finite (+inf, or -inf everywhere): there kiln's result is the composite's, bit for bit.
struct ReferenceElement {
  long double value = 0;
  double slack = 0;
  bool exact = false;
};

/// The softmax of each row of `values` (rows of n): NaN everywhere in a row with a NaN.
std::vector<ReferenceElement> reference_softmax(const std::vector<double>& values, std::size_t n) {
  std::vector<ReferenceElement> out(values.size());
  for (std::size_t r = 0; r * n < values.size(); ++r) {
    const double* x = values.data() + r * n;
    long double m = -std::numeric_limits<long double>::infinity();
    bool nan = false;
    for (std::size_t i = 0; i < n; ++i) {
      nan = nan || std::isnan(x[i]);
      if (x[i] > m) m = x[i];
    }
    long double total = 0;
    if (std::isfinite(m))
      for (std::size_t i = 0; i < n; ++i) total += std::exp(static_cast<long double>(x[i]) - m);
    for (std::size_t i = 0; i < n; ++i) {
      ReferenceElement& e = out[r * n + i];
      e.exact = !nan && !std::isfinite(m);
      e.value = nan ? std::numeric_limits<long double>::quiet_NaN()
                    : std::exp(static_cast<long double>(x[i]) - m) / total;
      e.slack = 8 + (std::isfinite(x[i]) ? std::fabs(static_cast<double>(x[i] - m)) : 0);
    }
  }
  return out;
}

/// The first element of `got` that is not within its reference's slack (NaN exactly where the
/// reference is NaN, relative below the smallest normal as absolute), or that differs in its
/// bits from `composite` where the reference is exact (a row whose max is not finite: such a
/// row needs a composite); -1 when there is none.
std::int64_t first_inaccurate(const Tensor& got, const std::vector<ReferenceElement>& expected,
                              const Tensor* composite = nullptr) {
  const std::vector<double> v = kiln::cast(got, kiln::f64).to_vector<double>();
  const std::vector<double> c = composite != nullptr
                                    ? kiln::cast(*composite, kiln::f64).to_vector<double>()
                                    : std::vector<double>(v.size(), std::nan(""));
  const bool f32 = got.dtype() == kiln::f32;
  const double eps = f32 ? 0x1p-23 : 0x1p-52, tiny = f32 ? 0x1p-126 : 0x1p-1022;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const ReferenceElement& want = expected[i];
    if (want.exact) {
      if (!(v[i] == c[i] || (std::isnan(v[i]) && std::isnan(c[i]))))
        return static_cast<std::int64_t>(i);
      continue;
    }
    if (std::isnan(want.value) != std::isnan(v[i])) return static_cast<std::int64_t>(i);
    if (std::isnan(want.value)) continue;
    const long double error = std::fabs(static_cast<long double>(v[i]) - want.value);
    if (error > want.slack * eps * std::max<long double>(std::fabs(want.value), tiny))
      return static_cast<std::int64_t>(i);
  }
  return -1;
}

/// x as rows along `axis`, for the cases below: the transpose of a matrix reduced over its
/// first axis, else a reshape (every dim after the axis is 1).
Tensor rows_along(const Tensor& x, std::int64_t axis) {
  const auto rank = static_cast<std::int64_t>(x.shape().size());
  if (axis < 0) axis += rank;
  if (axis == 0 && rank == 2) return kiln::transpose(x);
  const std::int64_t n = x.shape()[static_cast<std::size_t>(axis)];
  return kiln::reshape(x, Shape{x.shape().numel() / n, n});
}

}  // namespace

TEST_CASE(
    "the softmax primitive is accurate, eager and traced alike, and agrees with its composite",
    "[reduce]") {
  const StreamAbove8MiB streamed;
  struct Case {
    const char* what;
    Shape shape;
    std::int64_t axis;
  };
  const Case cases[] = {
      {"rows of 1,024, streamed and split over threads", {4096, 1024}, -1},
      {"short rows", {37, 3}, 1},
      {"one row shorter than a vector", {5}, 0},
      {"a row of 1, and rows of 200,001 (blocks of the sum)", {1, 200001}, -1},
      {"trailing dims of size 1", {6, 70, 1, 1}, 1},
      {"an axis that is not last (the composite)", {6, 70}, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
      CAPTURE(kiln::dtype_name(dtype));
      const Tensor x = kiln::cast(
          kiln::random::normal(c.shape, 0, 3, static_cast<std::uint64_t>(c.shape.numel())), dtype);
      const Tensor eager = kiln::softmax(x, c.axis);
      auto traced = kiln::function([&](const Tensor& t) { return kiln::softmax(t, c.axis); });
      CHECK(same_bits(traced(x), eager));
      // Against the definition in long double, along the rows of the moved axis.
      const Tensor rows = rows_along(x, c.axis);
      const auto n = static_cast<std::size_t>(rows.shape()[rows.shape().size() - 1]);
      const std::vector<ReferenceElement> want =
          reference_softmax(kiln::cast(rows, kiln::f64).to_vector<double>(), n);
      const Tensor composite = rows_along(composite_softmax(x, c.axis), c.axis);
      CHECK(first_inaccurate(rows_along(eager, c.axis), want, &composite) == -1);
      CHECK(first_inaccurate(composite, want, &composite) == -1);
    }
  }
  // Special values: rows with +inf, -inf everywhere, NaN, a large spread, and zero maxima of
  // either sign (the max may come out as +0 or -0: softmax must not care), odd lengths. The
  // primitive and the composite give NaN at the same places, and the same values to 8 ulps.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special{
      1,    inf,  2,    3, -inf, -inf, -inf, -inf, 0, nan,  1, 2,    1000, 1000, 999,  -1000, -0.f,
      -0.f, -0.f, -0.f, 0, -0.f, -1.f, -0.f, -0.f, 0, -2.f, 0, -0.f, -0.f, nan,  -3.f, -0.f};
  const auto check_rows = [&](const std::vector<float>& values, std::int64_t width) {
    const Tensor x = kiln::reshape(kiln::tensor<float>(values),
                                   {static_cast<std::int64_t>(values.size()) / width, width});
    const std::vector<ReferenceElement> want = reference_softmax(
        kiln::cast(x, kiln::f64).to_vector<double>(), static_cast<std::size_t>(width));
    const Tensor composite = composite_softmax(x, -1);
    CHECK(first_inaccurate(kiln::softmax(x, -1), want, &composite) == -1);
    CHECK(first_inaccurate(composite, want, &composite) == -1);
  };
  for (std::int64_t width : {4, 3, 5, 11}) {
    CAPTURE(width);
    check_rows(std::vector<float>(special.begin(), special.begin() + 33 / width * width), width);
  }
  check_rows(special, 33);
  // Where exp(x) is near its overflow point (kiln's ExpOp, not xsimd's bare exp, whose 2^n
  // overflowed from 88.376): beside a +inf (the shift is 0) and under a finite max.
  check_rows({88.5f, inf, 88.7f, 1, 88.5f, 88.72f, 80, 87}, 4);
  // Rows long enough for the max's vector accumulators (4 vectors of any instruction set, then
  // single vectors, then a scalar tail), with one NaN or +inf at positions in each part, rows
  // of -inf only, and zeros of both signs.
  for (std::int64_t length : {67, 200, 1031}) {
    CAPTURE(length);
    std::vector<float> base =
        kiln::random::normal({length}, 0, 3, static_cast<std::uint64_t>(length)).to_vector<float>();
    std::vector<float> rows;
    for (std::int64_t at :
         {std::int64_t{0}, std::int64_t{17}, std::int64_t{63}, length / 2, length - 2, length - 1})
      for (float v : {nan, inf, -inf}) {
        rows.insert(rows.end(), base.begin(), base.end());
        rows[rows.size() - static_cast<std::size_t>(length - at)] = v;
      }
    rows.insert(rows.end(), static_cast<std::size_t>(length), -inf);
    std::vector<float> zeros(static_cast<std::size_t>(length), -0.f);
    zeros[static_cast<std::size_t>(length / 3)] = 0.f;
    zeros[1] = -5.f;
    rows.insert(rows.end(), zeros.begin(), zeros.end());
    check_rows(rows, length);
  }
}

namespace {

/// log_softmax along rows of n from its definition in long double: each value and the error
/// allowed to it, 8 roundings of each of its two terms (x - max and the log of the sum, whose
/// difference may cancel) and of 1 (the sum, at least 1, is rounded: its log is off by about
/// that rounding, however small the log). A row with a NaN is NaN everywhere; with +inf, NaN there
/// and -inf elsewhere; of -inf only, NaN everywhere (-inf - log 0): the composite's values.
struct LogSoftmaxReference {
  std::vector<long double> value, bound;
};
LogSoftmaxReference reference_log_softmax(const std::vector<double>& x, std::size_t n, bool f32) {
  const long double eps = f32 ? 0x1p-23L : 0x1p-52L, tiny = f32 ? 0x1p-149L : 0x1p-1074L;
  const long double nan = std::numeric_limits<long double>::quiet_NaN();
  const long double inf = std::numeric_limits<long double>::infinity();
  LogSoftmaxReference out{std::vector<long double>(x.size()), std::vector<long double>(x.size())};
  for (std::size_t row = 0; row < x.size(); row += n) {
    long double max = -inf;
    bool has_nan = false;
    for (std::size_t i = row; i < row + n; ++i) {
      has_nan = has_nan || std::isnan(x[i]);
      if (!std::isnan(x[i])) max = std::max<long double>(max, x[i]);
    }
    long double sum = 0;
    if (std::isfinite(max))
      for (std::size_t i = row; i < row + n; ++i) sum += std::exp(x[i] - max);
    const long double lse = std::log(sum);
    for (std::size_t i = row; i < row + n; ++i) {
      if (has_nan || max == -inf || x[i] == inf)
        out.value[i] = nan;
      else if (max == inf)
        out.value[i] = -inf;
      else
        out.value[i] = (x[i] - max) - lse;
      out.bound[i] = 8 * eps * (std::fabs(x[i] - max) + std::fabs(lse) + 1) + tiny;
    }
  }
  return out;
}

/// logsumexp of each row of n from its definition in long double, and the error allowed: 8
/// roundings of the max, of the log of the sum and of 1 (as log_softmax's). NaN for a row with
/// a NaN, +inf for one with +inf, -inf for a row of -inf only.
LogSoftmaxReference reference_logsumexp(const std::vector<double>& x, std::size_t n, bool f32) {
  const long double eps = f32 ? 0x1p-23L : 0x1p-52L;
  const long double inf = std::numeric_limits<long double>::infinity();
  LogSoftmaxReference out;
  for (std::size_t row = 0; row < x.size(); row += n) {
    long double max = -inf, sum = 0;
    bool has_nan = false;
    for (std::size_t i = row; i < row + n; ++i) {
      has_nan = has_nan || std::isnan(x[i]);
      if (!std::isnan(x[i])) max = std::max<long double>(max, x[i]);
    }
    if (std::isfinite(max))
      for (std::size_t i = row; i < row + n; ++i) sum += std::exp(x[i] - max);
    const long double log_sum = std::log(sum);
    out.value.push_back(has_nan              ? std::numeric_limits<long double>::quiet_NaN()
                        : std::isfinite(max) ? max + log_sum
                                             : max);
    out.bound.push_back(8 * eps * (std::fabs(max) + std::fabs(log_sum) + 1));
  }
  return out;
}

/// The first element of got off the reference (NaN for NaN, infinities exactly), or -1.
std::int64_t first_off(const Tensor& got, const LogSoftmaxReference& want) {
  const std::vector<double> v = kiln::cast(got, kiln::f64).to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const long double w = want.value[i];
    const bool ok = std::isnan(w)   ? std::isnan(v[i])
                    : std::isinf(w) ? v[i] == w
                                    : std::fabs(v[i] - w) <= want.bound[i];
    if (!ok) return static_cast<std::int64_t>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("the log_softmax primitive is accurate, eager and traced alike, and the composite too",
          "[reduce]") {
  const StreamAbove8MiB streamed;
  const std::pair<Shape, std::int64_t> cases[] = {
      {{4096, 1024}, -1},  // streamed and split over threads
      {{37, 3}, 1},        // short rows
      {{5}, 0},            // one row shorter than a vector
      {{1, 200001}, -1},   // blocks of the sum
      {{6, 70, 1, 1}, 1},  // trailing dims of size 1
      {{6, 70}, 0},        // an axis that is not last: the composite
      {{3, 0, 4}, 2},      // no rows
  };
  for (const auto& [shape, axis] : cases) {
    CAPTURE(shape, axis);
    for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
      CAPTURE(kiln::dtype_name(dtype));
      const Tensor x = kiln::cast(
          kiln::random::normal(shape, 0, 3, static_cast<std::uint64_t>(shape.numel())), dtype);
      const Tensor eager = kiln::log_softmax(x, axis);
      auto traced = kiln::function([&](const Tensor& t) { return kiln::log_softmax(t, axis); });
      CHECK(same_bits(traced(x), eager));
      if (shape.numel() == 0) continue;
      const Tensor rows = rows_along(x, axis);
      const auto n = static_cast<std::size_t>(rows.shape()[rows.shape().size() - 1]);
      const LogSoftmaxReference want = reference_log_softmax(
          kiln::cast(rows, kiln::f64).to_vector<double>(), n, dtype == kiln::f32);
      CHECK(first_off(rows_along(eager, axis), want) == -1);
    }
  }
  // Special values (as softmax's above), near exp's overflow point, and long rows with a NaN,
  // +inf or -inf in each part of the max's and the sum's loops; the composite (a leading axis
  // of the transposed rows) must agree with the same reference.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto check_rows = [&](const std::vector<float>& values, std::int64_t width) {
    const Tensor x = kiln::reshape(kiln::tensor<float>(values),
                                   {static_cast<std::int64_t>(values.size()) / width, width});
    const LogSoftmaxReference want = reference_log_softmax(
        kiln::cast(x, kiln::f64).to_vector<double>(), static_cast<std::size_t>(width), true);
    CHECK(first_off(kiln::log_softmax(x, -1), want) == -1);
    CHECK(first_off(kiln::transpose(kiln::log_softmax(kiln::transpose(x), 0)), want) == -1);
  };
  check_rows({1, inf, 2,    3,    -inf, -inf,  -inf, -inf, 0, nan,
              1, 2,   1000, 1000, 999,  -1000, -0.f, -0.f, 0, -0.f},
             4);
  check_rows({88.5f, inf, 88.7f, 1, 88.5f, 88.72f, 80, 87, -100, -90, -88, 0}, 4);
  for (std::int64_t length : {67, 1031}) {
    CAPTURE(length);
    std::vector<float> base =
        kiln::random::normal({length}, 0, 3, static_cast<std::uint64_t>(length)).to_vector<float>();
    std::vector<float> rows;
    for (std::int64_t at : {std::int64_t{0}, std::int64_t{63}, length / 2, length - 1})
      for (float v : {nan, inf, -inf}) {
        rows.insert(rows.end(), base.begin(), base.end());
        rows[rows.size() - static_cast<std::size_t>(length - at)] = v;
      }
    rows.insert(rows.end(), static_cast<std::size_t>(length), -inf);
    check_rows(rows, length);
  }
}

TEST_CASE("the logsumexp primitive is accurate, eager and traced alike, with kept dims or not",
          "[reduce]") {
  const std::pair<Shape, std::int64_t> cases[] = {
      {{4096, 1024}, -1}, {{37, 3}, 1},       {{5}, 0},
      {{1, 200001}, -1},  {{6, 70, 1, 1}, 1}, {{6, 70}, 0},  // the composite
  };
  for (const auto& [shape, axis] : cases) {
    for (const bool keepdims : {false, true}) {
      CAPTURE(shape, axis, keepdims);
      for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
        CAPTURE(kiln::dtype_name(dtype));
        const Tensor x = kiln::cast(
            kiln::random::normal(shape, 0, 3, static_cast<std::uint64_t>(shape.numel())), dtype);
        const Tensor eager = kiln::logsumexp(x, {axis}, keepdims);
        auto traced =
            kiln::function([&](const Tensor& t) { return kiln::logsumexp(t, {axis}, keepdims); });
        CHECK(same_bits(traced(x), eager));
        const Tensor rows = rows_along(x, axis);
        const auto n = static_cast<std::size_t>(rows.shape()[rows.shape().size() - 1]);
        CHECK(first_off(kiln::reshape(eager, {-1}),
                        reference_logsumexp(kiln::cast(rows, kiln::f64).to_vector<double>(), n,
                                            dtype == kiln::f32)) == -1);
      }
    }
  }
  // Rows with NaN, +inf, -inf and -inf only, through the primitive and the composite.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values{1, inf, 2,  3,     -inf, -inf, -inf, -inf, 0,    nan,
                                  1, 2,   88, 88.7f, 89,   -100, -0.f, -0.f, -0.f, 0};
  const Tensor x = kiln::reshape(kiln::tensor<float>(values), {5, 4});
  const LogSoftmaxReference want =
      reference_logsumexp(kiln::cast(x, kiln::f64).to_vector<double>(), 4, true);
  CHECK(first_off(kiln::logsumexp(x, {1}), want) == -1);
  CHECK(first_off(kiln::logsumexp(kiln::transpose(x), {0}), want) == -1);
}

TEST_CASE("every instruction set's softmax, log_softmax and logsumexp rows are accurate",
          "[reduce][simd]") {
  // The row kernel of each table this CPU runs, called directly, on rows of lengths around the
  // vector widths of every set (and of several sum blocks) against the definition; rows with a
  // NaN (NaN everywhere) and with +inf (NaN there, 0 elsewhere: the shift is 0, the sum inf;
  // log_softmax -inf elsewhere).
  const auto tables = kiln::test::row_tables_of_this_cpu();
  const auto f32 = kiln::detail::dtype_index(kiln::f32), f64 = kiln::detail::dtype_index(kiln::f64);
  for (const std::int64_t n : {1, 2, 7, 8, 15, 16, 17, 63, 64, 65, 129, 1000, 4097, 10001}) {
    CAPTURE(n);
    const std::vector<float> x32 =
        kiln::random::normal({n}, 0, 4, static_cast<std::uint64_t>(n)).to_vector<float>();
    const std::vector<double> x64(x32.begin(), x32.end());
    const std::vector<ReferenceElement> want = reference_softmax(x64, static_cast<std::size_t>(n));
    const LogSoftmaxReference log_want32 =
        reference_log_softmax(x64, static_cast<std::size_t>(n), true);
    const LogSoftmaxReference log_want64 =
        reference_log_softmax(x64, static_cast<std::size_t>(n), false);
    const LogSoftmaxReference lse_want32 =
        reference_logsumexp(x64, static_cast<std::size_t>(n), true);
    const LogSoftmaxReference lse_want64 =
        reference_logsumexp(x64, static_cast<std::size_t>(n), false);
    for (const auto* table : tables) {
      CAPTURE(table->isa_name);
      std::vector<double> y64(x64.size());
      std::vector<float> y32(x32.size());
      table->softmax_row[f64](x64.data(), y64.data(), n, nullptr, nullptr);
      // Asks for another row to read, and for one to write, which it must not touch.
      std::vector<float> next_out(x32.size(), 7.0f);
      table->softmax_row[f32](x32.data(), y32.data(), n, x64.data(), next_out.data());
      CHECK(next_out == std::vector<float>(x32.size(), 7.0f));
      CHECK(first_inaccurate(kiln::tensor<double>(y64), want) == -1);
      CHECK(first_inaccurate(kiln::tensor<float>(y32), want) == -1);
      std::vector<float> in_place = x32;  // out == in, as the primitive may ask
      table->softmax_row[f32](in_place.data(), in_place.data(), n, nullptr, nullptr);
      CHECK(in_place == y32);
      table->log_softmax_row[f64](x64.data(), y64.data(), n, nullptr, nullptr);
      table->log_softmax_row[f32](x32.data(), y32.data(), n, x64.data(), nullptr);
      CHECK(first_off(kiln::tensor<double>(y64), log_want64) == -1);
      CHECK(first_off(kiln::tensor<float>(y32), log_want32) == -1);
      in_place = x32;
      table->log_softmax_row[f32](in_place.data(), in_place.data(), n, nullptr, nullptr);
      CHECK(in_place == y32);
      table->logsumexp_rows[f64](x64.data(), y64.data(), 1, n);
      table->logsumexp_rows[f32](x32.data(), y32.data(), 1, n);
      CHECK(first_off(kiln::tensor<double>({y64[0]}), lse_want64) == -1);
      CHECK(first_off(kiln::tensor<float>({y32[0]}), lse_want32) == -1);
      for (const float special :
           {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        CAPTURE(special);
        std::vector<float> row = x32;
        const auto at = static_cast<std::size_t>(n / 2);
        row[at] = special;
        table->softmax_row[f32](row.data(), y32.data(), n, nullptr, nullptr);
        bool as_expected = true;
        for (std::size_t i = 0; i < y32.size(); ++i)
          as_expected =
              as_expected && (std::isnan(special) || i == at ? std::isnan(y32[i]) : y32[i] == 0.0f);
        CHECK(as_expected);
        table->log_softmax_row[f32](row.data(), y32.data(), n, nullptr, nullptr);
        bool log_as_expected = true;
        for (std::size_t i = 0; i < y32.size(); ++i)
          log_as_expected =
              log_as_expected &&
              (std::isnan(special) || i == at ? std::isnan(y32[i])
                                              : y32[i] == -std::numeric_limits<float>::infinity());
        CHECK(log_as_expected);
      }
    }
  }
}

TEST_CASE("every instruction set's log_softmax and logsumexp sums are accurate over wide rows",
          "[reduce][simd]") {
  // Their sums of exps take a cheaper exp than the exp primitive's (ExpOfNonPositiveForSumOp):
  // f = y log2(e) - n in one step, whose error grows with |y|, and 2^f of degree 5. Rows spread
  // over [-120, 0] below their max (past the clamp at -88 or -104, where the terms vanish), rows
  // of one value repeated (every term exactly 1: logsumexp = max + log n), and rows with most of
  // their weight far below the max, all against the definition in long double.
  const auto tables = kiln::test::row_tables_of_this_cpu();
  const auto f32 = kiln::detail::dtype_index(kiln::f32);
  for (const std::int64_t n : {9, 33, 100, 1024, 5000}) {
    CAPTURE(n);
    const std::vector<float> spread =
        kiln::random::uniform({n}, -120, 0, static_cast<std::uint64_t>(n)).to_vector<float>();
    std::vector<float> heavy_tail(static_cast<std::size_t>(n), -9.5f);
    heavy_tail[static_cast<std::size_t>(n / 2)] = 0.5f;
    for (const std::vector<float>& x32 :
         {spread, std::vector<float>(static_cast<std::size_t>(n), 37.25f), heavy_tail}) {
      const std::vector<double> x64(x32.begin(), x32.end());
      const LogSoftmaxReference log_want = reference_log_softmax(x64, x32.size(), true);
      const LogSoftmaxReference lse_want = reference_logsumexp(x64, x32.size(), true);
      for (const auto* table : tables) {
        CAPTURE(table->isa_name);
        std::vector<float> y(x32.size());
        table->log_softmax_row[f32](x32.data(), y.data(), n, nullptr, nullptr);
        CHECK(first_off(kiln::tensor<float>(y), log_want) == -1);
        table->logsumexp_rows[f32](x32.data(), y.data(), 1, n);
        CHECK(first_off(kiln::tensor<float>({y[0]}), lse_want) == -1);
      }
    }
  }
}

namespace {

/// Bitwise equality of two rows' values, NaN equal to NaN.
template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::memcmp(&a[i], &b[i], sizeof(T)) == 0 || (a[i] != a[i] && b[i] != b[i])))
      return false;
  return true;
}

/// Rows of n that take each of logsumexp's paths: plain logits, a NaN, +inf, -inf only, a zero
/// max of both signs (-0 before +0 in one row, after it in the next), a spread past the exps'
/// clamp, one value repeated, -inf beside finite values.
template <class T>
std::vector<T> logsumexp_test_rows(std::int64_t n) {
  const std::vector<float> normal =
      kiln::random::normal({9 * n}, 0, 3, static_cast<std::uint64_t>(n)).to_vector<float>();
  const std::vector<float> spread =
      kiln::random::uniform({n}, -120, 0, static_cast<std::uint64_t>(n + 1)).to_vector<float>();
  std::vector<T> x(normal.begin(), normal.end());
  const auto at = [&](std::int64_t row, std::int64_t i) -> T& {
    return x[static_cast<std::size_t>(row * n + i)];
  };
  constexpr T inf = std::numeric_limits<T>::infinity();
  at(1, n / 2) = std::numeric_limits<T>::quiet_NaN();
  at(2, n - 1) = inf;
  for (std::int64_t i = 0; i < n; ++i) {
    at(3, i) = -inf;
    at(4, i) = -std::abs(at(4, i));
    at(5, i) = -std::abs(at(5, i));
    at(6, i) = static_cast<T>(spread[static_cast<std::size_t>(i)]);
    at(7, i) = T(2.5);
    if (i % 3 == 1) at(8, i) = -inf;
  }
  at(4, 0) = T(-0.0);
  at(4, n - 1) = T(0.0);
  at(5, 0) = T(0.0);
  at(5, n - 1) = T(-0.0);
  return x;
}

}  // namespace

TEST_CASE("every instruction set's logsumexp rows give each row the value it has alone",
          "[reduce][simd]") {
  // logsumexp_rows reads each row's range while the row before adds its exps (at AVX-512), in
  // steps of the exp loop's size rather than the range pass's: the values must not change.
  const auto tables = kiln::test::row_tables_of_this_cpu();
  const auto f32 = kiln::detail::dtype_index(kiln::f32), f64 = kiln::detail::dtype_index(kiln::f64);
  for (const std::int64_t n : {1, 3, 8, 15, 16, 17, 31, 32, 33, 64, 100, 1000, 1024, 1031}) {
    CAPTURE(n);
    const std::vector<float> x32 = logsumexp_test_rows<float>(n);
    const std::vector<double> x64 = logsumexp_test_rows<double>(n);
    constexpr std::int64_t rows = 9;
    for (const auto* table : tables) {
      CAPTURE(table->isa_name);
      std::vector<float> together32(rows), alone32(rows);
      std::vector<double> together64(rows), alone64(rows);
      table->logsumexp_rows[f32](x32.data(), together32.data(), rows, n);
      table->logsumexp_rows[f64](x64.data(), together64.data(), rows, n);
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto i = static_cast<std::size_t>(r);
        table->logsumexp_rows[f32](x32.data() + r * n, &alone32[i], 1, n);
        table->logsumexp_rows[f64](x64.data() + r * n, &alone64[i], 1, n);
      }
      CHECK(same_values(together32, alone32));
      CHECK(same_values(together64, alone64));
      // The rows of special values have the composite's values.
      CHECK(std::isnan(together32[1]));
      CHECK(together32[2] == std::numeric_limits<float>::infinity());
      CHECK(together32[3] == -std::numeric_limits<float>::infinity());
      CHECK(std::abs(together32[7] - (2.5f + std::log(static_cast<float>(n)))) <=
            4e-6f * (2.5f + std::log(static_cast<float>(n))));
    }
  }
}

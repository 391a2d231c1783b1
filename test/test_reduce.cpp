// Reductions, argmax/argmin, mean, logsumexp, softmax and log_softmax, checked against
// reference values computed here with plain loops.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "core/dtype_visit.hpp"

#include "core/tensor_impl.hpp"

namespace {

using Catch::Matchers::StartsWith;
using kiln::DType;
using kiln::Shape;
using kiln::Tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using kiln::detail::visit_dtype;

/// A contiguous tensor of `dtype` holding `values` (converted).
Tensor make(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> typed;
    for (double v : values) typed.push_back(static_cast<T>(v));
    t = kiln::tensor(typed, shape);
  });
  return t;
}

/// The same logical values as make(values, shape, dtype), stored transposed (reversed
/// axes) and read through a strided view, so the tensor is not contiguous.
Tensor make_transposed_view(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Shape reversed, view_strides;
  for (std::size_t d = shape.size(); d-- > 0;) reversed.push_back(shape[d]);
  const Shape reversed_strides = kiln::detail::contiguous_strides(reversed);
  for (std::size_t d = shape.size(); d-- > 0;) view_strides.push_back(reversed_strides[d]);
  const Shape logical_strides = kiln::detail::contiguous_strides(shape);
  std::vector<double> storage(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::int64_t rest = static_cast<std::int64_t>(i), offset = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      offset += rest / logical_strides[d] * view_strides[d];
      rest %= logical_strides[d];
    }
    storage[static_cast<std::size_t>(offset)] = values[i];
  }
  const Tensor base = make(storage, reversed, dtype);
  return kiln::detail::make_view(base, shape, view_strides, 0);
}

/// The same logical values as make(values, shape, dtype), stored with `pad` more elements in
/// each row of the last dim and read through a slice-like view: rows a fixed stride apart,
/// which the reductions read in place (kernel's reduce_reads_in_place) when the reduced axes
/// are all the outer ones or all the inner ones.
Tensor make_row_slice(const std::vector<double>& values, const Shape& shape, DType dtype,
                      std::int64_t pad) {
  Shape padded = shape;
  padded[padded.size() - 1] += pad;
  const std::int64_t last = shape[shape.size() - 1],
                     rows = shape.numel() / std::max<std::int64_t>(last, 1);
  std::vector<double> storage(static_cast<std::size_t>(padded.numel()), -7.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < last; ++k)
      storage[static_cast<std::size_t>(r * (last + pad) + k)] =
          values[static_cast<std::size_t>(r * last + k)];
  const Tensor base = make(storage, padded, dtype);
  return kiln::detail::make_view(base, shape, kiln::detail::contiguous_strides(padded), 0);
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (T v : t.to_vector<T>()) out.push_back(static_cast<double>(v));
  });
  return out;
}

bool same_value(double got, double want, DType dtype) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  const double tol = dtype == DType::f32 ? 1e-5 : dtype == DType::f64 ? 1e-12 : 0.0;
  return std::abs(got - want) <= tol * std::max(1.0, std::abs(want));
}

void check_values(const Tensor& t, const std::vector<double>& want, DType dtype) {
  const std::vector<double> got = values_of(t);
  REQUIRE(got.size() == want.size());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = got.size(); i-- > 0;)
    if (!same_value(got[i], want[i], dtype)) {
      ++mismatches;
      first = i;
    }
  INFO("first mismatch at element " << first << ": got " << (got.empty() ? 0.0 : got[first])
                                    << ", want " << (want.empty() ? 0.0 : want[first]));
  CHECK(mismatches == 0);
}

// ---------------------------------------------------------------- reference reductions

enum class Op { sum, prod, max, min, all, any, mean };

const char* op_name(Op op) {
  switch (op) {
    case Op::sum:
      return "sum";
    case Op::prod:
      return "prod";
    case Op::max:
      return "max";
    case Op::min:
      return "min";
    case Op::all:
      return "all";
    case Op::any:
      return "any";
    case Op::mean:
      return "mean";
  }
  return "?";
}

struct Expected {
  Shape shape;
  std::vector<double> values;
};

/// Reduced axes as a mask (axes may be negative; nullopt = every axis).
std::vector<bool> axis_mask(const Shape& shape,
                            const std::optional<std::vector<std::int64_t>>& axes) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::vector<bool> mask(shape.size(), !axes.has_value());
  if (axes)
    for (auto a : *axes) mask[static_cast<std::size_t>(a < 0 ? a + rank : a)] = true;
  return mask;
}

/// Output index of each input element, and the output shape.
Expected reduce_layout(const Shape& shape, const std::vector<bool>& mask, bool keepdims,
                       std::vector<std::size_t>& out_index) {
  Expected e;
  Shape kept;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!mask[d]) kept.push_back(shape[d]);
    if (!mask[d] || keepdims) e.shape.push_back(mask[d] ? 1 : shape[d]);
  }
  const Shape in_strides = kiln::detail::contiguous_strides(shape);
  const Shape kept_strides = kiln::detail::contiguous_strides(kept);
  out_index.assign(static_cast<std::size_t>(shape.numel()), 0);
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    std::int64_t rest = i, o = 0;
    std::size_t k = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::int64_t coord = rest / in_strides[d];
      rest %= in_strides[d];
      if (!mask[d]) o += coord * kept_strides[k++];
    }
    out_index[static_cast<std::size_t>(i)] = static_cast<std::size_t>(o);
  }
  e.values.resize(static_cast<std::size_t>(kept.numel()));
  return e;
}

Expected reference_reduce(Op op, const std::vector<double>& x, const Shape& shape,
                          const std::vector<bool>& mask, bool keepdims) {
  std::vector<std::size_t> out_index;
  Expected e = reduce_layout(shape, mask, keepdims, out_index);
  const double init = op == Op::prod || op == Op::all ? 1.0
                      : op == Op::max                 ? -kInf
                      : op == Op::min                 ? kInf
                                                      : 0.0;
  std::vector<double> count(e.values.size(), 0.0);
  std::fill(e.values.begin(), e.values.end(), init);
  for (std::size_t i = 0; i < x.size(); ++i) {
    double& acc = e.values[out_index[i]];
    count[out_index[i]] += 1;
    switch (op) {
      case Op::sum:
      case Op::mean:
        acc += x[i];
        break;
      case Op::prod:
        acc *= x[i];
        break;
      case Op::max:
        acc = std::max(acc, x[i]);
        break;
      case Op::min:
        acc = std::min(acc, x[i]);
        break;
      case Op::all:
        acc = acc != 0 && x[i] != 0 ? 1 : 0;
        break;
      case Op::any:
        acc = acc != 0 || x[i] != 0 ? 1 : 0;
        break;
    }
  }
  if (op == Op::mean)
    for (std::size_t i = 0; i < count.size(); ++i) e.values[i] /= count[i];
  return e;
}

/// argmax/argmin along one axis: first index of the extremum.
Expected reference_arg(bool is_max, const std::vector<double>& x, const Shape& shape,
                       std::int64_t axis, bool keepdims) {
  std::vector<bool> mask(shape.size(), false);
  mask[static_cast<std::size_t>(axis)] = true;
  std::vector<std::size_t> out_index;
  Expected e = reduce_layout(shape, mask, keepdims, out_index);
  std::vector<double> best(e.values.size(), kNaN);
  std::vector<double> seen(e.values.size(), 0.0);
  const std::int64_t stride =
      kiln::detail::contiguous_strides(shape)[static_cast<std::size_t>(axis)];
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t o = out_index[i];
    const bool better = seen[o] == 0 || (is_max ? x[i] > best[o] : x[i] < best[o]);
    if (better) {
      best[o] = x[i];
      e.values[o] = static_cast<double>(static_cast<std::int64_t>(i) / stride %
                                        shape[static_cast<std::size_t>(axis)]);
    }
    seen[o] = 1;
  }
  return e;
}

Tensor run_reduce(Op op, const Tensor& x, const std::optional<std::vector<std::int64_t>>& axes,
                  bool keepdims) {
  using Overload = Tensor (*)(const Tensor&, const std::vector<std::int64_t>&, bool);
  using AllAxes = Tensor (*)(const Tensor&);
  Overload with_axes = nullptr;
  AllAxes every = nullptr;
  switch (op) {
    case Op::sum:
      with_axes = kiln::sum;
      every = kiln::sum;
      break;
    case Op::prod:
      with_axes = kiln::prod;
      every = kiln::prod;
      break;
    case Op::max:
      with_axes = kiln::max;
      every = kiln::max;
      break;
    case Op::min:
      with_axes = kiln::min;
      every = kiln::min;
      break;
    case Op::all:
      with_axes = kiln::all;
      every = kiln::all;
      break;
    case Op::any:
      with_axes = kiln::any;
      every = kiln::any;
      break;
    case Op::mean:
      with_axes = kiln::mean;
      every = kiln::mean;
      break;
  }
  if (axes) return with_axes(x, *axes, keepdims);
  if (!keepdims) return every(x);
  std::vector<std::int64_t> all_axes;
  for (std::int64_t d = 0; d < x.ndim(); ++d) all_axes.push_back(d);
  return with_axes(x, all_axes, true);
}

// Input patterns: arithmetic data for sum/max/min, products that stay exact, and sparse and
// dense zero patterns for all/any.
double arithmetic_value(std::int64_t i) { return static_cast<double>((i * 7) % 11 - 5); }
double product_value(std::int64_t i) {
  return i % 4999 == 3 ? 2.0 : i % 4999 == 17 ? -3.0 : i % 3 == 1 ? -1.0 : 1.0;
}
double sparse_value(std::int64_t i) { return i % 6 == 0 ? 3.0 : 0.0; }
double dense_value(std::int64_t i) { return i % 6 == 0 ? 0.0 : -2.0; }

std::vector<double> generate(const Shape& shape, double (*value)(std::int64_t)) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<std::int64_t>(i));
  return v;
}

}  // namespace

TEST_CASE("reductions match reference loops over ops, dtypes, axes and layouts", "[reduce]") {
  struct Pattern {
    Op op;
    double (*value)(std::int64_t);
  };
  const std::vector<Pattern> patterns = {
      {Op::sum, arithmetic_value}, {Op::prod, product_value}, {Op::max, arithmetic_value},
      {Op::min, arithmetic_value}, {Op::all, sparse_value},   {Op::all, dense_value},
      {Op::any, sparse_value},     {Op::any, dense_value},
  };
  using AxisList = std::optional<std::vector<std::int64_t>>;
  const std::vector<AxisList> rank3_axes = {
      std::vector<std::int64_t>{},     std::vector<std::int64_t>{0},
      std::vector<std::int64_t>{1},    std::vector<std::int64_t>{0, 2},
      std::vector<std::int64_t>{-1},   std::vector<std::int64_t>{2, 0, 1},
      std::vector<std::int64_t>{1, 2}, std::nullopt,
  };
  struct ShapeCase {
    Shape shape;
    std::vector<AxisList> axis_lists;
  };
  // Small, with size-1 dims, large enough for the pairwise paths (rows > 32, rows > 64
  // elements), and ranks 4-5 where up to three separate groups of axes are reduced.
  const std::vector<ShapeCase> shape_cases = {
      {{3, 4, 5}, rank3_axes},
      {{2, 1, 3}, rank3_axes},
      {{37, 9, 150}, rank3_axes},
      {{3, 4, 5, 6},
       {std::vector<std::int64_t>{0, 2}, std::vector<std::int64_t>{1, 3},
        std::vector<std::int64_t>{0, 3}, std::vector<std::int64_t>{-4, -2},
        std::vector<std::int64_t>{0, 1, 3}}},
      {{2, 3, 4, 5, 2},
       {std::vector<std::int64_t>{0, 2, 4}, std::vector<std::int64_t>{1, 3},
        std::vector<std::int64_t>{0, 4}, std::vector<std::int64_t>{0, 1, 3, 4}}},
      {{4, 1, 5, 1}, {std::vector<std::int64_t>{1, 3}, std::vector<std::int64_t>{0, 1}}},
  };
  const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::i32, DType::i64,
                                     DType::boolean};
  int cases = 0;
  std::size_t axis_list_count = 0;
  for (const auto& shape_case : shape_cases) axis_list_count += shape_case.axis_lists.size();
  for (const auto& pattern : patterns)
    for (const auto& [shape, axis_lists] : shape_cases)
      for (DType dtype : dtypes) {
        if (dtype == DType::boolean && (pattern.op == Op::sum || pattern.op == Op::prod)) continue;
        std::vector<double> x = generate(shape, pattern.value);
        if (dtype == DType::boolean)
          for (double& v : x) v = v != 0 ? 1.0 : 0.0;
        const Tensor contiguous = make(x, shape, dtype);
        const Tensor strided = make_transposed_view(x, shape, dtype);
        REQUIRE_FALSE(strided.is_contiguous());
        const Tensor row_slice = make_row_slice(x, shape, dtype, 3);
        REQUIRE_FALSE(row_slice.is_contiguous());
        for (const auto& axes : axis_lists)
          for (bool keepdims : {false, true}) {
            const Expected want =
                reference_reduce(pattern.op, x, shape, axis_mask(shape, axes), keepdims);
            const DType out_dtype =
                pattern.op == Op::all || pattern.op == Op::any ? DType::boolean : dtype;
            const char* layouts[] = {"contiguous", "transposed", "row slice"};
            int layout = 0;
            for (const Tensor& input : {contiguous, strided, row_slice}) {
              INFO(op_name(pattern.op)
                   << " " << kiln::dtype_name(dtype) << " shape " << shape.to_string() << " axes "
                   << (axes ? Shape(*axes).to_string() : "all") << " keepdims " << keepdims
                   << " layout " << layouts[layout++]);
              const Tensor got = run_reduce(pattern.op, input, axes, keepdims);
              REQUIRE(got.dtype() == out_dtype);
              REQUIRE(got.shape() == want.shape);
              check_values(got, want.values, out_dtype);
              ++cases;
            }
          }
      }
  // 8 patterns x 5 dtypes, minus bool sum/prod; keepdims on/off; contiguous, transposed and
  // row-sliced.
  CHECK(cases == static_cast<int>((8 * 5 - 2) * axis_list_count * 2 * 3));
}

TEST_CASE("argmax and argmin match reference loops, first index wins", "[reduce]") {
  const std::vector<Shape> shapes = {{3, 4, 5}, {2, 1, 3}, {37, 9, 150}};
  const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::i32, DType::i64,
                                     DType::boolean};
  for (const auto& shape : shapes)
    for (DType dtype : dtypes) {
      // Few distinct values, so ties are common.
      std::vector<double> x =
          generate(shape, [](std::int64_t i) { return static_cast<double>((i * 5) % 7 % 4); });
      if (dtype == DType::boolean)
        for (double& v : x) v = v > 1 ? 1.0 : 0.0;
      const Tensor contiguous = make(x, shape, dtype);
      const Tensor strided = make_transposed_view(x, shape, dtype);
      for (std::int64_t axis : {0, 1, 2, -1, -3})
        for (bool keepdims : {false, true})
          for (bool is_max : {true, false})
            for (const Tensor& input : {contiguous, strided}) {
              const std::int64_t normalized = axis < 0 ? axis + 3 : axis;
              const Expected want = reference_arg(is_max, x, shape, normalized, keepdims);
              INFO((is_max ? "argmax " : "argmin ")
                   << kiln::dtype_name(dtype) << " shape " << shape.to_string() << " axis " << axis
                   << " keepdims " << keepdims);
              const Tensor got = is_max ? kiln::argmax(input, axis, keepdims)
                                        : kiln::argmin(input, axis, keepdims);
              REQUIRE(got.dtype() == DType::i64);
              REQUIRE(got.shape() == want.shape);
              check_values(got, want.values, DType::i64);
            }
    }
}

TEST_CASE("argmax and argmin without an axis use the flattened tensor", "[reduce]") {
  struct Row {
    std::vector<double> values;
    Shape shape;
    std::int64_t argmax;
    std::int64_t argmin;
  };
  const std::vector<Row> rows = {
      {{3, 1, 4, 1, 5, 9, 2, 6}, {2, 4}, 5, 1},
      {{7, 7, 7}, {3}, 0, 0},
      {{2, -8, 9, 9, -8, 0}, {3, 1, 2}, 2, 1},
      {{42}, {}, 0, 0},
  };
  for (const auto& row : rows)
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      const Tensor x = make(row.values, row.shape, dtype);
      const Tensor amax = kiln::argmax(x);
      const Tensor amin = kiln::argmin(x);
      CHECK(amax.dtype() == DType::i64);
      CHECK(amax.shape() == Shape{});
      CHECK(amax.item<std::int64_t>() == row.argmax);
      CHECK(amin.item<std::int64_t>() == row.argmin);
    }
  // Non-contiguous: [[0, 5, 2], [9, 1, 3]] stored transposed.
  const Tensor t = make_transposed_view({0, 5, 2, 9, 1, 3}, {2, 3}, DType::f32);
  CHECK(kiln::argmax(t).item<std::int64_t>() == 3);
  CHECK(kiln::argmin(t).item<std::int64_t>() == 0);
}

TEST_CASE("rank-0 inputs reduce to themselves", "[reduce]") {
  const Tensor s = kiln::scalar(2.5f);
  for (Op op : {Op::sum, Op::prod, Op::max, Op::min, Op::mean}) {
    INFO(op_name(op));
    const Tensor all_axes = run_reduce(op, s, std::nullopt, false);
    const Tensor no_axes = run_reduce(op, s, std::vector<std::int64_t>{}, true);
    CHECK(all_axes.shape() == Shape{});
    CHECK(no_axes.shape() == Shape{});
    CHECK(all_axes.item<float>() == 2.5f);
    CHECK(no_axes.item<float>() == 2.5f);
  }
  CHECK(kiln::all(kiln::scalar(0.0)).item<bool>() == false);
  CHECK(kiln::any(kiln::scalar(std::int32_t{-3})).item<bool>() == true);
  CHECK(kiln::argmax(kiln::scalar(1.0)).item<std::int64_t>() == 0);
  CHECK(kiln::logsumexp(kiln::scalar(3.0)).item<double>() == Approx(3.0));
  CHECK_THROWS_WITH(kiln::sum(s, {0}), StartsWith("[sum] axis 0 out of range for rank 0"));
  CHECK_THROWS_WITH(kiln::argmax(s, 0), StartsWith("[argmax] axis 0 out of range for rank 0"));
  CHECK_THROWS_WITH(kiln::softmax(s), StartsWith("[softmax] axis -1 out of range for rank 0"));
}

TEST_CASE("zero-size inputs reduce to identities or empty outputs", "[reduce]") {
  struct Row {
    Op op;
    Shape shape;
    std::vector<std::int64_t> axes;
    Shape out_shape;
    double fill;
  };
  const std::vector<Row> rows = {
      {Op::sum, {0, 3}, {0}, {3}, 0.0},   {Op::sum, {0, 3}, {1}, {0}, 0.0},
      {Op::sum, {0, 3}, {0, 1}, {}, 0.0}, {Op::sum, {2, 0, 3}, {1}, {2, 3}, 0.0},
      {Op::prod, {0, 3}, {0}, {3}, 1.0},  {Op::prod, {0}, {0}, {}, 1.0},
      {Op::all, {0, 3}, {0}, {3}, 1.0},   {Op::any, {0, 3}, {0}, {3}, 0.0},
      {Op::all, {4, 0}, {1}, {4}, 1.0},   {Op::any, {4, 0}, {0, 1}, {}, 0.0},
      {Op::max, {0, 3}, {1}, {0}, 0.0},   {Op::min, {3, 0}, {0}, {0}, 0.0},
      {Op::max, {0, 3}, {}, {0, 3}, 0.0},
  };
  for (const auto& row : rows)
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      INFO(op_name(row.op) << " " << row.shape.to_string() << " axes "
                           << Shape(row.axes).to_string());
      const Tensor x = kiln::zeros(row.shape, dtype);
      const Tensor got = run_reduce(row.op, x, row.axes, false);
      REQUIRE(got.shape() == row.out_shape);
      const DType out_dtype = row.op == Op::all || row.op == Op::any ? DType::boolean : dtype;
      check_values(got,
                   std::vector<double>(static_cast<std::size_t>(row.out_shape.numel()), row.fill),
                   out_dtype);
    }
  CHECK(kiln::sum(kiln::zeros({0, 2}, DType::i32)).item<std::int32_t>() == 0);
  CHECK(kiln::argmax(kiln::zeros({0, 3}), 1).shape() == Shape{0});
  CHECK(std::isnan(kiln::mean(kiln::zeros({0})).item<float>()));
  CHECK(kiln::logsumexp(kiln::zeros({2, 0}), {1}).to_vector<float>() ==
        std::vector<float>{-INFINITY, -INFINITY});
  CHECK(kiln::softmax(kiln::zeros({2, 0})).shape() == Shape{2, 0});
}

TEST_CASE("float sums stay accurate over a million elements", "[reduce]") {
  // A constant (where naive float summation is off by ~1%) and a pseudo-random pattern.
  const std::vector<std::function<float(std::int64_t)>> patterns = {
      [](std::int64_t) { return 0.1f; },
      [](std::int64_t i) { return 1.0f + static_cast<float>(i * 7919 % 1000) / 997.0f; },
  };
  const std::int64_t n = 1 << 20, cols = 4;
  for (std::size_t p = 0; p < patterns.size(); ++p) {
    INFO("pattern " << p);
    std::vector<float> values(static_cast<std::size_t>(n));
    double exact = 0.0;
    std::vector<double> column_exact(cols, 0.0), first_half_exact(cols, 0.0);
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = patterns[p](i);
      values[static_cast<std::size_t>(i)] = v;
      exact += v;
      column_exact[static_cast<std::size_t>(i % cols)] += v;
      if (i < n / 2) first_half_exact[static_cast<std::size_t>(i % cols)] += v;
    }
    const Tensor flat = kiln::tensor(values);
    CHECK(std::abs(kiln::sum(flat).item<float>() - exact) <= 1e-5 * exact);
    const double exact_mean = exact / static_cast<double>(n);
    CHECK(std::abs(kiln::mean(flat).item<float>() - exact_mean) <= 1e-5 * exact_mean);

    // Over the outer axis of [n/4, 4] and the middle axis of [2, n/8, 4].
    const std::vector<float> column_sums =
        kiln::sum(kiln::tensor(values, {n / cols, cols}), {0}).to_vector<float>();
    const std::vector<float> middle_sums =
        kiln::sum(kiln::tensor(values, {2, n / cols / 2, cols}), {1}).to_vector<float>();
    for (std::size_t c = 0; c < static_cast<std::size_t>(cols); ++c) {
      INFO("column " << c);
      CHECK(std::abs(column_sums[c] - column_exact[c]) <= 1e-5 * column_exact[c]);
      CHECK(std::abs(middle_sums[c] - first_half_exact[c]) <= 1e-5 * first_half_exact[c]);
    }
  }
}

TEST_CASE("NaN propagates through max/min and wins argmax/argmin", "[reduce]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(kiln::dtype_name(dtype));
    const Tensor x = make({1, kNaN, 3, kNaN, -2, 0}, {2, 3}, dtype);
    check_values(kiln::max(x), {kNaN}, dtype);
    check_values(kiln::min(x), {kNaN}, dtype);
    check_values(kiln::max(x, {0}), {kNaN, kNaN, 3}, dtype);
    check_values(kiln::min(x, {1}), {kNaN, kNaN}, dtype);
    check_values(kiln::max(make({1, 2, 3, 4, -2, 0}, {2, 3}, dtype), {1}), {3, 4}, dtype);
    CHECK(kiln::argmax(x).item<std::int64_t>() == 1);
    CHECK(kiln::argmin(x).item<std::int64_t>() == 1);
    check_values(kiln::argmax(x, 0), {1, 0, 0}, DType::i64);
    check_values(kiln::argmin(x, 1), {1, 0}, DType::i64);
    check_values(kiln::argmax(make({1, kNaN, kNaN, 2, 5, kNaN}, {3, 2}, dtype), 0), {1, 0},
                 DType::i64);

    // NaN deep inside long rows and tall columns (the pairwise and multi-lane paths).
    std::vector<double> long_row(1000, 1.0);
    long_row[701] = kNaN;
    long_row[900] = kNaN;
    check_values(kiln::max(make(long_row, {1000}, dtype)), {kNaN}, dtype);
    check_values(kiln::min(make(long_row, {1000}, dtype)), {kNaN}, dtype);
    CHECK(kiln::argmax(make(long_row, {1000}, dtype)).item<std::int64_t>() == 701);
    check_values(kiln::max(make(long_row, {100, 10}, dtype), {0}),
                 {kNaN, kNaN, 1, 1, 1, 1, 1, 1, 1, 1}, dtype);
    check_values(kiln::argmin(make(long_row, {100, 10}, dtype), 0),
                 {90, 70, 0, 0, 0, 0, 0, 0, 0, 0}, DType::i64);
    CHECK(std::isnan(values_of(kiln::sum(make(long_row, {1000}, dtype)))[0]));

    // all/any: NaN is nonzero, -0.0 is zero.
    CHECK(kiln::any(make({0, kNaN}, {2}, dtype)).item<bool>());
    CHECK(kiln::all(make({kNaN}, {1}, dtype)).item<bool>());
    CHECK_FALSE(kiln::any(make({-0.0, 0.0}, {2}, dtype)).item<bool>());
  }
}

TEST_CASE("integer sums and products wrap", "[reduce]") {
  constexpr std::int32_t i32_max = std::numeric_limits<std::int32_t>::max();
  constexpr std::int32_t i32_min = std::numeric_limits<std::int32_t>::min();
  constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
  CHECK(kiln::sum(kiln::tensor<std::int32_t>({i32_max, 1})).item<std::int32_t>() == i32_min);
  CHECK(kiln::sum(kiln::tensor<std::int32_t>({i32_min, -1})).item<std::int32_t>() == i32_max);
  CHECK(kiln::prod(kiln::tensor<std::int32_t>({65536, 65536})).item<std::int32_t>() == 0);
  CHECK(kiln::prod(kiln::tensor<std::int32_t>({i32_min, -1})).item<std::int32_t>() == i32_min);
  CHECK(kiln::sum(kiln::tensor<std::int64_t>({i64_max, 1})).item<std::int64_t>() == i64_min);
  CHECK(kiln::prod(kiln::tensor<std::int64_t>({std::int64_t{1} << 62, 4})).item<std::int64_t>() ==
        0);
  CHECK(kiln::prod(kiln::tensor<std::int64_t>({i64_min, -1})).item<std::int64_t>() == i64_min);
  // Column path: [[max, 1], [1, max]] summed over axis 0.
  CHECK(kiln::sum(kiln::tensor<std::int32_t>({i32_max, 1, 1, i32_max}, {2, 2}), {0})
            .to_vector<std::int32_t>() == std::vector<std::int32_t>{i32_min, i32_min});
  // Many lanes: 1000 copies of max wrap to -1000 (mod 2^32).
  CHECK(kiln::sum(kiln::full({1000}, i32_max, DType::i32)).item<std::int32_t>() == -1000);
  CHECK(kiln::max(kiln::tensor<std::int32_t>({i32_min, i32_max})).item<std::int32_t>() == i32_max);
  CHECK(kiln::min(kiln::tensor<std::int64_t>({i64_max, i64_min})).item<std::int64_t>() == i64_min);
}

TEST_CASE("mean of floats", "[reduce]") {
  const std::vector<Shape> shapes = {{3, 4, 5}, {37, 9, 150}};
  for (const auto& shape : shapes)
    for (DType dtype : {DType::f32, DType::f64})
      for (const auto& axes : std::vector<std::optional<std::vector<std::int64_t>>>{
               std::nullopt, std::vector<std::int64_t>{}, std::vector<std::int64_t>{0, 2},
               std::vector<std::int64_t>{-1}})
        for (bool keepdims : {false, true}) {
          const std::vector<double> x = generate(shape, arithmetic_value);
          const Expected want =
              reference_reduce(Op::mean, x, shape, axis_mask(shape, axes), keepdims);
          const Tensor got =
              run_reduce(Op::mean, make_transposed_view(x, shape, dtype), axes, keepdims);
          REQUIRE(got.shape() == want.shape);
          check_values(got, want.values, dtype);
        }
}

TEST_CASE("logsumexp is stable", "[reduce]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(kiln::dtype_name(dtype));
    check_values(kiln::logsumexp(make({1000, 1000}, {2}, dtype)), {1000 + std::log(2.0)}, dtype);
    check_values(kiln::logsumexp(make({-1000, -1000}, {2}, dtype)), {-1000 + std::log(2.0)}, dtype);
    check_values(kiln::logsumexp(make({-kInf, -kInf, 0, -kInf}, {2, 2}, dtype), {1}), {-kInf, 0},
                 dtype);
    check_values(kiln::logsumexp(make({kInf, 1}, {2}, dtype)), {kInf}, dtype);
    check_values(kiln::logsumexp(make({kNaN, 1}, {2}, dtype)), {kNaN}, dtype);

    const Shape shape{3, 4, 5};
    std::vector<double> x = generate(shape, arithmetic_value);
    for (const auto& axes : std::vector<std::vector<std::int64_t>>{{}, {0}, {1}, {0, 2}, {-1}})
      for (bool keepdims : {false, true}) {
        INFO("axes " << Shape(axes).to_string() << " keepdims " << keepdims);
        std::vector<double> e(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) e[i] = std::exp(x[i]);
        Expected want = reference_reduce(Op::sum, e, shape, axis_mask(shape, axes), keepdims);
        for (double& v : want.values) v = std::log(v);
        const Tensor got = kiln::logsumexp(make(x, shape, dtype), axes, keepdims);
        REQUIRE(got.shape() == want.shape);
        check_values(got, want.values, dtype);
      }
    const Tensor all_axes = kiln::logsumexp(make(x, shape, dtype));
    CHECK(all_axes.shape() == Shape{});
  }
}

TEST_CASE("softmax and log_softmax are stable", "[reduce]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(kiln::dtype_name(dtype));
    const double e1 = std::exp(-1.0);
    check_values(kiln::softmax(make({1000, 1000, 1000, 999}, {4}, dtype)),
                 {1 / (3 + e1), 1 / (3 + e1), 1 / (3 + e1), e1 / (3 + e1)}, dtype);
    check_values(kiln::softmax(make({-kInf, 0, -kInf, 0}, {4}, dtype)), {0, 0.5, 0, 0.5}, dtype);
    check_values(kiln::log_softmax(make({1000, 1000}, {2}, dtype)),
                 {-std::log(2.0), -std::log(2.0)}, dtype);
    check_values(kiln::log_softmax(make({-kInf, 0}, {2}, dtype)), {-kInf, 0}, dtype);

    const Shape shape{3, 4, 5};
    const std::vector<double> x = generate(shape, arithmetic_value);
    for (std::int64_t axis : {0, 1, 2, -1, -2}) {
      INFO("axis " << axis);
      const std::int64_t a = axis < 0 ? axis + 3 : axis;
      std::vector<double> e(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) e[i] = std::exp(x[i]);
      const std::vector<bool> mask = axis_mask(shape, std::vector<std::int64_t>{a});
      const Expected sums = reference_reduce(Op::sum, e, shape, mask, true);
      std::vector<std::size_t> out_index;
      reduce_layout(shape, mask, true, out_index);
      std::vector<double> soft(x.size()), log_soft(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        soft[i] = e[i] / sums.values[out_index[i]];
        log_soft[i] = x[i] - std::log(sums.values[out_index[i]]);
      }
      const Tensor input = make_transposed_view(x, shape, dtype);
      const Tensor s = kiln::softmax(input, axis);
      REQUIRE(s.shape() == shape);
      check_values(s, soft, dtype);
      check_values(
          kiln::sum(s, {axis}),
          std::vector<double>(
              x.size() / static_cast<std::size_t>(shape[static_cast<std::size_t>(a)]), 1.0),
          dtype);
      check_values(kiln::log_softmax(input, axis), log_soft, dtype);
    }
  }
}

TEST_CASE("reductions reject bad arguments with the op name first", "[reduce]") {
  const Tensor undefined;
  const Tensor x = kiln::zeros({2, 3});
  const Tensor ints = kiln::zeros({2, 3}, DType::i32);
  const Tensor flags = kiln::zeros({2, 3}, DType::boolean);
  const Tensor empty = kiln::zeros({0, 3});
  struct Row {
    std::function<Tensor()> call;
    std::string prefix;
  };
  const std::vector<Row> rows = {
      {[&] { return kiln::sum(undefined); }, "[sum] argument 0 is an undefined tensor"},
      {[&] { return kiln::sum(undefined, {0}); }, "[sum] argument 0 is an undefined tensor"},
      {[&] { return kiln::mean(undefined); }, "[mean] argument 0 is an undefined tensor"},
      {[&] { return kiln::prod(undefined); }, "[prod] argument 0 is an undefined tensor"},
      {[&] { return kiln::max(undefined); }, "[max] argument 0 is an undefined tensor"},
      {[&] { return kiln::min(undefined, {0}); }, "[min] argument 0 is an undefined tensor"},
      {[&] { return kiln::logsumexp(undefined); }, "[logsumexp] argument 0 is an undefined"},
      {[&] { return kiln::all(undefined); }, "[all] argument 0 is an undefined tensor"},
      {[&] { return kiln::any(undefined, {}); }, "[any] argument 0 is an undefined tensor"},
      {[&] { return kiln::argmax(undefined); }, "[argmax] argument 0 is an undefined tensor"},
      {[&] { return kiln::argmin(undefined, 0); }, "[argmin] argument 0 is an undefined tensor"},
      {[&] { return kiln::softmax(undefined); }, "[softmax] argument 0 is an undefined tensor"},
      {[&] { return kiln::log_softmax(undefined); }, "[log_softmax] argument 0 is an undefined"},

      {[&] { return kiln::sum(x, {2}); }, "[sum] axis 2 out of range for rank 2"},
      {[&] { return kiln::prod(x, {-3}); }, "[prod] axis -3 out of range for rank 2"},
      {[&] { return kiln::mean(x, {5}); }, "[mean] axis 5 out of range for rank 2"},
      {[&] {
         return kiln::max(x, {0, 7});
       },
       "[max] axis 7 out of range for rank 2"},
      {[&] { return kiln::all(x, {2}); }, "[all] axis 2 out of range for rank 2"},
      {[&] { return kiln::logsumexp(x, {-4}); }, "[logsumexp] axis -4 out of range for rank 2"},
      {[&] { return kiln::argmax(x, 2); }, "[argmax] axis 2 out of range for rank 2"},
      {[&] { return kiln::argmin(x, -3); }, "[argmin] axis -3 out of range for rank 2"},
      {[&] { return kiln::softmax(x, 2); }, "[softmax] axis 2 out of range for rank 2"},
      {[&] { return kiln::log_softmax(x, -3); }, "[log_softmax] axis -3 out of range for rank 2"},

      {[&] {
         return kiln::sum(x, {1, 1});
       },
       "[sum] axis 1 repeated in axes [1,1] for shape " + x.shape().to_string()},
      {[&] {
         return kiln::min(x, {0, -2});
       },
       "[min] axis -2 repeated in axes [0,-2]"},
      {[&] {
         return kiln::any(x, {-1, 1});
       },
       "[any] axis 1 repeated in axes [-1,1]"},
      {[&] {
         return kiln::mean(x, {0, 0});
       },
       "[mean] axis 0 repeated"},
      {[&] {
         return kiln::logsumexp(x, {1, -1});
       },
       "[logsumexp] axis -1 repeated"},

      {[&] { return kiln::sum(flags); }, "[sum] bool input is not supported"},
      {[&] { return kiln::prod(flags, {0}); }, "[prod] bool input is not supported"},
      {[&] { return kiln::mean(ints); }, "[mean] needs f32 or f64 input, got i32 (use kiln::cast"},
      {[&] { return kiln::mean(flags, {0}); }, "[mean] needs f32 or f64 input, got bool"},
      {[&] { return kiln::logsumexp(ints); }, "[logsumexp] needs f32 or f64 input, got i32"},
      {[&] { return kiln::softmax(ints); }, "[softmax] needs f32 or f64 input, got i32"},
      {[&] { return kiln::log_softmax(flags); }, "[log_softmax] needs f32 or f64 input, got bool"},

      {[&] { return kiln::max(empty); },
       "[max] reduction over a zero-size extent (shape " + empty.shape().to_string()},
      {[&] { return kiln::min(empty, {0}); }, "[min] reduction over a zero-size extent"},
      {[&] { return kiln::argmax(empty); },
       "[argmax] empty tensor of shape " + empty.shape().to_string() + " has no argmax"},
      {[&] { return kiln::argmin(empty); },
       "[argmin] empty tensor of shape " + empty.shape().to_string() + " has no argmin"},
      {[&] { return kiln::argmax(empty, 0); },
       "[argmax] axis 0 of shape " + empty.shape().to_string() + " has size 0"},
      {[&] { return kiln::argmin(empty, -2, true); },
       "[argmin] axis -2 of shape " + empty.shape().to_string() + " has size 0"},
  };
  for (const auto& row : rows) {
    INFO(row.prefix);
    CHECK_THROWS_AS(row.call(), kiln::Error);
    CHECK_THROWS_WITH(row.call(), StartsWith(row.prefix));
  }
}

TEST_CASE("reductions read row slices in place with the bits of a contiguous copy", "[reduce]") {
  // A fused kernel's wide output sliced to some of its columns (a bias gradient from a
  // recurrent layer's backward rows): large enough for the reductions' thread splits.
  const Tensor wide = kiln::random::normal({50, 64, 1792}, 0, 1, 11);
  const auto columns = [](const Tensor& t) { return kiln::slice(t, 2, 256, 1280); };
  const Tensor view = columns(wide);
  REQUIRE_FALSE(view.is_contiguous());
  const Tensor copy = view.contiguous();
  auto traced = kiln::function([&](const Tensor& t) {
    const Tensor c = columns(t);
    return std::vector<Tensor>{kiln::sum(c, {0, 1}), kiln::sum(c, {2}), kiln::max(c, {0, 1}),
                               kiln::min(c, {-1})};
  });
  const std::vector<Tensor> got_traced = traced(wide);
  const std::vector<Tensor> got_eager = {kiln::sum(view, {0, 1}), kiln::sum(view, {2}),
                                         kiln::max(view, {0, 1}), kiln::min(view, {-1})};
  const std::vector<Tensor> want = {kiln::sum(copy, {0, 1}), kiln::sum(copy, {2}),
                                    kiln::max(copy, {0, 1}), kiln::min(copy, {-1})};
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("reduction " << i);
    REQUIRE(got_eager[i].shape() == want[i].shape());
    CHECK(got_eager[i].to_vector<float>() == want[i].to_vector<float>());
    CHECK(got_traced[i].to_vector<float>() == want[i].to_vector<float>());
  }
}

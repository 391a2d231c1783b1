// Scans, sorting and indexing ops (cumsum, cumprod, argsort, sort, top_k, take_along_axis,
// scatter, gather_nd, scatter_nd, argmax's last index): values against references computed here
// with plain loops, in every dtype each takes, and every error message. Gradients are checked in
// test_autodiff.cpp and traced execution in test_traced_ops.cpp.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include <kiln/kiln.hpp>

namespace {

using Catch::Matchers::StartsWith;
using kiln::DType;
using kiln::Shape;
using kiln::Tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor make(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return kiln::cast(kiln::tensor(values, shape), dtype);
}

Tensor ids(const std::vector<std::int64_t>& values, const Shape& shape) {
  return kiln::tensor(values, shape);
}

void check_values(const Tensor& t, const std::vector<double>& want) {
  const std::vector<double> got = kiln::cast(t, DType::f64).to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i]))
      CHECK(std::isnan(got[i]));
    else
      CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  }
}

void check_ids(const Tensor& t, const std::vector<std::int64_t>& want) {
  REQUIRE(t.dtype() == DType::i64);
  CHECK(t.to_vector<std::int64_t>() == want);
}

/// The running sum or product of each row of a [rows, n] matrix, with the flags, by loops.
std::vector<double> running_reference(const std::vector<double>& x, std::int64_t rows,
                                      std::int64_t n, bool product, bool exclusive, bool reverse) {
  std::vector<double> out(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double acc = product ? 1.0 : 0.0;
    for (std::int64_t s = 0; s < n; ++s) {
      const std::int64_t i = reverse ? n - 1 - s : s;
      const double v = x[static_cast<std::size_t>(r * n + i)];
      if (!exclusive) acc = product ? acc * v : acc + v;
      out[static_cast<std::size_t>(r * n + i)] = acc;
      if (exclusive) acc = product ? acc * v : acc + v;
    }
  }
  return out;
}

std::vector<double> transposed(const std::vector<double>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<double> out(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
  return out;
}

}  // namespace

TEST_CASE("cumsum and cumprod with every flag, axis and dtype", "[indexing]") {
  const std::vector<double> x = {1, -2, 3, 0, 2, 4, -1, 2, 5, 3, 1, -2};  // [3, 4]
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (bool product : {false, true})
      for (bool exclusive : {false, true})
        for (bool reverse : {false, true}) {
          INFO(kiln::dtype_name(dtype)
               << " product " << product << " exclusive " << exclusive << " reverse " << reverse);
          const Tensor t = make(x, {3, 4}, dtype);
          const auto op = product ? kiln::cumprod : kiln::cumsum;
          const Tensor along_rows = op(t, 1, exclusive, reverse);
          CHECK(along_rows.dtype() == dtype);
          check_values(along_rows, running_reference(x, 3, 4, product, exclusive, reverse));
          // Along axis 0 (and as -2): the same on the transposed data.
          const std::vector<double> columns = transposed(
              running_reference(transposed(x, 3, 4), 4, 3, product, exclusive, reverse), 4, 3);
          check_values(op(t, 0, exclusive, reverse), columns);
          check_values(op(t, -2, exclusive, reverse), columns);
        }
  // A non-contiguous input (a transposed view) and size-0 and rank-0 edges.
  const Tensor t = kiln::transpose(make(x, {3, 4}, DType::f32));  // x's columns as rows
  check_values(kiln::cumsum(t, 1),
               running_reference(transposed(x, 3, 4), 4, 3, false, false, false));
  CHECK(kiln::cumsum(kiln::zeros({2, 0}), 1).shape() == Shape{2, 0});
  CHECK(kiln::cumprod(kiln::zeros({0, 3}), 0).shape() == Shape{0, 3});
  // NaN and inf carry on along the scan.
  check_values(kiln::cumsum(make({1, kNaN, 2}, {3}, DType::f32), 0), {1, kNaN, kNaN});
}

TEST_CASE("argsort, sort and top_k order stably, with NaN last ascending and first descending",
          "[indexing]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(kiln::dtype_name(dtype));
    const Tensor x = make({3, kNaN, 1, 3, -2, 1, kNaN, 0}, {8}, dtype);
    check_ids(kiln::argsort(x), {4, 7, 2, 5, 0, 3, 1, 6});
    check_ids(kiln::argsort(x, 0, true), {1, 6, 0, 3, 2, 5, 7, 4});
    check_values(kiln::sort(x), {-2, 0, 1, 1, 3, 3, kNaN, kNaN});
    check_values(kiln::sort(x, -1, true), {kNaN, kNaN, 3, 3, 1, 1, 0, -2});
    const kiln::TopK top = kiln::top_k(x, 3);
    check_values(top.values, {kNaN, kNaN, 3});
    check_ids(top.indices, {1, 6, 0});
    const kiln::TopK low = kiln::top_k(x, 3, 0, false);
    check_values(low.values, {-2, 0, 1});
    check_ids(low.indices, {4, 7, 2});
  }
  // Integers and bool, along a leading axis, against std::stable_sort per column.
  const std::vector<double> values = {5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3};
  for (DType dtype : {DType::i32, DType::i64, DType::f32}) {
    const Tensor x = make(values, {6, 3}, dtype);  // sorted along axis 0
    std::vector<std::int64_t> want(values.size());
    for (std::int64_t c = 0; c < 3; ++c) {
      std::vector<std::int64_t> order(6);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return values[static_cast<std::size_t>(a * 3 + c)] >
               values[static_cast<std::size_t>(b * 3 + c)];
      });
      for (std::int64_t r = 0; r < 6; ++r) want[static_cast<std::size_t>(r * 3 + c)] = order[r];
    }
    check_ids(kiln::argsort(x, 0, true), want);
    const kiln::TopK top = kiln::top_k(x, 2, 0);
    check_ids(top.indices, std::vector<std::int64_t>(want.begin(), want.begin() + 6));
  }
  check_ids(kiln::argsort(kiln::tensor(std::vector<bool>{true, false, true, false}, {4})),
            {1, 3, 0, 2});
  CHECK(kiln::top_k(kiln::zeros({2, 5}), 0).values.shape() == Shape{2, 0});
}

TEST_CASE("take_along_axis picks along an axis and broadcasts the other axes", "[indexing]") {
  const Tensor x = make({10, 11, 12, 20, 21, 22}, {2, 3}, DType::f32);
  check_values(kiln::take_along_axis(x, ids({2, 0, 0, -1}, {2, 2}), 1), {12, 10, 20, 22});
  check_values(kiln::take_along_axis(x, ids({1, 0, 1}, {1, 3}), 0), {20, 11, 22});
  // indices [2, 1] broadcast along axis 1 (size 1 -> 3), x [1, 3] along axis 0 in the next.
  check_values(kiln::take_along_axis(x, ids({2, 1}, {2, 1}), 1), {12, 21});
  check_values(kiln::take_along_axis(make({1, 2, 3}, {1, 3}, DType::f64),
                                     kiln::cast(ids({0, 0, 0, 0, 0, 0}, {2, 3}), DType::i32), 0),
               {1, 2, 3, 1, 2, 3});
  // Integer and bool data; sort composes argsort with it.
  check_values(kiln::take_along_axis(make({4, 5, 6}, {3}, DType::i64), ids({2, 2, 0}, {3}), 0),
               {6, 6, 4});
  const Tensor flags = kiln::tensor(std::vector<bool>{true, false}, {2});
  CHECK(kiln::take_along_axis(flags, ids({1, 0, 0}, {3}), 0).to_vector<bool>() ==
        std::vector<bool>{false, true, true});
}

TEST_CASE("scatter combines updates by mode, the last assignment winning", "[indexing]") {
  const Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f32);
  const Tensor at = ids({2, 0, 2, 1, 1, -3}, {2, 3});
  const Tensor up = make({10, 20, 30, 40, 50, 60}, {2, 3}, DType::f32);
  check_values(kiln::scatter(x, at, up, 1), {20, 2, 30, 60, 50, 6});
  check_values(kiln::scatter(x, at, up, 1, kiln::ScatterMode::add), {21, 2, 43, 64, 95, 6});
  check_values(kiln::scatter_add(x, at, up, 1), {21, 2, 43, 64, 95, 6});
  check_values(kiln::scatter(x, at, up, 1, kiln::ScatterMode::multiply),
               {20, 2, 900, 240, 10000, 6});
  check_values(kiln::scatter(x, at, up, 1, kiln::ScatterMode::maximum), {20, 2, 30, 60, 50, 6});
  check_values(kiln::scatter(x, at, up, 1, kiln::ScatterMode::minimum), {1, 2, 3, 4, 5, 6});
  // Along axis 0, with indices smaller than x along the other axis (ONNX ScatterElements).
  check_values(kiln::scatter(x, ids({1, 0}, {1, 2}), make({7, 8}, {1, 2}, DType::f32), 0),
               {1, 8, 3, 7, 5, 6});
  // NaN wins maximum; integers and bool.
  check_values(kiln::scatter(make({1, 2}, {2}, DType::f64), ids({0}, {1}),
                             make({kNaN}, {1}, DType::f64), 0, kiln::ScatterMode::maximum),
               {kNaN, 2});
  check_values(kiln::scatter(make({1, 2, 3}, {3}, DType::i32), ids({0, 0}, {2}),
                             make({5, 6}, {2}, DType::i32), 0, kiln::ScatterMode::add),
               {12, 2, 3});
  const Tensor flags = kiln::tensor(std::vector<bool>{false, false, false}, {3});
  CHECK(kiln::scatter(flags, ids({1}, {1}), kiln::tensor(std::vector<bool>{true}, {1}), 0)
            .to_vector<bool>() == std::vector<bool>{false, true, false});
}

TEST_CASE("gather_nd and scatter_nd index by coordinate tuples, with batch dims", "[indexing]") {
  const Tensor x = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 2, 3}, DType::f32);
  check_values(kiln::gather_nd(x, ids({1, 0, 2, 0, 1, -1}, {2, 3})), {8, 5});
  const Tensor rows = kiln::gather_nd(x, ids({1, 1, 0, 0}, {2, 2}));
  CHECK(rows.shape() == Shape{2, 3});
  check_values(rows, {9, 10, 11, 0, 1, 2});
  const Tensor blocks = kiln::gather_nd(x, ids({1, 0}, {2, 1}));
  CHECK(blocks.shape() == Shape{2, 2, 3});
  // batch_dims 1: each batch picks its own rows.
  const Tensor batched = kiln::gather_nd(x, ids({1, 0, 0, 0}, {2, 2, 1}), 1);
  CHECK(batched.shape() == Shape{2, 2, 3});
  check_values(batched, {3, 4, 5, 0, 1, 2, 6, 7, 8, 6, 7, 8});

  const Tensor base = make({1, 2, 3, 4}, {2, 2}, DType::i64);
  check_values(
      kiln::scatter_nd(base, ids({0, 1, 1, 0, 0, 1}, {3, 2}), make({10, 20, 30}, {3}, DType::i64)),
      {1, 30, 20, 4});
  check_values(kiln::scatter_nd(base, ids({0, 1, 1, 0, 0, 1}, {3, 2}),
                                make({10, 20, 30}, {3}, DType::i64), kiln::ScatterMode::add),
               {1, 42, 23, 4});
  check_values(kiln::scatter_nd(base, ids({1}, {1, 1}), make({7, 8}, {1, 2}, DType::i64)),
               {1, 2, 7, 8});
}

TEST_CASE("argmax and argmin can pick the last extremum", "[indexing][reduce]") {
  for (DType dtype : {DType::f32, DType::i32}) {
    const Tensor x = make({3, 1, 3, 1, 2, 2}, {6}, dtype);
    CHECK(kiln::argmax(x, 0).item<std::int64_t>() == 0);
    CHECK(kiln::argmax(x, 0, false, true).item<std::int64_t>() == 2);
    CHECK(kiln::argmin(x, 0, false, true).item<std::int64_t>() == 3);
    check_ids(kiln::argmax(make({1, 5, 5, 1, 2, 5}, {2, 3}, dtype), 0, true, true), {1, 0, 1});
  }
  check_ids(kiln::argmax(make({kNaN, 1, kNaN, 1}, {2, 2}, DType::f32), 1, false, true), {0, 0});
  check_ids(kiln::argmax(make({kNaN, 1, kNaN, 1}, {4}, DType::f64), 0, true, true), {2});
}

TEST_CASE("indexing ops name themselves and the problem in their errors", "[indexing]") {
  const Tensor x = kiln::zeros({2, 3});
  const Tensor at = ids({0, 1, 2, 0, 1, 2}, {2, 3});
  CHECK_THROWS_WITH(kiln::cumsum(x, 2), StartsWith("[cumsum] axis 2 out of range for rank 2"));
  CHECK_THROWS_WITH(kiln::cumprod(kiln::tensor(std::vector<bool>{true}, {1}), 0),
                    StartsWith("[cumprod] needs a numeric dtype"));
  CHECK_THROWS_WITH(kiln::cumsum(Tensor(), 0),
                    StartsWith("[cumsum] argument 0 is an undefined tensor"));
  CHECK_THROWS_WITH(kiln::top_k(x, 4), StartsWith("[top_k] k 4 exceeds the size 3 of axis 1"));
  CHECK_THROWS_WITH(kiln::top_k(x, -1), StartsWith("[top_k] k -1 is negative"));
  CHECK_THROWS_WITH(kiln::matmul(kiln::zeros({2, 2}, DType::u64), kiln::zeros({2, 2}, DType::u64)),
                    StartsWith("[matmul] has no u64 kernel"));
  CHECK_THROWS_WITH(kiln::take_along_axis(x, ids({0, 5}, {1, 2}), 1),
                    StartsWith("[take_along_axis] index 5 is out of range for axis 1 of size 3"));
  CHECK_THROWS_WITH(kiln::take_along_axis(x, ids({0, -4}, {1, 2}), 1),
                    StartsWith("[take_along_axis] index -4 is out of range for axis 1 of size 3"));
  CHECK_THROWS_WITH(kiln::take_along_axis(x, ids({0}, {1}), 0),
                    StartsWith("[take_along_axis] indices of shape [1] need the rank of x"));
  CHECK_THROWS_WITH(kiln::take_along_axis(x, kiln::zeros({1, 1}), 0),
                    StartsWith("[take_along_axis] indices must be i32 or i64, got f32"));
  CHECK_THROWS_WITH(
      kiln::take_along_axis(kiln::zeros({2, 3, 4}), kiln::zeros({2, 2, 4}, kiln::i64), 0),
      StartsWith("[take_along_axis] shapes [2,3,4] and [2,2,4] cannot be broadcast "
                 "along axis 1"));
  CHECK_THROWS_WITH(kiln::scatter(x, at, kiln::zeros({2, 2}), 1),
                    StartsWith("[scatter] updates of shape [2,2] need the shape of indices"));
  CHECK_THROWS_WITH(kiln::scatter(x, at, kiln::zeros({2, 3}, kiln::f64), 1),
                    StartsWith("[scatter] dtypes differ: f32 vs f64"));
  CHECK_THROWS_WITH(kiln::scatter(x, ids({0, 0, 0}, {3, 1}), kiln::zeros({3, 1}), 1),
                    StartsWith("[scatter] indices of shape [3,1] exceed x of shape [2,3] along "
                               "axis 0"));
  CHECK_THROWS_WITH(kiln::scatter(x, ids({3}, {1, 1}), kiln::zeros({1, 1}), 1),
                    StartsWith("[scatter] index 3 is out of range for axis 1 of size 3"));
  const Tensor flags = kiln::tensor(std::vector<bool>{true}, {1});
  CHECK_THROWS_WITH(kiln::scatter(flags, ids({0}, {1}), flags, 0, kiln::ScatterMode::add),
                    StartsWith("[scatter] mode add needs a numeric dtype, got bool"));
  CHECK_THROWS_WITH(kiln::gather_nd(x, ids({0, 1, 2}, {1, 3})),
                    StartsWith("[gather_nd] tuples of length 3 after 0 batch dims exceed x of "
                               "shape [2,3]"));
  CHECK_THROWS_WITH(kiln::gather_nd(x, ids({0, 1}, {2}), 1),
                    StartsWith("[gather_nd] batch_dims 1 must lie in [0, 1)"));
  CHECK_THROWS_WITH(kiln::gather_nd(x, ids({0, 1, 2}, {3, 1}), 1),
                    StartsWith("[gather_nd] batch dim 0 differs"));
  CHECK_THROWS_WITH(kiln::gather_nd(x, ids({1, 3}, {1, 2})),
                    StartsWith("[gather_nd] index 3 is out of range for axis 1 of size 3"));
  CHECK_THROWS_WITH(kiln::gather_nd(x, kiln::scalar(std::int64_t{0})),
                    StartsWith("[gather_nd] indices must have rank 1 or more"));
  CHECK_THROWS_WITH(kiln::scatter_nd(x, ids({1}, {1, 1}), kiln::zeros({1, 2})),
                    StartsWith("[scatter_nd] updates of shape [1,2] need shape [1,3]"));
}

// Shape and data-movement ops: reference values, views, and the kernels called directly.
#include <catch2/catch.hpp>

#include <limits>

#include "shape_test_support.hpp"

using namespace shape_test;

TEST_CASE("reshape: values, inferred dim, views only when the layout allows", "[shape]") {
  struct Case {
    Shape from, to, expected;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {3, 2}, {3, 2}},
      {{2, 3}, {6}, {6}},
      {{2, 3}, {-1}, {6}},
      {{2, 3}, {3, -1}, {3, 2}},
      {{2, 3}, {1, 6, 1}, {1, 6, 1}},
      {{2, 3, 4}, {-1, 4}, {6, 4}},
      {{}, {1, 1}, {1, 1}},
      {{1, 1}, {}, {}},
      {{}, {-1}, {1}},
      {{0, 3}, {3, 0}, {3, 0}},
      {{0, 3}, {-1}, {0}},
      {{4}, {2, 2}, {2, 2}},
  };
  for (const auto& c : cases) {
    INFO(c.from.to_string() << " -> " << c.to.to_string());
    const Tensor x = iota(c.from);
    const Tensor y = kiln::reshape(x, c.to);
    CHECK(y.shape() == c.expected);
    CHECK(values(y) == values(x));
    CHECK(shares_storage(x, y));
  }

  SECTION("a transposed tensor is copied in row-major order of the transposed values") {
    const Tensor t = kiln::transpose(iota({2, 3}));
    const Tensor flat = kiln::reshape(t, {6});
    CHECK(values(flat) == Values{0, 3, 1, 4, 2, 5});
    CHECK_FALSE(shares_storage(t, flat));
    CHECK(flat.is_contiguous());
  }
  SECTION("splitting a dim of a transposed tensor stays a view") {
    const Tensor t = kiln::transpose(iota({2, 4}));  // [4,2], strides [1,4]
    const Tensor y = kiln::reshape(t, {2, 2, 2});
    CHECK(shares_storage(t, y));
    CHECK(values(y) == Values{0, 4, 1, 5, 2, 6, 3, 7});
  }
  SECTION("every dtype") {
    for (auto dtype : {kiln::f32, kiln::f64, kiln::i32, kiln::i64, kiln::boolean}) {
      const Tensor x = kiln::transpose(iota({3, 2}, dtype));
      CHECK(values(kiln::reshape(x, {6})) == values(x));
      CHECK(kiln::reshape(x, {6}).dtype() == dtype);
    }
  }
}

TEST_CASE("transpose: reversed axes and permutations are views", "[shape]") {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {1, 0}},
      {{2, 3, 4}, {2, 0, 1}},
      {{2, 3, 4}, {-1, 0, 1}},
      {{2, 3, 4}, {0, 1, 2}},
      {{5}, {0}},
      {{}, {}},
      {{2, 0, 3}, {2, 1, 0}},
      {{2, 1, 3, 2}, {3, 1, 0, 2}},
  };
  for (const auto& c : cases) {
    INFO(c.shape.to_string() << " perm size " << c.perm.size());
    const Tensor x = iota(c.shape);
    const Tensor y = kiln::transpose(x, c.perm);
    std::vector<std::int64_t> perm = c.perm;
    for (auto& p : perm)
      if (p < 0) p += x.ndim();
    CHECK(values(y) == transpose_reference(x, perm));
    CHECK(shares_storage(x, y));
  }
  const Tensor x = iota({2, 3, 4});
  CHECK(values(kiln::transpose(x)) == transpose_reference(x, {2, 1, 0}));
  CHECK(kiln::transpose(x).shape() == Shape{4, 3, 2});
  CHECK(kiln::transpose(iota({})).shape() == Shape{});
  CHECK(values(kiln::transpose(kiln::transpose(x))) == values(x));
}

TEST_CASE("expand_dims and squeeze are views", "[shape]") {
  const Tensor x = iota({2, 3});
  struct Case {
    std::int64_t axis;
    Shape expected;
  };
  for (const auto& c : std::vector<Case>{
           {0, {1, 2, 3}}, {1, {2, 1, 3}}, {2, {2, 3, 1}}, {-1, {2, 3, 1}}, {-3, {1, 2, 3}}}) {
    INFO("axis " << c.axis);
    const Tensor y = kiln::expand_dims(x, c.axis);
    CHECK(y.shape() == c.expected);
    CHECK(shares_storage(x, y));
    CHECK(values(y) == values(x));
  }
  CHECK(kiln::expand_dims(iota({}), 0).shape() == Shape{1});
  CHECK(kiln::expand_dims(iota({}), -1).shape() == Shape{1});

  const Tensor z = iota({1, 2, 1, 3});
  struct SqueezeCase {
    std::vector<std::int64_t> axes;
    Shape expected;
  };
  for (const auto& c : std::vector<SqueezeCase>{
           {{0}, {2, 1, 3}}, {{2}, {1, 2, 3}}, {{-2, 0}, {2, 3}}, {{}, {1, 2, 1, 3}}}) {
    INFO("axes size " << c.axes.size());
    const Tensor y = kiln::squeeze(z, c.axes);
    CHECK(y.shape() == c.expected);
    CHECK(shares_storage(z, y));
    CHECK(values(y) == values(z));
  }
  CHECK(kiln::squeeze(z).shape() == Shape{2, 3});
  CHECK(kiln::squeeze(iota({1, 1})).shape() == Shape{});
  CHECK(kiln::squeeze(iota({})).shape() == Shape{});
  CHECK(kiln::squeeze(iota({0, 1})).shape() == Shape{0});
  const Tensor t = kiln::transpose(iota({1, 3, 1, 2}));
  CHECK(values(kiln::squeeze(t)) == transpose_reference(iota({3, 2}), {1, 0}));
}

TEST_CASE("broadcast_to: NumPy rules, stride-0 views", "[shape]") {
  struct Case {
    Shape from, to;
    Values expected;
  };
  const std::vector<Case> cases = {
      {{3}, {2, 3}, {0, 1, 2, 0, 1, 2}},    {{2, 1}, {2, 3}, {0, 0, 0, 1, 1, 1}},
      {{}, {2, 2}, {0, 0, 0, 0}},           {{1}, {0}, {}},
      {{2, 3}, {2, 3}, {0, 1, 2, 3, 4, 5}}, {{1, 2}, {2, 1, 2}, {0, 1, 0, 1}},
  };
  for (const auto& c : cases) {
    INFO(c.from.to_string() << " -> " << c.to.to_string());
    const Tensor x = iota(c.from);
    const Tensor y = kiln::broadcast_to(x, c.to);
    CHECK(y.shape() == c.to);
    CHECK(values(y) == c.expected);
    CHECK(shares_storage(x, y));
  }
  CHECK(kiln::broadcast_to(iota({3}), {2, 3}).strides()[0] == 0);
}

TEST_CASE("slice: both forms, defaults, negative indices and steps, views", "[shape]") {
  const Tensor v = iota({10});
  struct Case {
    Slice s;
    Values expected;
  };
  const std::int64_t min = std::numeric_limits<std::int64_t>::min();
  const std::vector<Case> cases = {
      {{none, none, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {{2, 7, 1}, {2, 3, 4, 5, 6}},
      {{2, 7, 2}, {2, 4, 6}},
      {{2, 8, 3}, {2, 5}},
      {{-3, none, 1}, {7, 8, 9}},
      {{none, -8, 1}, {0, 1}},
      {{none, none, -1}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
      {{7, 2, -2}, {7, 5, 3}},
      {{none, 3, -1}, {9, 8, 7, 6, 5, 4}},
      {{-1, none, -3}, {9, 6, 3, 0}},
      {{3, -11, -1}, {3, 2, 1, 0}},
      {{5, 5, 1}, {}},
      {{5, 2, 1}, {}},
      {{2, 5, -1}, {}},
      {{10, none, 1}, {}},
      {{-11, none, -1}, {}},
      {{0, 10, 100}, {0}},
      {{9, none, min}, {9}},
      {{0, 10, std::numeric_limits<std::int64_t>::max()}, {0}},
  };
  for (const auto& c : cases) {
    INFO("start " << c.s.start << " stop " << c.s.stop << " step " << c.s.step);
    const Tensor a = kiln::slice(v, {c.s});
    CHECK(values(a) == c.expected);
    CHECK(shares_storage(v, a));
    const Tensor b = kiln::slice(v, 0, c.s.start, c.s.stop, c.s.step);
    CHECK(values(b) == c.expected);
  }

  const Tensor m = iota({3, 4});
  SECTION("leading axes of a matrix") {
    CHECK(values(kiln::slice(m, {{none, none, -1}, {1, 3, 1}})) == Values{9, 10, 5, 6, 1, 2});
    CHECK(kiln::slice(m, {{1, 2, 1}}).shape() == Shape{1, 4});
    CHECK(values(kiln::slice(m, {{1, 2, 1}})) == Values{4, 5, 6, 7});
    CHECK(values(kiln::slice(m, std::vector<Slice>{})) == values(m));
    CHECK(kiln::slice(m, {{3, none, 1}, {none, none, -1}}).shape() == Shape{0, 4});
  }
  SECTION("one axis") {
    CHECK(values(kiln::slice(m, -1, 3, 0, -1)) == Values{3, 2, 1, 7, 6, 5, 11, 10, 9});
    CHECK(values(kiln::slice(m, 0, 1, none)) == Values{4, 5, 6, 7, 8, 9, 10, 11});
    CHECK(kiln::slice(m, 1, 2, 2).shape() == Shape{3, 0});
  }
  SECTION("a slice of a slice of a transpose") {
    const Tensor t = kiln::transpose(m);  // [4,3]
    const Tensor s = kiln::slice(kiln::slice(t, {{none, none, -2}}), 1, 2, none, -1);
    CHECK(values(s) == Values{11, 7, 3, 9, 5, 1});
    CHECK(shares_storage(m, s));
  }
  SECTION("zero-size axes") {
    const Tensor e = iota({0, 3});
    CHECK(kiln::slice(e, {{none, none, -1}, {1, 3, 1}}).shape() == Shape{0, 2});
    CHECK(kiln::slice(e, {{0, 0, 1}}).shape() == Shape{0, 3});
  }
}

TEST_CASE("concat and stack", "[shape]") {
  SECTION("concat values, axes and dtypes") {
    struct Case {
      std::vector<Shape> shapes;
      std::int64_t axis;
      Shape expected_shape;
      Values expected;
    };
    const std::vector<Case> cases = {
        {{{2, 2}, {2, 1}}, 1, {2, 3}, {0, 1, 0, 2, 3, 1}},
        {{{2, 2}, {2, 1}}, -1, {2, 3}, {0, 1, 0, 2, 3, 1}},
        {{{1, 2}, {2, 2}}, 0, {3, 2}, {0, 1, 0, 1, 2, 3}},
        {{{2}, {3}, {1}}, 0, {6}, {0, 1, 0, 1, 2, 0}},
        {{{2, 0}, {2, 2}}, 1, {2, 2}, {0, 1, 2, 3}},
        {{{0, 2}, {0, 2}}, 0, {0, 2}, {}},
        {{{3}}, 0, {3}, {0, 1, 2}},
    };
    for (auto dtype : {kiln::f32, kiln::f64, kiln::i32, kiln::i64}) {
      for (const auto& c : cases) {
        INFO("case with " << c.shapes.size() << " inputs, axis " << c.axis << ", dtype "
                          << kiln::dtype_name(dtype));
        std::vector<Tensor> xs;
        for (const auto& s : c.shapes) xs.push_back(iota(s, dtype));
        const Tensor y = kiln::concat(xs, c.axis);
        CHECK(y.shape() == c.expected_shape);
        CHECK(y.dtype() == dtype);
        CHECK(values(y) == c.expected);
      }
    }
    CHECK(values(kiln::concat({iota({2}, kiln::boolean), iota({2}, kiln::boolean)})) ==
          Values{0, 1, 0, 1});
  }
  SECTION("concat of non-contiguous views") {
    const Tensor t = kiln::transpose(iota({2, 3}));  // [[0,3],[1,4],[2,5]]
    const Tensor r = kiln::slice(iota({4}), {{none, none, -1}});
    CHECK(values(kiln::concat({t, t}, 0)) == Values{0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5});
    CHECK(values(kiln::concat({t, t}, 1)) == Values{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5});
    CHECK(values(kiln::concat({r, kiln::broadcast_to(iota({}), {2})})) == Values{3, 2, 1, 0, 0, 0});
    const Tensor one = kiln::concat({t});
    CHECK(values(one) == values(t));
    CHECK_FALSE(shares_storage(one, t));
  }
  SECTION("stack") {
    const Tensor a = iota({2}), b = kiln::slice(iota({4}), 0, 3, 0, -2);  // [3, 1]
    CHECK(kiln::stack({a, b}).shape() == Shape{2, 2});
    CHECK(values(kiln::stack({a, b})) == Values{0, 1, 3, 1});
    CHECK(values(kiln::stack({a, b}, 1)) == Values{0, 3, 1, 1});
    CHECK(values(kiln::stack({a, b}, -1)) == Values{0, 3, 1, 1});
    CHECK(kiln::stack({iota({}), iota({})}).shape() == Shape{2});
    CHECK(kiln::stack({iota({0, 2})}, 1).shape() == Shape{0, 1, 2});
    CHECK(kiln::stack({iota({2, 3}, kiln::i64)}, -1).shape() == Shape{2, 3, 1});
  }
}

TEST_CASE("unstack and split return views", "[shape]") {
  const Tensor m = iota({2, 3});
  SECTION("unstack") {
    const auto rows = kiln::unstack(m);
    REQUIRE(rows.size() == 2);
    CHECK(values(rows[1]) == Values{3, 4, 5});
    CHECK(rows[1].shape() == Shape{3});
    const auto cols = kiln::unstack(m, -1);
    REQUIRE(cols.size() == 3);
    CHECK(values(cols[2]) == Values{2, 5});
    for (const Tensor& c : cols) CHECK(shares_storage(m, c));
    CHECK(kiln::unstack(iota({0, 2})).empty());
    CHECK(kiln::unstack(iota({2, 0}), 0)[1].shape() == Shape{0});
    CHECK(kiln::unstack(iota({3}))[2].shape() == Shape{});
  }
  SECTION("split into equal sections") {
    const auto parts = kiln::split(iota({6}), 3);
    REQUIRE(parts.size() == 3);
    CHECK(values(parts[0]) == Values{0, 1});
    CHECK(values(parts[2]) == Values{4, 5});
    const auto cols = kiln::split(m, 3, 1);
    REQUIRE(cols.size() == 3);
    CHECK(values(cols[1]) == Values{1, 4});
    CHECK(cols[1].shape() == Shape{2, 1});
    CHECK(shares_storage(m, cols[1]));
    CHECK(kiln::split(iota({0}), 2).size() == 2);
  }
  SECTION("split by sizes") {
    const auto parts = kiln::split(m, std::vector<std::int64_t>{1, 0, 2}, -1);
    REQUIRE(parts.size() == 3);
    CHECK(parts[0].shape() == Shape{2, 1});
    CHECK(parts[1].shape() == Shape{2, 0});
    CHECK(values(parts[2]) == Values{1, 2, 4, 5});
    CHECK(kiln::split(iota({0}), std::vector<std::int64_t>{}).empty());
  }
}

TEST_CASE("gather: axes, index dtypes, negative indices, strided inputs", "[shape]") {
  const Tensor m = iota({3, 4});
  struct Case {
    Tensor x, indices;
    std::int64_t axis;
    Shape expected_shape;
    Values expected;
  };
  // clang-format off
  const std::vector<Case> cases = {
      {m, kiln::tensor<std::int64_t>({2, 0}), 0, {2, 4}, {8, 9, 10, 11, 0, 1, 2, 3}},
      {m, kiln::tensor<std::int32_t>({3, 0, -1, 1}, {2, 2}), 1, {3, 2, 2},
       {3, 0, 3, 1, 7, 4, 7, 5, 11, 8, 11, 9}},
      {m, kiln::scalar<std::int64_t>(2), -1, {3}, {2, 6, 10}},
      {m, kiln::tensor<std::int64_t>({-3, -3, 2}), 0, {3, 4},
       {0, 1, 2, 3, 0, 1, 2, 3, 8, 9, 10, 11}},
      {m, kiln::tensor<std::int64_t>(std::vector<std::int64_t>{}, {0}), 0, {0, 4}, {}},
      {iota({0, 2}), kiln::tensor<std::int32_t>({1}), 1, {0, 1}, {}},
      {kiln::slice(m, {{none, none, -1}}), kiln::tensor<std::int64_t>({0}), 0, {1, 4},
       {8, 9, 10, 11}},
      {kiln::transpose(m), kiln::tensor<std::int32_t>({1, 1}), 1, {4, 2}, {4, 4, 5, 5, 6, 6, 7, 7}},
      {iota({5}, kiln::i64), kiln::transpose(kiln::tensor<std::int64_t>({0, 1, 2, 3}, {2, 2})), 0,
       {2, 2}, {0, 2, 1, 3}},
      {iota({4}, kiln::boolean), kiln::tensor<std::int32_t>({1, 2, 3}), 0, {3}, {1, 0, 1}},
      {iota({4}, kiln::f64), kiln::tensor<std::int32_t>({3, -4}), 0, {2}, {3, 0}},
  };
  // clang-format on
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    const auto& c = cases[i];
    const Tensor y = kiln::gather(c.x, c.indices, c.axis);
    CHECK(y.shape() == c.expected_shape);
    CHECK(y.dtype() == c.x.dtype());
    CHECK(values(y) == c.expected);
  }
}

TEST_CASE("pad: fill values per dtype, strided inputs, zero-size", "[shape]") {
  using Widths = std::vector<std::pair<std::int64_t, std::int64_t>>;
  struct Case {
    Tensor x;
    Widths widths;
    double value;
    Shape expected_shape;
    Values expected;
  };
  // clang-format off
  const std::vector<Case> cases = {
      {iota({2, 2}, kiln::i32), {{1, 0}, {0, 2}}, 9, {3, 4}, {9, 9, 9, 9, 0, 1, 9, 9, 2, 3, 9, 9}},
      {iota({2}, kiln::f64), {{1, 1}}, -1.5, {4}, {-1.5, 0, 1, -1.5}},
      {iota({2}, kiln::f32), {{0, 0}}, 5, {2}, {0, 1}},
      {iota({2}, kiln::boolean), {{1, 1}}, 2, {4}, {1, 0, 1, 1}},
      {iota({1}, kiln::i32), {{0, 1}}, 2.7, {2}, {0, 2}},
      {iota({1}, kiln::i32), {{0, 1}}, 1e20, {2}, {0, 2147483647}},
      {iota({1}, kiln::i64), {{1, 0}}, std::numeric_limits<double>::quiet_NaN(), {2}, {0, 0}},
      {iota({0}), {{1, 2}}, 5, {3}, {5, 5, 5}},
      {iota({0, 2}), {{0, 0}, {1, 1}}, 5, {0, 4}, {}},
      {iota({}), {}, 5, {}, {0}},
      {kiln::transpose(iota({2, 3})), {{0, 1}, {1, 0}}, 7, {4, 3},
       {7, 0, 3, 7, 1, 4, 7, 2, 5, 7, 7, 7}},
  };
  // clang-format on
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    const auto& c = cases[i];
    const Tensor y = kiln::pad(c.x, c.widths, c.value);
    CHECK(y.shape() == c.expected_shape);
    CHECK(y.dtype() == c.x.dtype());
    CHECK(values(y) == c.expected);
  }
}

TEST_CASE("tile matches a reference for ranks 0 to 5", "[shape]") {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> reps;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {2, 1}},
      {{2, 3}, {1, 3}},
      {{2, 3}, {2, 2}},
      {{2, 3}, {0, 2}},
      {{2, 3}, {1, 1}},
      {{3}, {4}},
      {{}, {}},
      {{0, 2}, {2, 2}},
      {{2, 1, 2, 1, 2}, {2, 3, 1, 2, 2}},
      {{1, 2, 1, 2, 1}, {3, 2, 2, 1, 2}},
      {{2, 2, 2}, {1, 2, 1}},
  };
  for (const auto& c : cases) {
    INFO(c.shape.to_string() << " reps size " << c.reps.size());
    const Tensor x = iota(c.shape);
    const Tensor y = kiln::tile(x, c.reps);
    Shape expected_shape = c.shape;
    for (std::size_t d = 0; d < c.reps.size(); ++d) expected_shape[d] *= c.reps[d];
    CHECK(y.shape() == expected_shape);
    CHECK(values(y) == tile_reference(x, c.reps));
  }
  const Tensor t = kiln::transpose(iota({2, 3}, kiln::i32));
  CHECK(values(kiln::tile(t, {1, 2})) == tile_reference(t, {1, 2}));
}

TEST_CASE("one_hot is equal(expand_dims(indices), arange(depth)) cast to dtype", "[shape]") {
  const Tensor h = kiln::one_hot(kiln::tensor<std::int64_t>({0, 2, -1, 3}), 3);
  CHECK(h.shape() == Shape{4, 3});
  CHECK(h.dtype() == kiln::f32);
  CHECK(values(h) == Values{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0});
  const Tensor b = kiln::one_hot(kiln::tensor<std::int32_t>({1}, {1, 1}), 2, kiln::boolean);
  CHECK(b.shape() == Shape{1, 1, 2});
  CHECK(values(b) == Values{0, 1});
  CHECK(kiln::one_hot(kiln::tensor<std::int32_t>({1, 0}), 0, kiln::i64).shape() == Shape{2, 0});
  CHECK(values(kiln::one_hot(kiln::scalar<std::int64_t>(1), 3, kiln::i32)) == Values{0, 1, 0});
}

TEST_CASE("movement kernels called directly on contiguous buffers", "[shape]") {
  using kiln::detail::Attrs;
  using kiln::detail::Prim;
  const auto permutation = [](const Shape& axes) {
    Attrs a;
    a.axes = axes;
    return a;
  };
  const auto slice_starts_steps = [](std::vector<std::int64_t> ints) {
    Attrs a;
    a.ints = std::move(ints);
    return a;
  };
  const auto along = [](std::int64_t axis) {
    Attrs a;
    a.axis = axis;
    return a;
  };
  const auto padding = [](std::vector<std::int64_t> ints, double value) {
    Attrs a;
    a.ints = std::move(ints);
    a.value = value;
    return a;
  };
  struct Case {
    const char* name;
    Prim prim;
    std::vector<Tensor> inputs;
    Attrs attrs;
    kiln::DType dtype;
    Shape out_shape;
    Values expected;
  };
  const Tensor i64s = iota({3}, kiln::i64);
  // clang-format off
  const std::vector<Case> cases = {
      {"reshape", Prim::reshape, {iota({2, 3})}, Attrs{}, kiln::f32, {3, 2}, {0, 1, 2, 3, 4, 5}},
      {"reshape of a rank-0 tensor", Prim::reshape, {iota({}, kiln::i64)}, Attrs{}, kiln::i64,
       {1, 1}, {0}},
      {"transpose 2-D", Prim::transpose, {iota({2, 3})}, permutation({1, 0}), kiln::f32, {3, 2},
       {0, 3, 1, 4, 2, 5}},
      {"transpose 3-D", Prim::transpose, {iota({2, 3, 2}, kiln::i32)}, permutation({2, 0, 1}),
       kiln::i32, {2, 2, 3}, transpose_reference(iota({2, 3, 2}), {2, 0, 1})},
      {"broadcast a row", Prim::broadcast_to, {iota({3})}, Attrs{}, kiln::f32, {2, 3},
       {0, 1, 2, 0, 1, 2}},
      {"broadcast a column", Prim::broadcast_to, {iota({2, 1}, kiln::f64)}, Attrs{}, kiln::f64,
       {2, 3}, {0, 0, 0, 1, 1, 1}},
      {"broadcast a scalar", Prim::broadcast_to, {iota({}, kiln::boolean)}, Attrs{},
       kiln::boolean, {2}, {0, 0}},
      {"slice with a negative step", Prim::slice, {iota({10})}, slice_starts_steps({9, -3}),
       kiln::f32, {4}, {9, 6, 3, 0}},
      {"slice 2-D", Prim::slice, {iota({3, 4})}, slice_starts_steps({2, -1, 1, 2}), kiln::f32,
       {3, 2}, {9, 11, 5, 7, 1, 3}},
      {"empty slice", Prim::slice, {iota({3})}, slice_starts_steps({0, 1}), kiln::f32, {0}, {}},
      {"concat", Prim::concat, {iota({2, 2}), iota({2, 1})}, along(1), kiln::f32, {2, 3},
       {0, 1, 0, 2, 3, 1}},
      {"concat of five", Prim::concat,
       {i64s, i64s, iota({0}, kiln::i64), i64s, iota({1}, kiln::i64)}, Attrs{}, kiln::i64, {10},
       {0, 1, 2, 0, 1, 2, 0, 1, 2, 0}},
      {"pad", Prim::pad, {iota({2}, kiln::i32)}, padding({1, 2}, 7), kiln::i32, {5},
       {7, 0, 1, 7, 7}},
      {"pad 2-D", Prim::pad, {iota({1, 2})}, padding({1, 0, 0, 1}, -1), kiln::f32, {2, 3},
       {-1, -1, -1, 0, 1, -1}},
      {"pad an empty tensor", Prim::pad, {iota({0}, kiln::f64)}, padding({1, 1}, 3), kiln::f64,
       {2}, {3, 3}},
      {"gather", Prim::gather, {iota({5}), kiln::tensor<std::int64_t>({4, -5, 0})}, Attrs{},
       kiln::f32, {3}, {4, 0, 0}},
      {"gather along axis 1", Prim::gather, {iota({2, 3}, kiln::i64),
       kiln::tensor<std::int32_t>({2, 0})}, along(1), kiln::i64, {2, 2}, {2, 0, 5, 3}},
  };
  // clang-format on
  for (const auto& c : cases) {
    INFO(c.name);
    const Tensor out = run_kernel(c.prim, c.inputs, c.attrs, c.dtype, c.out_shape);
    CHECK(values(out) == c.expected);
  }

  SECTION("eager views agree with the copying kernels") {
    const Tensor m = iota({3, 4});
    Attrs slice_attrs;
    slice_attrs.ints = {2, -2, 3, -1};
    CHECK(values(run_kernel(Prim::slice, {m}, slice_attrs, kiln::f32, {2, 4})) ==
          values(kiln::slice(m, {{2, none, -2}, {none, none, -1}})));
    Attrs perm;
    perm.axes = {1, 0};
    CHECK(values(run_kernel(Prim::transpose, {m}, perm, kiln::f32, {4, 3})) ==
          values(kiln::transpose(m)));
  }
  SECTION("reshape reads a strided input through its strides") {
    const Tensor t = kiln::transpose(iota({2, 3}));
    CHECK(values(run_kernel(Prim::reshape, {t}, Attrs{}, kiln::f32, {6})) ==
          Values{0, 3, 1, 4, 2, 5});
  }
  SECTION("gather checks indices at run time") {
    CHECK(error_of([&] {
            run_kernel(Prim::gather, {iota({5}), kiln::tensor<std::int32_t>({1, 5})}, Attrs{},
                       kiln::f32, {2});
          }) == "[gather] index 5 out of range for axis 0 of size 5");
    CHECK(error_of([&] {
            run_kernel(Prim::gather, {iota({5}), iota({1})}, Attrs{}, kiln::f32, {1});
          }) == "[gather] indices must be i32 or i64, got f32");
  }
  SECTION("calls with the wrong input count or of other primitives are refused") {
    const Tensor out = iota({1});
    const kiln::detail::ArrayRef out_ref = kiln::detail::array_ref(out);
    const Attrs attrs;
    CHECK(error_of([&] {
            kiln::detail::run_movement(kiln::detail::KernelCall{
                Prim::concat, std::span<const kiln::detail::ArrayRef>{}, out_ref, attrs});
          }) == "[concat] expects one or more inputs, got 0");
    CHECK(
        error_of([&] {
          kiln::detail::run_movement(kiln::detail::KernelCall{
              Prim::gather, std::span<const kiln::detail::ArrayRef>(&out_ref, 1), out_ref, attrs});
        }) == "[gather] expects 2 inputs, got 1");
    CHECK(error_of([&] {
            kiln::detail::run_movement(kiln::detail::KernelCall{
                Prim::neg, std::span<const kiln::detail::ArrayRef>(&out_ref, 1), out_ref, attrs});
          }) == "[neg] is not a movement primitive");
  }
}

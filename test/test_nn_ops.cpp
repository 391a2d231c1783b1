// The composite array ops (einsum, tril/triu, pad modes, resize): reference values from plain
// loops in f32 and f64, gradients against finite differences in f64, eager against traced, and
// every error message.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "nn_ops_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::test::Args;
using kiln::test::check_close;
using kiln::test::check_gradient;
using kiln::test::check_traced;
using kiln::test::host_values;
using kiln::test::make_tensor;

namespace {

constexpr kiln::DType float_dtypes[] = {kiln::f32, kiln::f64};

/// Row-major strides of a shape.
std::vector<std::int64_t> strides_of(const Shape& s) {
  std::vector<std::int64_t> strides(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) strides[i - 1] = strides[i] * s[i];
  return strides;
}

/// numpy.einsum by brute force over every assignment of the labels: equation with letters only
/// and an explicit output; a dim of size 1 broadcasts.
std::vector<double> einsum_reference(const std::string& equation,
                                     const std::vector<std::vector<double>>& values,
                                     const std::vector<Shape>& shapes, Shape& out_shape) {
  const std::size_t arrow = equation.find("->");
  std::vector<std::string> terms;
  std::string current;
  for (char c : equation.substr(0, arrow)) {
    if (c == ',') {
      terms.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  terms.push_back(current);
  const std::string output = equation.substr(arrow + 2);
  std::map<char, std::int64_t> sizes;
  for (std::size_t i = 0; i < terms.size(); ++i)
    for (std::size_t a = 0; a < terms[i].size(); ++a)
      sizes[terms[i][a]] = std::max(sizes[terms[i][a]], shapes[i][a]);
  out_shape = Shape{};
  for (char c : output) out_shape.push_back(sizes[c]);
  std::vector<double> out(static_cast<std::size_t>(kiln::test::element_count(out_shape)), 0.0);
  std::vector<char> labels;
  for (const auto& [c, n] : sizes) labels.push_back(c);
  std::map<char, std::int64_t> at;
  for (char c : labels) at[c] = 0;
  const auto out_strides = strides_of(out_shape);
  while (true) {
    double product = 1;
    for (std::size_t i = 0; i < terms.size(); ++i) {
      const auto strides = strides_of(shapes[i]);
      std::int64_t flat = 0;
      for (std::size_t a = 0; a < terms[i].size(); ++a)
        flat += (shapes[i][a] == 1 ? 0 : at[terms[i][a]]) * strides[a];
      product *= values[i][static_cast<std::size_t>(flat)];
    }
    std::int64_t flat = 0;
    for (std::size_t a = 0; a < output.size(); ++a) flat += at[output[a]] * out_strides[a];
    out[static_cast<std::size_t>(flat)] += product;
    std::size_t k = 0;
    for (; k < labels.size(); ++k) {
      if (++at[labels[k]] < sizes[labels[k]]) break;
      at[labels[k]] = 0;
    }
    if (k == labels.size()) break;
  }
  return out;
}

struct EinsumCase {
  std::string equation;
  std::string reference;  // the same contraction in explicit letters
  std::vector<Shape> shapes;
  std::vector<Shape> reference_shapes = {};  // when "..." needs other shapes there
  bool gradient = false;
};

const std::vector<EinsumCase>& einsum_cases() {
  static const std::vector<EinsumCase> cases = {
      {"ij,jk->ik", "ij,jk->ik", {{2, 3}, {3, 4}}, {}, true},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 2, 3}, {2, 3, 2}}, {}, true},
      {"i,i->", "i,i->", {{5}, {5}}},
      {"ij->ji", "ij->ji", {{2, 3}}},
      {"ii->i", "ii->i", {{3, 3}}, {}, true},
      {"ii", "ii->", {{3, 3}}, {}, true},
      {"...ij,...jk->...ik", "yzij,zjk->yzik", {{2, 1, 2, 3}, {3, 3, 2}}, {}, true},
      {"...ij,...jk->...ik (no batch)", "ij,jk->ik", {{2, 3}, {3, 4}}},
      {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}, {}, true},
      {"ij,jk", "ij,jk->ik", {{2, 3}, {3, 4}}},
      {"ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}, {}, true},
      {"ij,jk,k", "ij,jk,k->i", {{2, 3}, {3, 4}, {4}}, {}, true},
      {"ij,j->i", "ij,j->i", {{2, 3}, {1}}, {}, true},
      {"ij->", "ij->", {{2, 3}}},
      {"i,j->ij", "i,j->ij", {{3}, {2}}},
      {"bA,c", "bA,c->Abc", {{2, 3}, {4}}},
      {"iij->j", "iij->j", {{2, 2, 3}}, {}, true},
      {"ij,ij->ij", "ij,ij->ij", {{2, 1}, {2, 3}}, {}, true},
      {"... i , i", "zi,i->z", {{2, 3}, {3}}},
      {",i->i", ",i->i", {{}, {3}}, {}, true},
      {"ii,i->i", "ii,i->i", {{1, 1}, {3}}, {}, true},
  };
  return cases;
}

/// The equation a case runs (the "(note)" suffix of a name dropped).
std::string runnable(const std::string& name) { return name.substr(0, name.find(" (")); }

}  // namespace

TEST_CASE("einsum matches a brute-force reference", "[nn_ops]") {
  for (const EinsumCase& c : einsum_cases()) {
    for (kiln::DType dtype : float_dtypes) {
      INFO(c.equation << " in " << kiln::dtype_name(dtype));
      std::vector<std::vector<double>> values;
      Args args;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        values.push_back(kiln::test::as_seen(
            host_values(static_cast<std::size_t>(kiln::test::element_count(c.shapes[i])),
                        static_cast<std::uint32_t>(10 + i)),
            dtype));
        args.push_back(make_tensor(values.back(), c.shapes[i], dtype));
      }
      Shape want_shape;
      const std::vector<double> want = einsum_reference(c.reference, values, c.shapes, want_shape);
      const std::string equation = runnable(c.equation);
      const Tensor got = kiln::einsum(equation, args);
      CHECK(got.dtype() == dtype);
      check_close(got, want_shape, want);
      if (dtype == kiln::f32) {
        check_traced(
            c.equation, [equation](const Args& a) { return kiln::einsum(equation, a); }, args);
      } else if (c.gradient) {
        check_gradient(
            c.equation, [equation](const Args& a) { return kiln::einsum(equation, a); }, args);
      }
    }
  }
}

TEST_CASE("einsum on integers and the matmul it builds", "[nn_ops]") {
  const Tensor a = kiln::tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = kiln::tensor({1, 0, -1, 2, 1, 1}, {3, 2});
  CHECK(kiln::einsum("ij,jk->ik", {a, b}).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{2, 7, 5, 16});
  CHECK(kiln::einsum("ii->", {kiln::tensor({1, 2, 3, 4}, {2, 2})}).item<std::int32_t>() == 5);
  // A zero-size contracted axis sums nothing.
  const Tensor empty = kiln::einsum("ij,jk->ik", {kiln::ones({2, 0}), kiln::ones({0, 3})});
  CHECK(empty.shape() == Shape{2, 3});
  CHECK(kiln::max(kiln::abs(empty)).item<float>() == 0.0f);
  // A two-operand contraction is one matmul in the traced graph.
  auto f = kiln::function([](const Tensor& x, const Tensor& y) {
    return kiln::einsum("bhqd,bhkd->bhqk", {x, y});
  });
  const Tensor q = kiln::random::uniform({2, 2, 3, 4}, -1, 1, 1);
  const Tensor k = kiln::random::uniform({2, 2, 5, 4}, -1, 1, 2);
  const std::string listing = f.get_concrete_function(q, k).graph().to_string();
  INFO(listing);
  const auto first = listing.find("matmul");
  REQUIRE(first != std::string::npos);
  CHECK(listing.find("matmul", first + 1) == std::string::npos);
}

TEST_CASE("einsum errors", "[nn_ops]") {
  const Tensor m23 = kiln::zeros({2, 3}), m42 = kiln::zeros({4, 2}), v1 = kiln::zeros({1});
  using Catch::StartsWith;
  CHECK_THROWS_WITH(kiln::einsum("i1,j", {m23, m23}),
                    StartsWith("[einsum] bad character '1' at position 1 of \"i1,j\""));
  CHECK_THROWS_WITH(kiln::einsum("i-j", {m23}), StartsWith("[einsum] bad character '-'"));
  CHECK_THROWS_WITH(kiln::einsum("i.j", {m23}),
                    StartsWith("[einsum] a '.' at position 1 of \"i.j\" is not part of a '...'"));
  CHECK_THROWS_WITH(kiln::einsum("ij..", {m23}), StartsWith("[einsum] a '.' at position 2"));
  CHECK_THROWS_WITH(kiln::einsum("...i...", {m23}),
                    StartsWith("[einsum] more than one '...' in a term of \"...i...\""));
  CHECK_THROWS_WITH(kiln::einsum("ij,jk->ik", {m23}),
                    "[einsum] equation \"ij,jk->ik\" has 2 operand terms but 1 operand was given");
  CHECK_THROWS_WITH(kiln::einsum("ij", {m23, m23}),
                    "[einsum] equation \"ij\" has 1 operand term but 2 operands were given");
  CHECK_THROWS_WITH(kiln::einsum("", {}), "[einsum] needs at least one operand");
  CHECK_THROWS_WITH(kiln::einsum("ij", {Tensor()}), "[einsum] argument 0 is an undefined tensor");
  CHECK_THROWS_WITH(kiln::einsum("ijk->i", {m23}),
                    "[einsum] operand 0 of shape [2,3] has rank 2, but its term names 3 axes");
  CHECK_THROWS_WITH(
      kiln::einsum("...ijk->i", {m23}),
      "[einsum] operand 0 of shape [2,3] has rank 2, but its term names at least 3 axes");
  CHECK_THROWS_WITH(kiln::einsum("ij,jk->ik", {m23, m42}),
                    "[einsum] label 'j' has size 3 in operand 0 but size 4 in operand 1");
  CHECK_THROWS_WITH(kiln::einsum("ii->i", {m23}),
                    "[einsum] label 'i' has size 2 in operand 0 but size 3 in operand 0");
  CHECK_THROWS_WITH(kiln::einsum("ij->ik", {m23}),
                    "[einsum] output label 'k' of \"ij->ik\" is in no operand");
  CHECK_THROWS_WITH(kiln::einsum("ij->ii", {m23}),
                    "[einsum] output label 'i' appears more than once in \"ij->ii\"");
  CHECK_THROWS_WITH(kiln::einsum("ij->i,j", {m23}),
                    "[einsum] the output of \"ij->i,j\" has a ',' (one output only)");
  CHECK_THROWS_WITH(
      kiln::einsum("...j->j", {m23}),
      "[einsum] the operands' '...' stands for 1 dim, but the output of \"...j->j\" has no '...'");
  CHECK_THROWS_WITH(kiln::einsum("i,j", {v1, kiln::zeros({1}, kiln::f64)}),
                    "[einsum] dtypes differ: f32 (operand 0) vs f64 (operand 1; use kiln::cast)");
  CHECK_THROWS_WITH(
      kiln::einsum("i", {kiln::zeros({1}, kiln::boolean)}),
      "[einsum] dtype bool is not supported (floating or integer only; use kiln::cast)");
  CHECK_THROWS_WITH(kiln::einsum("a,b,c,d,e,f,g,h,i", {v1, v1, v1, v1, v1, v1, v1, v1, v1}),
                    "[einsum] the output has 9 dims, more than the maximum rank 8");
  // A merged matmul dim must be static while tracing.
  kiln::FunctionOptions dynamic;
  dynamic.input_signature = {kiln::TensorSpec({-1, 3}), kiln::TensorSpec({3, -1})};
  auto outer = kiln::function(
      [](const Tensor& x, const Tensor& y) {
        return kiln::einsum("ij,jk->ikj", {x, y});
      },
      dynamic);
  CHECK_NOTHROW(outer(m23, kiln::zeros({3, 4})));
  auto merged = kiln::function(
      [](const Tensor& x) {
        return kiln::einsum("ij,k->ijk", {x, kiln::ones({2})});
      },
      [] {
        kiln::FunctionOptions o;
        o.input_signature = {kiln::TensorSpec({-1, 3})};
        return o;
      }());
  CHECK_THROWS_WITH(merged(m23),
                    Catch::Contains("[einsum] a dim merged into a matmul dim is a dynamic dim"));
}

// ---------------------------------------------------------------- tril / triu

TEST_CASE("tril and triu keep one side of a diagonal", "[nn_ops]") {
  const Shape shape{2, 3, 4};
  const std::vector<double> base = host_values(24, 3);
  for (std::int64_t k : {-10, -1, 0, 2, 10}) {
    for (bool lower : {true, false}) {
      std::vector<double> want(24);
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t r = 0; r < 3; ++r)
          for (std::int64_t c = 0; c < 4; ++c) {
            const auto at = static_cast<std::size_t>((b * 3 + r) * 4 + c);
            const bool keep = lower ? c - r <= k : c - r >= k;
            want[at] = keep ? base[at] : 0.0;
          }
      const auto op = [lower, k](const Args& a) {
        return lower ? kiln::tril(a[0], k) : kiln::triu(a[0], k);
      };
      INFO((lower ? "tril" : "triu") << " k = " << k);
      for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
        const std::vector<double> seen = kiln::test::as_seen(base, dtype);
        std::vector<double> want_seen = want;
        for (std::size_t i = 0; i < 24; ++i) want_seen[i] = want[i] == 0.0 ? 0.0 : seen[i];
        check_close(op({make_tensor(base, shape, dtype)}), shape, want_seen);
      }
      // Integers and booleans (ones where kept).
      const Tensor ints = kiln::cast(kiln::ones(shape), kiln::i32);
      const auto got = op({ints}).to_vector<std::int32_t>();
      const auto bools = op({kiln::ones(shape, kiln::boolean)}).to_vector<bool>();
      for (std::size_t i = 0; i < 24; ++i) {
        const bool kept = want[i] != 0.0;
        CHECK(got[i] == (kept ? 1 : 0));
        CHECK(bools[i] == kept);
      }
      check_traced("triangle", op, {make_tensor(base, shape, kiln::f32)});
      check_gradient("triangle", op, {make_tensor(base, shape, kiln::f64)});
    }
  }
}

TEST_CASE("tril and triu errors", "[nn_ops]") {
  CHECK_THROWS_WITH(kiln::tril(kiln::zeros({3})),
                    "[tril] needs rank >= 2 (a matrix or a batch of them), got shape [3]");
  CHECK_THROWS_WITH(kiln::triu(kiln::scalar(1.0)),
                    "[triu] needs rank >= 2 (a matrix or a batch of them), got shape []");
  CHECK_THROWS_WITH(kiln::tril(Tensor()), "[tril] argument 0 is an undefined tensor");
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({3, -1})};
  auto f = kiln::function([](const Tensor& x) { return kiln::triu(x); }, o);
  CHECK_THROWS_WITH(f(kiln::zeros({3, 3})),
                    Catch::StartsWith("[triu] the column axis is a dynamic dim"));
  o.input_signature = {kiln::TensorSpec({-1, 3})};
  auto g = kiln::function([](const Tensor& x) { return kiln::tril(x); }, o);
  CHECK_THROWS_WITH(g(kiln::zeros({3, 3})),
                    Catch::StartsWith("[tril] the row axis is a dynamic dim"));
}

// ---------------------------------------------------------------- pad modes

namespace {

/// The source index of padded position o along an axis of n elements, NumPy's rule per mode.
std::int64_t pad_source(std::int64_t o, std::int64_t before, std::int64_t n, kiln::PadMode mode) {
  std::int64_t i = o - before;
  switch (mode) {
    case kiln::PadMode::reflect:
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      return i;
    case kiln::PadMode::edge:
      return std::clamp<std::int64_t>(i, 0, n - 1);
    case kiln::PadMode::wrap:
      return ((i % n) + n) % n;
    case kiln::PadMode::constant:
      return i >= 0 && i < n ? i : -1;
  }
  return -1;
}

}  // namespace

TEST_CASE("pad modes follow NumPy", "[nn_ops]") {
  using Widths = std::vector<std::pair<std::int64_t, std::int64_t>>;
  struct PadCase {
    kiln::PadMode mode;
    Widths widths;
  };
  const std::vector<PadCase> cases = {
      {kiln::PadMode::reflect, {{2, 1}, {1, 3}}}, {kiln::PadMode::reflect, {{0, 0}, {3, 0}}},
      {kiln::PadMode::edge, {{2, 0}, {3, 1}}},    {kiln::PadMode::wrap, {{3, 1}, {2, 4}}},
      {kiln::PadMode::wrap, {{0, 3}, {0, 0}}},    {kiln::PadMode::constant, {{1, 2}, {0, 1}}},
  };
  const Shape shape{3, 4};
  const std::vector<double> base = host_values(12, 5);
  for (const PadCase& c : cases) {
    INFO("mode " << static_cast<int>(c.mode) << " widths (" << c.widths[0].first << ","
                 << c.widths[0].second << "), (" << c.widths[1].first << "," << c.widths[1].second
                 << ")");
    const Shape out{3 + c.widths[0].first + c.widths[0].second,
                    4 + c.widths[1].first + c.widths[1].second};
    std::vector<double> want;
    for (std::int64_t r = 0; r < out[0]; ++r)
      for (std::int64_t col = 0; col < out[1]; ++col) {
        const std::int64_t sr = pad_source(r, c.widths[0].first, 3, c.mode);
        const std::int64_t sc = pad_source(col, c.widths[1].first, 4, c.mode);
        want.push_back(sr < 0 || sc < 0 ? 7.5 : base[static_cast<std::size_t>(sr * 4 + sc)]);
      }
    const auto op = [&c](const Args& a) { return kiln::pad(a[0], c.widths, c.mode, 7.5); };
    check_close(op({make_tensor(base, shape, kiln::f64)}), out, want);
    const Tensor f32_result = op({make_tensor(base, shape, kiln::f32)});
    check_close(f32_result, out, want);
    // Integers: the indices themselves, exactly.
    std::vector<std::int64_t> index(12);
    for (std::size_t i = 0; i < 12; ++i) index[i] = static_cast<std::int64_t>(i);
    const auto got = op({kiln::tensor(index, shape)}).to_vector<std::int64_t>();
    std::size_t at = 0;
    for (std::int64_t r = 0; r < out[0]; ++r)
      for (std::int64_t col = 0; col < out[1]; ++col, ++at) {
        const std::int64_t sr = pad_source(r, c.widths[0].first, 3, c.mode);
        const std::int64_t sc = pad_source(col, c.widths[1].first, 4, c.mode);
        CHECK(got[at] == (sr < 0 || sc < 0 ? 7 : sr * 4 + sc));
      }
    check_traced("pad", op, {make_tensor(base, shape, kiln::f32)});
    check_gradient("pad", op, {make_tensor(base, shape, kiln::f64)});
  }
}

TEST_CASE("pad mode errors", "[nn_ops]") {
  const Tensor x = kiln::zeros({3, 4});
  using kiln::PadMode;
  CHECK_NOTHROW(kiln::pad(x, {{0, 0}, {3, 3}}, PadMode::reflect));
  CHECK_THROWS_WITH(kiln::pad(x, {{0, 0}, {1, 4}}, PadMode::reflect),
                    "[pad] reflect mode needs widths at most size - 1 = 3 on axis 1 of size 4, got "
                    "(1, 4)");
  CHECK_THROWS_WITH(kiln::pad(x, {{3, 0}, {0, 0}}, PadMode::reflect),
                    "[pad] reflect mode needs widths at most size - 1 = 2 on axis 0 of size 3, got "
                    "(3, 0)");
  CHECK_THROWS_WITH(kiln::pad(x, {{0, 0}, {1, 5}}, PadMode::wrap),
                    "[pad] wrap mode needs widths at most the size 4 of axis 1, got (1, 5)");
  CHECK_THROWS_WITH(kiln::pad(kiln::zeros({0, 2}), {{1, 0}, {0, 0}}, PadMode::edge),
                    "[pad] edge mode cannot pad the empty axis 0 (widths (1, 0))");
  CHECK_THROWS_WITH(kiln::pad(x, {{0, -1}, {0, 0}}, PadMode::wrap),
                    "[pad] negative width (0, -1) for axis 0");
  CHECK_THROWS_WITH(kiln::pad(x, {{0, 1}}, PadMode::edge),
                    "[pad] 1 widths given for shape [3,4] of rank 2");
  CHECK_THROWS_WITH(kiln::pad(Tensor(), {}, PadMode::edge),
                    "[pad] argument 0 is an undefined tensor");
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({-1, 4})};
  auto f = kiln::function(
      [](const Tensor& t) {
        return kiln::pad(t, {{1, 0}, {0, 0}}, PadMode::edge);
      },
      o);
  CHECK_THROWS_WITH(f(x), Catch::StartsWith("[pad] a padded axis is a dynamic dim"));
  // Unpadded dynamic axes are fine.
  auto g = kiln::function(
      [](const Tensor& t) {
        return kiln::pad(t, {{0, 0}, {1, 1}}, PadMode::wrap);
      },
      o);
  CHECK(g(x).shape() == Shape{3, 6});
  // A reflected size-1 axis with width 0 is fine, and edge pads it.
  CHECK(kiln::pad(kiln::ones({1, 2}), {{2, 0}, {0, 0}}, PadMode::edge).shape() == Shape{3, 2});
}

// ---------------------------------------------------------------- resize

namespace {

/// (source index, weight) pairs of output position o along an axis of in -> out elements, by
/// ONNX Resize's reference rules (neighbours beyond the axis take the edge element).
std::vector<std::pair<std::int64_t, double>> resize_taps(std::int64_t o, std::int64_t in,
                                                         std::int64_t out,
                                                         const kiln::ResizeOptions& opt) {
  if (in == out) return {{o, 1.0}};
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  double x = 0;
  switch (opt.coordinates) {
    case kiln::CoordinateMode::half_pixel:
      x = (o + 0.5) / scale - 0.5;
      break;
    case kiln::CoordinateMode::pytorch_half_pixel:
      x = out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
      break;
    case kiln::CoordinateMode::align_corners:
      x = out == 1 ? 0.0 : o * (in - 1.0) / (out - 1.0);
      break;
    case kiln::CoordinateMode::asymmetric:
      x = o / scale;
      break;
  }
  const auto edge = [in](double i) {
    return static_cast<std::int64_t>(std::min<double>(std::max(i, 0.0), in - 1.0));
  };
  const double below = std::floor(x), ratio = x - below;
  if (opt.mode == kiln::ResizeMode::linear) {
    if (ratio == 0) return {{edge(x), 1.0}};
    return {{edge(below), 1 - ratio}, {edge(below + 1), ratio}};
  }
  bool up = false;  // take below + 1 rather than below
  switch (opt.nearest) {
    case kiln::NearestRounding::round_prefer_floor:
      up = ratio > 0.5;
      break;
    case kiln::NearestRounding::round_prefer_ceil:
      up = ratio >= 0.5;
      break;
    case kiln::NearestRounding::floor:
      up = false;
      break;
    case kiln::NearestRounding::ceil:
      up = ratio > 0;
      break;
  }
  return {{edge(up ? below + 1 : below), 1.0}};
}

/// resize by n-linear sums over every combination of taps (no separable passes).
std::vector<double> resize_reference(const std::vector<double>& x, const Shape& in,
                                     const Shape& out, const kiln::ResizeOptions& opt) {
  const auto in_strides = strides_of(in);
  std::vector<double> result;
  std::vector<std::int64_t> index(out.size(), 0);
  for (std::int64_t flat = 0; flat < kiln::test::element_count(out); ++flat) {
    std::int64_t rest = flat;
    for (std::size_t d = out.size(); d-- > 0;) {
      index[d] = rest % out[d];
      rest /= out[d];
    }
    // Sum over the product of the per-axis taps.
    std::vector<std::pair<std::int64_t, double>> partial = {{0, 1.0}};
    for (std::size_t d = 0; d < out.size(); ++d) {
      std::vector<std::pair<std::int64_t, double>> next;
      for (const auto& [offset, weight] : partial)
        for (const auto& [src, w] : resize_taps(index[d], in[d], out[d], opt))
          next.push_back({offset + src * in_strides[d], weight * w});
      partial = next;
    }
    double value = 0;
    for (const auto& [offset, weight] : partial)
      value += weight * x[static_cast<std::size_t>(offset)];
    result.push_back(value);
  }
  return result;
}

}  // namespace

TEST_CASE("resize matches ONNX Resize's published examples", "[nn_ops]") {
  const Tensor x22 = kiln::tensor({1.f, 2.f, 3.f, 4.f}, {1, 1, 2, 2});
  kiln::ResizeOptions linear;
  linear.mode = kiln::ResizeMode::linear;
  // resize_upsample_scales_linear (half_pixel).
  check_close(kiln::resize(x22, {1, 1, 4, 4}, linear), {1, 1, 4, 4},
              {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  // resize_upsample_scales_linear_align_corners.
  linear.coordinates = kiln::CoordinateMode::align_corners;
  const double t = 1.0 / 3;
  check_close(
      kiln::resize(x22, {1, 1, 4, 4}, linear), {1, 1, 4, 4},
      {1, 1 + t, 2 - t, 2, 2 - t, 2, 2 + t, 3 - t, 2 + t, 3 - t, 3, 3 + t, 3, 3 + t, 4 - t, 4});
  // resize_upsample_scales_nearest (scales 2 and 3).
  check_close(kiln::resize(x22, {1, 1, 4, 6}), {1, 1, 4, 6},
              {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  // resize_downsample_scales_nearest.
  const Tensor x24 = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}, {1, 1, 2, 4});
  check_close(kiln::resize(x24, {1, 1, 1, 2}), {1, 1, 1, 2}, {1, 3});
  // resize_downsample_sizes_linear_pytorch_half_pixel.
  std::vector<float> sixteen(16);
  for (std::size_t i = 0; i < 16; ++i) sixteen[i] = static_cast<float>(i + 1);
  linear.coordinates = kiln::CoordinateMode::pytorch_half_pixel;
  check_close(kiln::resize(kiln::tensor(sixteen, {1, 1, 4, 4}), {1, 1, 3, 1}, linear), {1, 1, 3, 1},
              {1.6666666, 7, 12.333333});
  // Integers resize by nearest exactly.
  CHECK(kiln::resize(kiln::tensor({1, 2}, {2}), {4}).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, 1, 2, 2});
}

TEST_CASE("resize matches a reference in every mode", "[nn_ops]") {
  const Shape in{2, 3, 4};
  const std::vector<double> base = host_values(24, 7);
  const std::vector<Shape> outs = {{2, 5, 3}, {1, 6, 8}, {3, 1, 2}, {2, 3, 7}};
  std::vector<kiln::ResizeOptions> options;
  for (auto coordinates :
       {kiln::CoordinateMode::half_pixel, kiln::CoordinateMode::pytorch_half_pixel,
        kiln::CoordinateMode::align_corners, kiln::CoordinateMode::asymmetric}) {
    options.push_back({kiln::ResizeMode::linear, coordinates});
    for (auto nearest :
         {kiln::NearestRounding::round_prefer_floor, kiln::NearestRounding::round_prefer_ceil,
          kiln::NearestRounding::floor, kiln::NearestRounding::ceil})
      options.push_back({kiln::ResizeMode::nearest, coordinates, nearest});
  }
  for (const kiln::ResizeOptions& opt : options) {
    for (const Shape& out : outs) {
      INFO("mode " << static_cast<int>(opt.mode) << ", coordinates "
                   << static_cast<int>(opt.coordinates) << ", rounding "
                   << static_cast<int>(opt.nearest) << ", out " << out.to_string());
      const auto op = [out, opt](const Args& a) { return kiln::resize(a[0], out, opt); };
      for (kiln::DType dtype : float_dtypes) {
        const std::vector<double> seen = kiln::test::as_seen(base, dtype);
        check_close(op({make_tensor(base, in, dtype)}), out, resize_reference(seen, in, out, opt));
      }
      check_traced("resize", op, {make_tensor(base, in, kiln::f32)});
      if (opt.mode == kiln::ResizeMode::linear ||
          opt.nearest == kiln::NearestRounding::round_prefer_floor)
        check_gradient("resize", op, {make_tensor(base, in, kiln::f64)});
    }
  }
}

TEST_CASE("resize errors", "[nn_ops]") {
  const Tensor x = kiln::zeros({2, 3});
  kiln::ResizeOptions linear;
  linear.mode = kiln::ResizeMode::linear;
  CHECK_THROWS_WITH(kiln::resize(x, {4}),
                    "[resize] out_shape [4] has rank 1, but x has shape [2,3] of rank 2");
  CHECK_THROWS_WITH(
      kiln::resize(kiln::zeros({2}, kiln::i32), {4}, linear),
      "[resize] linear mode needs a floating-point dtype, got i32 (nearest takes any)");
  CHECK_THROWS_WITH(kiln::resize(x, {2, -3}),
                    "[resize] negative size -3 for axis 1 in out_shape [2,-3]");
  CHECK_THROWS_WITH(kiln::resize(kiln::zeros({0, 3}), {2, 3}),
                    "[resize] cannot resize the empty axis 0 of [0,3] to size 2");
  CHECK_THROWS_WITH(kiln::resize(Tensor(), {}), "[resize] argument 0 is an undefined tensor");
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({-1, 3})};
  auto f = kiln::function([](const Tensor& t) { return kiln::resize(t, {4, 3}); }, o);
  CHECK_THROWS_WITH(f(x), Catch::StartsWith("[resize] a resized axis of x is a dynamic dim"));
  auto g = kiln::function(
      [](const Tensor& t) {
        return kiln::resize(t, {t.shape()[0], 6}, {});
      },
      o);
  CHECK(g(x).shape() == Shape{2, 6});  // an unchanged dynamic axis is fine
  auto h = kiln::function(
      [](const Tensor& t) {
        return kiln::resize(t, {t.shape()[0], t.shape()[0]}, {});
      },
      o);
  CHECK_THROWS_WITH(h(x),
                    Catch::StartsWith("[resize] a resized size in out_shape is a dynamic dim"));
  // Empty results are fine.
  CHECK(kiln::resize(x, {2, 0}).shape() == Shape{2, 0});
}

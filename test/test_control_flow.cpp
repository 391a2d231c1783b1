// Control flow (kiln::scan, while_loop, cond): eager results against hand-written C++ loops,
// traced results bit for bit against eager ones (static and dynamic trip counts; within float
// tolerance where loop hoisting stacks a per-step product into one GEMM), variables read
// by reference inside bodies, captures, nesting, and that repeated traced calls grow nothing.
// Errors, gradients, and the cases that crash at the time of writing (run in child processes)
// are in test_control_flow_errors.cpp.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/control_flow.hpp>
#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;

namespace {

using Tensors = std::vector<Tensor>;
using ScanResult = std::pair<Tensors, Tensors>;

/// Empty when a and b have the same dtype, shape and bytes (a NaN matches any NaN: its sign and
/// payload are not pinned); else the first difference.
std::string bit_difference(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return "an undefined tensor";
  if (a.dtype() != b.dtype())
    return fmt::format("dtype {} against {}", kiln::dtype_name(a.dtype()),
                       kiln::dtype_name(b.dtype()));
  if (a.shape() != b.shape())
    return fmt::format("shape {} against {}", a.shape().to_string(), b.shape().to_string());
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const std::size_t width = kiln::dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(ca.data());
  const auto* pb = static_cast<const unsigned char*>(cb.data());
  const auto both_nan = [&](auto zero, const unsigned char* x, const unsigned char* y) {
    decltype(zero) u, v;
    std::memcpy(&u, x, sizeof u);
    std::memcpy(&v, y, sizeof v);
    return std::isnan(u) && std::isnan(v);
  };
  for (std::size_t i = 0; i < static_cast<std::size_t>(a.size()); ++i) {
    const unsigned char *x = pa + i * width, *y = pb + i * width;
    if (std::memcmp(x, y, width) == 0 || (a.dtype() == kiln::f32 && both_nan(0.f, x, y)) ||
        (a.dtype() == kiln::f64 && both_nan(0.0, x, y)))
      continue;
    const auto value = [&](const Tensor& c) {
      return kiln::cast(kiln::reshape(c, {-1}), kiln::f64).to_vector<double>()[i];
    };
    return fmt::format("element {}: {} against {}", i, value(ca), value(cb));
  }
  return "";
}

std::string bit_difference(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return fmt::format("{} tensors against {}", a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::string d = bit_difference(a[i], b[i]); !d.empty())
      return fmt::format("tensor {}: {}", i, d);
  return "";
}

std::string bit_difference(const ScanResult& a, const ScanResult& b) {
  if (std::string d = bit_difference(a.first, b.first); !d.empty()) return "carry: " + d;
  if (std::string d = bit_difference(a.second, b.second); !d.empty()) return "ys: " + d;
  return "";
}

#define CHECK_SAME_BITS(a, b)                             \
  do {                                                    \
    const std::string difference_ = bit_difference(a, b); \
    INFO("bit difference: " << difference_);              \
    CHECK(difference_.empty());                           \
  } while (false)

/// Empty when a and b hold the same shapes and every value of a is within 1e-6 (|b| + 1) of b's;
/// else the first difference.
std::string value_difference(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return fmt::format("{} tensors against {}", a.size(), b.size());
  for (std::size_t t = 0; t < a.size(); ++t) {
    if (a[t].shape() != b[t].shape() || a[t].dtype() != b[t].dtype())
      return fmt::format("tensor {}: {} against {}", t, a[t].shape().to_string(),
                         b[t].shape().to_string());
    const auto x = kiln::cast(a[t], kiln::f64).to_vector<double>();
    const auto y = kiln::cast(b[t], kiln::f64).to_vector<double>();
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!(std::abs(x[i] - y[i]) <= 1e-6 * (std::abs(y[i]) + 1)))
        return fmt::format("tensor {}: element {}: {} against {}", t, i, x[i], y[i]);
  }
  return "";
}

template <class T>
Tensor t(std::vector<T> values, const Shape& shape) {
  return kiln::tensor(values, shape);
}

/// One scan: the same body and arguments run eagerly and traced.
struct ScanCase {
  std::string name;
  kiln::ScanBody body;
  Tensors init, xs;
  kiln::ScanOptions options{};
  /// Whether the traced loop may compute a per-step matmul for all steps at once (loop
  /// hoisting stacks `x_t W` into one GEMM of T b rows). A library may round those rows
  /// otherwise than b-row products (oneDNN does, on Zen 2), so such a case is compared within
  /// float tolerance; every other case bit for bit.
  bool stacks_products = false;
};

/// The cases of the reference tests, traced against eager below.
std::vector<ScanCase> scan_cases() {
  std::vector<ScanCase> c;
  // One carry and one x, in three dtypes: c' = 2c + x, y = c' - 3x.
  const kiln::ScanBody affine = [](const Tensors& carry, const Tensors& x) {
    Tensor next = carry[0] * 2 + x[0];
    return ScanResult{{next}, {next - x[0] * 3}};
  };
  for (kiln::DType d : {kiln::f32, kiln::f64, kiln::i32})
    c.push_back({fmt::format("one carry, one x, {}", kiln::dtype_name(d)),
                 affine,
                 {kiln::cast(t<float>({1, -2, 3}, {3}), d)},
                 {kiln::cast(kiln::random::uniform({6, 3}, -4, 4, 11), d)}});
  // Several carries, xs and ys of several dtypes; a y that is also the carry, and a y that is
  // an x unchanged.
  const kiln::ScanBody several = [](const Tensors& carry, const Tensors& x) {
    Tensor s = carry[0] + x[0] * x[1];
    Tensor k = carry[1] + x[2];
    Tensor p = carry[2] * 0.5 + kiln::cast(x[0], kiln::f64);
    return ScanResult{{s, k, p}, {s, kiln::sum(x[0] - x[1]), k, x[0] > x[1], x[1]}};
  };
  const Tensors init{t<float>({0.5f, -1}, {2}), kiln::scalar<std::int32_t>(7),
                     t<double>({1, 2}, {2})};
  const Tensors xs{kiln::random::uniform({5, 2}, -1, 1, 12),
                   kiln::random::uniform({5, 2}, -1, 1, 13),
                   t<std::int32_t>({3, -1, 4, -1, 5}, {5})};
  c.push_back({"several carries, xs and ys", several, init, xs});
  c.push_back({"several carries, xs and ys, reverse", several, init, xs, {-1, true}});
  // The body swaps: the new carry is x, the y the old carry (parameters passed through).
  const kiln::ScanBody swap = [](const Tensors& carry, const Tensors& x) {
    return ScanResult{{x[0]}, {carry[0]}};
  };
  c.push_back({"carry and x passed through",
               swap,
               {t<float>({9, 8}, {2})},
               {kiln::random::uniform({4, 2}, -1, 1, 14)}});
  // Two carries trade places every step (each step reads one carry buffer and writes the
  // other), and a y is a carry passed through.
  const kiln::ScanBody trade = [](const Tensors& carry, const Tensors& x) {
    return ScanResult{{carry[1], carry[0] + x[0]}, {carry[0], carry[1] * x[0]}};
  };
  for (std::int64_t steps : {1, 2, 5})
    c.push_back({fmt::format("two carries trade places, {} steps", steps),
                 trade,
                 {t<float>({1, 2}, {2}), t<float>({-3, 4}, {2})},
                 {kiln::random::uniform({steps, 2}, -1, 1, 17)}});
  // No xs: the trip count comes from options.length.
  const kiln::ScanBody counter = [](const Tensors& carry, const Tensors&) {
    Tensor k = carry[0] * 2 + 1;
    return ScanResult{{k, carry[1] + kiln::cast(k, kiln::f32)}, {k}};
  };
  c.push_back({"no xs, length 5",
               counter,
               {kiln::scalar<std::int32_t>(1), t<float>({0.25f, -0.5f}, {2})},
               {},
               {5, false}});
  // xs of rank 3: each step sees a matrix; tanh and matmul in the body.
  const Tensor w = kiln::random::normal({3, 4}, 0, 0.5, 15);
  const kiln::ScanBody matrix = [w](const Tensors& carry, const Tensors& x) {
    Tensor h = kiln::tanh(kiln::matmul(x[0], w) + carry[0]);
    return ScanResult{{h}, {kiln::sum(h, {1})}};
  };
  c.push_back({"matrix steps",
               matrix,
               {kiln::zeros({2, 4})},
               {kiln::random::normal({7, 2, 3}, 0, 1, 16)},
               {},
               true});
  return c;
}

ScanResult traced_scan(const ScanCase& c, int calls = 2) {
  auto f = kiln::function([&c](const Tensors& init, const Tensors& xs) {
    return kiln::scan(c.body, init, xs, c.options);
  });
  ScanResult r = f(c.init, c.xs);
  for (int i = 1; i < calls; ++i) r = f(c.init, c.xs);
  CHECK(f.tracing_count() == 1);
  return r;
}

}  // namespace

// ------------------------------------------------------------------ scan, eager

TEMPLATE_TEST_CASE("scan with one carry and one x matches a C++ loop", "[control_flow]", float,
                   double, std::int32_t) {
  const std::int64_t steps = 6, width = 3;
  std::vector<TestType> c{1, -2, 3}, xs, ys;
  for (std::int64_t i = 0; i < steps * width; ++i)
    xs.push_back(static_cast<TestType>(static_cast<int>(i * 5 % 7) - 3));
  const std::vector<TestType> init = c;
  for (std::int64_t s = 0; s < steps; ++s)
    for (std::int64_t i = 0; i < width; ++i) {
      const TestType x = xs[static_cast<std::size_t>(s * width + i)];
      c[static_cast<std::size_t>(i)] = c[static_cast<std::size_t>(i)] * 2 + x;
      ys.push_back(c[static_cast<std::size_t>(i)] - x * 3);
    }
  const std::pair<Tensor, Tensor> r = kiln::scan(
      [](const Tensor& cr, const Tensor& x) {
        Tensor next = cr * 2 + x;
        return std::pair<Tensor, Tensor>{next, next - x * 3};
      },
      t(init, {width}), t(xs, {steps, width}));
  const Tensor &carry = r.first, &y = r.second;
  CHECK(carry.dtype() == kiln::dtype_of<TestType>());
  CHECK(carry.shape() == Shape{width});
  CHECK(carry.to_vector<TestType>() == c);
  CHECK(y.shape() == Shape{steps, width});
  CHECK(y.to_vector<TestType>() == ys);
}

TEST_CASE("scan with several carries, xs and ys matches a C++ loop, forward and reverse",
          "[control_flow]") {
  const std::vector<float> a{1, 2, -1, 0.5f, 3, -2, 0, 1}, b{2, -1, 0.5f, 4, 1, 1, -3, 2};
  const std::vector<std::int32_t> m{3, -1, 4, 1};
  const kiln::ScanBody body = [](const Tensors& carry, const Tensors& x) {
    Tensor s = carry[0] + x[0] * x[1];  // f32 [2]
    Tensor k = carry[1] + x[2];         // i32 []
    return ScanResult{{s, k}, {s, kiln::sum(x[0] - x[1]), k * 10}};
  };
  for (bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    std::vector<float> s{0.5f, -1}, y0(8), y1(4);
    std::int32_t k = 7;
    std::vector<std::int32_t> y2(4);
    for (int step = 0; step < 4; ++step) {
      const int u = reverse ? 3 - step : step;
      for (int i = 0; i < 2; ++i) s[i] += a[u * 2 + i] * b[u * 2 + i];
      k += m[u];
      y0[u * 2] = s[0], y0[u * 2 + 1] = s[1];
      y1[u] = (a[u * 2] - b[u * 2]) + (a[u * 2 + 1] - b[u * 2 + 1]);
      y2[u] = k * 10;
    }
    auto [carry, ys] = kiln::scan(body, {t<float>({0.5f, -1}, {2}), kiln::scalar<std::int32_t>(7)},
                                  {t(a, {4, 2}), t(b, {4, 2}), t(m, {4})}, {-1, reverse});
    REQUIRE(carry.size() == 2);
    REQUIRE(ys.size() == 3);
    CHECK(carry[0].to_vector<float>() == s);
    CHECK(carry[1].shape() == Shape{});
    CHECK(carry[1].item<std::int32_t>() == k);
    CHECK(ys[0].shape() == Shape{4, 2});
    CHECK(ys[0].to_vector<float>() == y0);
    CHECK(ys[1].shape() == Shape{4});
    CHECK(ys[1].to_vector<float>() == y1);
    CHECK(ys[2].dtype() == kiln::i32);
    CHECK(ys[2].to_vector<std::int32_t>() == y2);
  }
}

TEST_CASE("a reverse scan runs from the last step and keeps each y at its step", "[control_flow]") {
  // Suffix sums: ys[t] = init + x[t] + ... + x[T-1].
  auto [total, suffix] = kiln::scan(
      [](const Tensor& c, const Tensor& x) {
        return std::pair<Tensor, Tensor>{c + x, c + x};
      },
      kiln::scalar(100.f), t<float>({1, 2, 3, 4, 5}, {5}), {-1, true});
  CHECK(total.item<float>() == 115.f);
  CHECK(suffix.to_vector<float>() == std::vector<float>{115, 114, 112, 109, 105});
  // The order of the steps is visible in a carry that is not commutative: c' = 2c + x.
  auto [last, ys] = kiln::scan(
      [](const Tensor& c, const Tensor& x) {
        return std::pair<Tensor, Tensor>{c * 2 + x, c};
      },
      kiln::scalar<std::int32_t>(0), t<std::int32_t>({1, 2, 3}, {3}), {-1, true});
  CHECK(last.item<std::int32_t>() == 3 * 4 + 2 * 2 + 1);  // 3, then 2*3+2, then 2*8+1
  CHECK(ys.to_vector<std::int32_t>() == std::vector<std::int32_t>{8, 3, 0});
}

TEST_CASE("a scan without xs runs options.length steps", "[control_flow]") {
  auto [carry, ys] = kiln::scan(
      [](const Tensors& c, const Tensors& x) {
        CHECK(x.empty());
        Tensor k = c[0] * 2 + 1;
        return ScanResult{{k}, {k, kiln::cast(k, kiln::f64) * 0.5}};
      },
      {kiln::scalar<std::int32_t>(1)}, {}, {5, false});
  REQUIRE(ys.size() == 2);
  CHECK(carry[0].item<std::int32_t>() == 63);
  CHECK(ys[0].to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 7, 15, 31, 63});
  CHECK(ys[1].to_vector<double>() == std::vector<double>{1.5, 3.5, 7.5, 15.5, 31.5});
}

namespace {

/// The zero-length cases: xs with no steps, and no xs with length 0.
const kiln::ScanBody zero_body = [](const Tensors& c, const Tensors& x) {
  return ScanResult{{c[0] + x[0]}, {c[0] * x[0], kiln::sum(x[0])}};
};
const kiln::ScanBody zero_length_body = [](const Tensors& c, const Tensors&) {
  return ScanResult{{c[0] * 2}, {c[0]}};
};

/// Empty when r is init with ys of the body's shapes stacked over zero steps.
std::string zero_steps_difference(const ScanResult& r, const Tensor& init,
                                  const std::vector<Shape>& ys_shapes) {
  if (std::string d = bit_difference(r.first, Tensors{init}); !d.empty()) return "carry: " + d;
  if (r.second.size() != ys_shapes.size())
    return fmt::format("{} ys, expected {}", r.second.size(), ys_shapes.size());
  for (std::size_t i = 0; i < ys_shapes.size(); ++i)
    if (r.second[i].shape() != ys_shapes[i])
      return fmt::format("y {} has shape {}", i, r.second[i].shape().to_string());
  return "";
}

}  // namespace

TEST_CASE("a zero-length scan returns init and ys with a leading dim of 0, eager",
          "[control_flow]") {
  const Tensor init = t<float>({1, 2, 3}, {3});
  const ScanResult r = kiln::scan(zero_body, {init}, {kiln::zeros({0, 3})});
  CHECK(zero_steps_difference(r, init, {{0, 3}, {0}}) == "");
  CHECK(zero_steps_difference(kiln::scan(zero_length_body, {init}, {}, {0, false}), init,
                              {{0, 3}}) == "");
  // The single-tensor form returns ys[0] of the vector form: only safe to call when that
  // form returns its ys (else it reads past the end of an empty vector).
  if (r.second.size() == 2) {
    auto [c1, y1] = kiln::scan(
        [](const Tensor& c, const Tensor& x) {
          return std::pair<Tensor, Tensor>{c + x, c * x};
        },
        init, kiln::zeros({0, 3}));
    CHECK_SAME_BITS(c1, init);
    CHECK(y1.shape() == Shape{0, 3});
  }
}

// ------------------------------------------------------------------ scan, traced

TEST_CASE("scan traced is bit-identical to eager, or within tolerance where it stacks products",
          "[control_flow]") {
  for (const ScanCase& c : scan_cases()) {
    INFO("case: " << c.name);
    const ScanResult eager = kiln::scan(c.body, c.init, c.xs, c.options);
    const ScanResult traced = traced_scan(c);
    if (!c.stacks_products) {
      CHECK_SAME_BITS(traced, eager);
      continue;
    }
    const std::string carries = value_difference(traced.first, eager.first);
    const std::string ys = value_difference(traced.second, eager.second);
    INFO("carries: " << carries << "; ys: " << ys);
    CHECK((carries.empty() && ys.empty()));
  }
}

TEST_CASE("an unrolled scan traces one copy of the body per step, with the same values",
          "[control_flow]") {
  for (ScanCase c : scan_cases()) {
    if (c.xs.empty()) continue;
    INFO("case: " << c.name);
    const ScanResult eager = kiln::scan(c.body, c.init, c.xs, c.options);
    c.options.unroll = true;
    auto looped = kiln::function([&c](const Tensors& init, const Tensors& xs) {
      kiln::ScanOptions o = c.options;
      o.unroll = false;
      return kiln::scan(c.body, init, xs, o);
    });
    auto unrolled = kiln::function([&c](const Tensors& init, const Tensors& xs) {
      return kiln::scan(c.body, init, xs, c.options);
    });
    CHECK_SAME_BITS(unrolled(c.init, c.xs), eager);
    const std::string loop_graph = looped.get_concrete_function(c.init, c.xs).graph().to_dot();
    const std::string unrolled_graph =
        unrolled.get_concrete_function(c.init, c.xs).graph().to_dot();
    CHECK(loop_graph.find("scan") != std::string::npos);
    CHECK(unrolled_graph.find("scan") == std::string::npos);
  }
  // A dynamic number of steps cannot be unrolled.
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({2}), kiln::TensorSpec({-1, 2})};
  auto dynamic = kiln::function(
      [](const Tensor& init, const Tensor& xs) {
        return kiln::scan(
            [](const Tensor& c, const Tensor& x) {
              return std::pair{c + x, c};
            },
            init, xs, {.unroll = true});
      },
      o);
  CHECK_THROWS_WITH(dynamic(kiln::zeros({2}), kiln::zeros({3, 2})),
                    Catch::Contains("[scan] options.unroll needs a static number of steps"));
}

TEST_CASE("a zero-length scan returns init and ys with a leading dim of 0, traced",
          "[control_flow]") {
  const Tensor init = t<float>({1, 2, 3}, {3});
  CHECK(zero_steps_difference(traced_scan({"zero steps", zero_body, {init}, {kiln::zeros({0, 3})}}),
                              init, {{0, 3}, {0}}) == "");
  CHECK(zero_steps_difference(traced_scan({"length 0", zero_length_body, {init}, {}, {0, false}}),
                              init, {{0, 3}}) == "");
}

TEST_CASE("one trace serves every trip count: a dynamic time dim, and a dynamic batch dim",
          "[control_flow][dynamic]") {
  const auto body = [](const Tensor& c, const Tensor& x) {
    Tensor n = kiln::tanh(c * 0.5f + x);
    return std::pair<Tensor, Tensor>{n, n * 2.f - c};
  };
  kiln::FunctionOptions o;
  o.name = "scan_over_time";
  o.input_signature = {kiln::TensorSpec({4}), kiln::TensorSpec({-1, 4})};
  auto f = kiln::function(
      [&](const Tensor& init, const Tensor& xs) { return kiln::scan(body, init, xs); }, o);
  const Tensor init = kiln::random::normal({4}, 0, 1, 20);
  std::vector<std::size_t> nodes;
  for (std::int64_t steps : {1, 5, 50, 200}) {
    INFO("T = " << steps);
    const Tensor xs =
        kiln::random::normal({steps, 4}, 0, 1, 21 + static_cast<std::uint64_t>(steps));
    const auto [carry, ys] = f(init, xs);
    const auto [ecarry, eys] = kiln::scan(body, init, xs);
    CHECK(ys.shape() == Shape{steps, 4});
    CHECK_SAME_BITS(carry, ecarry);
    CHECK_SAME_BITS(ys, eys);
    nodes.push_back(f.get_concrete_function(init, xs).graph().num_nodes());
  }
  // No steps at all: the carry is init, ys stack nothing (the same trace).
  const auto [carry0, ys0] = f(init, kiln::zeros({0, 4}));
  CHECK_SAME_BITS(carry0, init);
  CHECK(ys0.shape() == Shape{0, 4});
  CHECK(f.tracing_count() == 1);
  CHECK(f.cache_size() == 1);
  INFO(f.get_concrete_function(init, kiln::zeros({3, 4})).graph().to_string());
  for (std::size_t n : nodes) CHECK(n == nodes[0]);
  CHECK(nodes[0] <= 8);  // parameters, the scan node, its outputs: not one node per step

  // Time and batch dynamic together: h [B,6], xs [T,B,3]; T and B never equal (an equal pair
  // would share a symbol, a new pattern).
  const Tensor w = kiln::random::normal({3, 6}, 0, 0.5, 22),
               u = kiln::random::normal({6, 6}, 0, 0.3, 23);
  const auto rnn = [&](const Tensor& h0, const Tensor& xs) {
    return kiln::scan(
        [&](const Tensor& h, const Tensor& x) {
          Tensor next = kiln::tanh(kiln::matmul(x, w) + kiln::matmul(h, u));
          return std::pair<Tensor, Tensor>{next, kiln::sum(next, {1})};
        },
        h0, xs);
  };
  kiln::FunctionOptions ob;
  ob.name = "scan_time_batch";
  ob.input_signature = {kiln::TensorSpec({-1, 6}), kiln::TensorSpec({-1, -1, 3})};
  auto g = kiln::function(rnn, ob);
  nodes.clear();
  for (auto [steps, batch] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 3}, {5, 2}, {50, 7}, {200, 4}}) {
    INFO("T = " << steps << ", B = " << batch);
    const Tensor h0 = kiln::random::normal({batch, 6}, 0, 1, 24);
    const Tensor xs = kiln::random::normal({steps, batch, 3}, 0, 1, 25);
    const auto [h, ys] = g(h0, xs);
    const auto [eh, eys] = rnn(h0, xs);
    CHECK(h.shape() == Shape{batch, 6});
    CHECK(ys.shape() == Shape{steps, batch});
    // x @ w runs as one product over all steps (loop hoisting), whose kernel may round
    // differently from T products of B rows: equal to rounding, not bit for bit.
    CHECK(kiln::max(kiln::abs(h - eh)).item<float>() <= 1e-5f);
    CHECK(kiln::max(kiln::abs(ys - eys)).item<float>() <= 1e-5f);
    nodes.push_back(g.get_concrete_function(h0, xs).graph().num_nodes());
  }
  CHECK(g.tracing_count() == 1);
  for (std::size_t n : nodes) CHECK(n == nodes[0]);
  CHECK(nodes[0] <= 10);
}

TEST_CASE("an RNN written with scan reads its variables by reference", "[control_flow]") {
  const std::int64_t batch = 4, in = 3, hidden = 5, steps = 6;
  kiln::Variable w(kiln::random::normal({in, hidden}, 0, 0.5, 30), "rnn/W");
  kiln::Variable u(kiln::random::normal({hidden, hidden}, 0, 0.4, 31), "rnn/U");
  kiln::Variable b(kiln::random::normal({hidden}, 0, 0.1, 32), "rnn/b");
  const auto rnn = [&](const Tensor& h0, const Tensor& xs) {
    return kiln::scan(
        [&](const Tensor& h, const Tensor& x) {
          Tensor next =
              kiln::tanh(kiln::matmul(x, w.value()) + kiln::matmul(h, u.value()) + b.value());
          return std::pair<Tensor, Tensor>{next, next};
        },
        h0, xs);
  };
  auto f = kiln::function(rnn);
  const Tensor h0 = kiln::zeros({batch, hidden});
  const Tensor xs = kiln::random::normal({steps, batch, in}, 0, 1, 33);
  const auto [h, ys] = f(h0, xs);
  const auto [eh, eys] = rnn(h0, xs);
  CHECK_SAME_BITS(h, eh);
  CHECK_SAME_BITS(ys, eys);
  const std::string listing = f.get_concrete_function(h0, xs).graph().to_string();
  INFO(listing);
  CHECK(listing.find("read_variable 'rnn/W'") != std::string::npos);
  CHECK(listing.find("scan") != std::string::npos);
  // New values: the traced function sees them without retracing.
  w.assign(kiln::random::normal({in, hidden}, 0, 0.5, 34));
  u.assign(kiln::random::normal({hidden, hidden}, 0, 0.4, 35));
  b.assign(kiln::ones({hidden}));
  const auto [h2, ys2] = f(h0, xs);
  const auto [eh2, eys2] = rnn(h0, xs);
  CHECK_FALSE(bit_difference(h2, h).empty());
  CHECK_SAME_BITS(h2, eh2);
  CHECK_SAME_BITS(ys2, eys2);
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("scan bodies capture symbolic tensors of the function and eager constants",
          "[control_flow]") {
  const Tensor k = t<float>({2, -1, 0.5f}, {3});  // eager: a constant of the graph
  const auto model = [&](const Tensor& x, const Tensor& xs) {
    const Tensor bias = kiln::sum(x) * 0.5f + x;  // symbolic while tracing, computed outside
    return kiln::scan(
        [&](const Tensor& c, const Tensor& s) {
          Tensor next = c * k + s + bias;
          return std::pair<Tensor, Tensor>{next, next * bias - x};
        },
        kiln::zeros({3}), xs);
  };
  auto f = kiln::function(model);
  const Tensor xs = kiln::random::uniform({5, 3}, -1, 1, 40);
  for (const Tensor& x : {t<float>({1, 2, 3}, {3}), t<float>({-4, 0.25f, 8}, {3})}) {
    const auto [c, ys] = f(x, xs);
    const auto [ec, eys] = model(x, xs);
    CHECK_SAME_BITS(c, ec);
    CHECK_SAME_BITS(ys, eys);
  }
  CHECK(f.tracing_count() == 1);
  const std::string listing = f.get_concrete_function(k, xs).graph().to_string();
  INFO(listing);
  CHECK(listing.find("constant") != std::string::npos);
}

// ------------------------------------------------------------------ nesting

TEST_CASE("a while_loop inside a cond branch", "[control_flow]") {
  const auto fn = [](const Tensor& x) {
    return kiln::cond(
        kiln::sum(x) > 0.f,
        [](const Tensors& v) {
          return kiln::while_loop([](const Tensors& w) { return kiln::max(w[0]) < 100.f; },
                                  [](const Tensors& w) { return Tensors{w[0] * 2.f}; }, v);
        },
        [](const Tensors& v) { return Tensors{v[0] - 1.f}; }, {x});
  };
  auto f = kiln::function(fn);
  for (const Tensor& x : {t<float>({1, 3}, {2}), t<float>({-1, -3}, {2}), t<float>({0.5f, 7}, {2})})
    CHECK_SAME_BITS(f(x), fn(x));
  CHECK(f(t<float>({1, 3}, {2}))[0].to_vector<float>() == std::vector<float>{64, 192});
  CHECK(f(t<float>({-1, -3}, {2}))[0].to_vector<float>() == std::vector<float>{-2, -4});
  CHECK(f.tracing_count() == 1);
}

// ------------------------------------------------------------------ while_loop

TEST_CASE("while_loop eager and traced: a trip count that depends on the argument",
          "[control_flow]") {
  // Doubling until above 100, counting the steps.
  const auto fn = [](const Tensor& x) {
    return kiln::while_loop([](const Tensors& v) { return v[0] <= 100.f; },
                            [](const Tensors& v) {
                              return Tensors{v[0] * 2.f, v[1] + 1};
                            },
                            {x, kiln::scalar<std::int32_t>(0)});
  };
  auto f = kiln::function(fn);
  for (auto [start, end, steps] : std::vector<std::tuple<float, float, int>>{
           {3, 192, 6}, {50, 200, 2}, {101, 101, 0}, {0.5f, 128, 8}, {100, 200, 1}}) {
    INFO("start " << start);
    const Tensors eager = fn(kiln::scalar(start));
    CHECK(eager[0].item<float>() == end);
    CHECK(eager[1].item<std::int32_t>() == steps);
    CHECK_SAME_BITS(f(kiln::scalar(start)), eager);
  }
  CHECK(f.tracing_count() == 1);
  const std::string listing = f.get_concrete_function(kiln::scalar(1.f)).graph().to_string();
  INFO(listing);
  CHECK(listing.find("while_loop") != std::string::npos);
}

TEST_CASE("while_loop stops after maximum_iterations", "[control_flow]") {
  const auto fn = [](const Tensor& x, std::int64_t maximum) {
    return kiln::while_loop([](const Tensors& v) { return v[0] <= 100.f; },
                            [](const Tensors& v) {
                              return Tensors{v[0] * 2.f, v[1] + 1};
                            },
                            {x, kiln::scalar<std::int32_t>(0)}, {maximum});
  };
  auto f = kiln::function(fn);
  std::vector<std::string> log;  // each maximum is a static value: a new trace, and a warning
  kiln::set_log_sink([&](const std::string& m) { log.push_back(m); });
  for (auto [maximum, end, steps] : std::vector<std::tuple<std::int64_t, float, int>>{
           {3, 24, 3}, {0, 3, 0}, {1, 6, 1}, {6, 192, 6}, {50, 192, 6}}) {
    INFO("maximum_iterations " << maximum);
    const Tensors eager = fn(kiln::scalar(3.f), maximum);
    CHECK(eager[0].item<float>() == end);
    CHECK(eager[1].item<std::int32_t>() == steps);
    CHECK_SAME_BITS(f(kiln::scalar(3.f), maximum), eager);
  }
  kiln::set_log_sink(nullptr);
  // cond always true: maximum_iterations alone ends the loop.
  auto g = kiln::function([](const Tensor& x) {
    return kiln::while_loop([](const Tensors&) { return kiln::scalar(true); },
                            [](const Tensors& v) { return Tensors{v[0] + 1.f}; }, {x}, {4});
  });
  CHECK(g(kiln::scalar(0.5f))[0].item<float>() == 4.5f);
}

TEST_CASE("while_loop carries values of several dtypes", "[control_flow]") {
  const auto fn = [](const Tensor& x, const Tensor& limit) {
    return kiln::while_loop([limit](const Tensors& v) { return v[1] < limit; },
                            [](const Tensors& v) {
                              return Tensors{v[0] * 1.5f - 0.25f, v[1] + 1,
                                             v[2] + kiln::cast(kiln::sum(v[0]), kiln::f64), !v[3],
                                             kiln::cast(v[1], kiln::i64) * 3};
                            },
                            {x, kiln::scalar<std::int32_t>(0), kiln::zeros({}, kiln::f64),
                             kiln::scalar(false), kiln::zeros({}, kiln::i64)});
  };
  auto f = kiln::function(fn);
  const Tensor x = t<float>({0.5f, -1, 2}, {3});
  for (std::int32_t limit : {0, 1, 4, 7}) {
    INFO("limit " << limit);
    const Tensors eager = fn(x, kiln::scalar(limit));
    REQUIRE(eager.size() == 5);
    CHECK(eager[1].item<std::int32_t>() == limit);
    CHECK(eager[3].item<bool>() == (limit % 2 == 1));
    CHECK(eager[4].item<std::int64_t>() == (limit > 0 ? 3 * (limit - 1) : 0));
    CHECK_SAME_BITS(f(x, kiln::scalar(limit)), eager);
  }
  CHECK(f.tracing_count() == 1);
}

// ------------------------------------------------------------------ cond

TEST_CASE("a traced cond picks its branch at run time", "[control_flow]") {
  int true_traces = 0, false_traces = 0;
  const Tensor k = t<float>({10, 20, 30}, {3});
  auto f = kiln::function([&](const Tensor& x) {
    const Tensor doubled = x * 2.f;  // symbolic, used by the true branch only
    const Tensor e = kiln::exp(x);   // symbolic, used by the false branch only
    return kiln::cond(
        kiln::sum(x) > 0.f,
        [&](const Tensors& v) {
          ++true_traces;
          return Tensors{v[0] + doubled, kiln::sum(v[0])};
        },
        [&](const Tensors& v) {
          ++false_traces;
          return Tensors{v[0] * k - e, kiln::max(v[0])};
        },
        {x});
  });
  const Tensor pos = t<float>({1, 2, 3}, {3}), neg = t<float>({-1, 0.5f, -2}, {3});
  const Tensors a = f(pos), b = f(neg);
  CHECK(a[0].to_vector<float>() == std::vector<float>{3, 6, 9});
  CHECK(a[1].item<float>() == 6.f);
  CHECK_SAME_BITS(b[0], neg * k - kiln::exp(neg));
  CHECK(b[1].item<float>() == 0.5f);
  CHECK(f.tracing_count() == 1);
  CHECK(true_traces == 1);
  CHECK(false_traces == 1);
  const std::string listing = f.get_concrete_function(pos).graph().to_string();
  INFO(listing);
  CHECK(listing.find("cond") != std::string::npos);
  // Eagerly only the chosen branch runs.
  kiln::run_functions_eagerly(true);
  const Tensors eager = f(neg);
  kiln::run_functions_eagerly(false);
  CHECK(true_traces == 1);
  CHECK(false_traces == 2);
  CHECK_SAME_BITS(eager, b);
}

TEST_CASE("a concrete pred while tracing traces one branch only", "[control_flow]") {
  int true_calls = 0, false_calls = 0;
  const auto make = [&](bool which) {
    return kiln::function([&, which](const Tensor& x) {
      return kiln::cond(
          kiln::scalar(which),
          [&](const Tensors& v) {
            ++true_calls;
            return Tensors{kiln::tanh(v[0]) * 3.f};
          },
          [&](const Tensors& v) {
            ++false_calls;
            return Tensors{kiln::exp(v[0]) - 1.f};
          },
          {x});
    });
  };
  const Tensor x = t<float>({0.5f, -1}, {2});
  auto ft = make(true);
  CHECK_SAME_BITS(ft(x)[0], kiln::tanh(x) * 3.f);
  CHECK(true_calls == 1);
  CHECK(false_calls == 0);
  const std::string listing = ft.get_concrete_function(x).graph().to_string();
  INFO(listing);
  CHECK(listing.find("cond") == std::string::npos);
  CHECK(listing.find("exp") == std::string::npos);
  auto ff = make(false);
  CHECK_SAME_BITS(ff(x)[0], kiln::exp(x) - 1.f);
  CHECK(true_calls == 1);
  CHECK(false_calls == 1);
}

// ------------------------------------------------------------------ nothing grows

TEST_CASE("a traced scan called with many trip counts grows nothing", "[control_flow]") {
  kiln::Variable w(kiln::random::normal({4, 8}, 0, 0.4, 90), "grow/W");
  kiln::Variable u(kiln::random::normal({8, 8}, 0, 0.3, 91), "grow/U");
  kiln::FunctionOptions o;
  o.name = "growing";
  o.input_signature = {kiln::TensorSpec({2, 8}), kiln::TensorSpec({-1, 2, 4})};
  auto f = kiln::function(
      [&](const Tensor& h0, const Tensor& xs) {
        auto [h, ys] = kiln::scan(
            [&](const Tensor& c, const Tensor& x) {
              Tensor n = kiln::tanh(kiln::matmul(x, w.value()) + kiln::matmul(c, u.value()));
              return std::pair<Tensor, Tensor>{n, n * 2.f};
            },
            h0, xs);
        return std::make_pair(h, kiln::mean(ys, {0}));
      },
      o);
  const Tensor h0 = kiln::zeros({2, 8});
  const std::vector<std::int64_t> lengths{1, 5, 50, 200, 17, 3};
  std::vector<Tensor> inputs;
  for (std::int64_t steps : lengths)
    inputs.push_back(kiln::random::normal({steps, 2, 4}, 0, 1, static_cast<std::uint64_t>(steps)));
  for (const Tensor& xs : inputs) f(h0, xs);  // warm-up: one plan per set of sizes
  const auto nodes = f.get_concrete_function(h0, inputs[0]).graph().num_nodes();
  const auto before = kiln::memory_stats();
  for (int round = 0; round < 20; ++round)
    for (const Tensor& xs : inputs) {
      const auto [h, m] = f(h0, xs);
      CHECK(h.shape() == Shape{2, 8});
    }
  const auto after = kiln::memory_stats();
  CHECK(f.tracing_count() == 1);
  CHECK(f.cache_size() == 1);
  CHECK(f.get_concrete_function(h0, inputs[3]).graph().num_nodes() == nodes);
  CHECK(after.live_tensors == before.live_tensors);
  CHECK(after.live_buffers == before.live_buffers);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.cached_functions == before.cached_functions);
  CHECK(after.live_graph_nodes == before.live_graph_nodes);
  CHECK(after.graph_bytes == before.graph_bytes);
}

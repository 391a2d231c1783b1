// Gradients through scan, while_loop and cond: against central finite differences (f64,
// eager), and traced (GradientTape inside kiln::function, where each is one region node with
// its own gradient rule) against eager, for every row of one table.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include <kiln/kiln.hpp>

#include "finite_difference.hpp"

using kiln::Tensor;

namespace {

using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

Tensor input(const kiln::Shape& shape, double lo, double hi, std::uint64_t seed) {
  return kiln::random::uniform(shape, lo, hi, seed, kiln::f64);
}

/// The rows: f(args) -> tensor, built from control flow; a weighted sum of it is the loss.
struct Row {
  std::string name;
  Fn f;
  V args;
};

std::vector<Row> rows() {
  static const Tensor w = input({3, 3}, -0.6, 0.6, 11);  // captured by value
  std::vector<Row> r;
  r.push_back({"scan: rnn over time, carry and ys",
               [](const V& a) {
                 auto [h, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       Tensor n = kiln::tanh(kiln::matmul(c, w) + x * a[2]);
                       return std::pair{n, kiln::sigmoid(n)};
                     },
                     a[0], a[1]);
                 return kiln::concat({kiln::reshape(h, {-1}), kiln::reshape(ys, {-1})}, 0);
               },
               {input({2, 3}, -1, 1, 1), input({5, 2, 3}, -1, 1, 2), input({3}, 0.5, 1.5, 3)}});
  r.push_back({"scan: reverse, two carries, capture of a computed tensor",
               [](const V& a) {
                 const Tensor bias = kiln::sum(a[0], {0}) * 0.3;
                 auto [c, ys] = kiln::scan(
                     [&](const V& carry, const V& x) {
                       Tensor s = carry[0] * 0.5 + kiln::sin(x[0]) + bias;
                       Tensor p = carry[1] * kiln::cos(x[0]);
                       return std::pair<V, V>{{s, p}, {s * p}};
                     },
                     {a[0], a[0] * 2.0}, {a[1]}, {.reverse = true});
                 return kiln::concat({c[0], c[1], kiln::reshape(ys[0], {-1, 3})}, 0);
               },
               {input({2, 3}, -1, 1, 4), input({4, 2, 3}, -1, 1, 5)}});
  r.push_back({"scan: nested scan in the body",
               [](const V& a) {
                 auto [h, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       auto [inner, unused] = kiln::scan(
                           [&](const Tensor& ci, const Tensor& xi) {
                             return std::pair{kiln::tanh(ci + xi * c), xi};
                           },
                           c, x);
                       return std::pair{inner * 0.9, inner};
                     },
                     a[0], a[1]);
                 return kiln::concat({kiln::reshape(h, {-1}), kiln::reshape(ys, {-1})}, 0);
               },
               {input({3}, -1, 1, 6), input({3, 2, 3}, -1, 1, 7)}});
  r.push_back({"cond: both branches use the operand and a capture",
               [](const V& a) {
                 const Tensor scale = kiln::exp(a[1]);
                 const V out = kiln::cond(
                     kiln::sum(a[1]) > 0.0,
                     [&](const V& v) { return V{kiln::tanh(kiln::matmul(v[0], w)) * scale}; },
                     [&](const V& v) { return V{kiln::sigmoid(v[0]) * 2.0 + scale}; }, {a[0]});
                 return out[0];
               },
               {input({2, 3}, -1, 1, 8), input({}, 0.2, 0.8, 9)}});
  r.push_back({"cond: the false branch",
               [](const V& a) {
                 const V out = kiln::cond(
                     kiln::sum(a[1]) > 0.0, [&](const V& v) { return V{v[0] * a[1]}; },
                     [&](const V& v) { return V{kiln::square(v[0]) * a[1]}; }, {a[0]});
                 return out[0];
               },
               {input({4}, -1, 1, 10), input({}, -0.8, -0.2, 12)}});
  r.push_back({"while_loop with maximum_iterations",
               [](const V& a) {
                 const V out = kiln::while_loop(
                     [](const V& v) { return kiln::sum(v[0]) < 8.0; },
                     [&](const V& v) { return V{v[0] * 1.3 + kiln::sin(v[0]) * a[1]}; }, {a[0]},
                     {.maximum_iterations = 12});
                 return out[0];
               },
               {input({3}, 0.2, 0.6, 13), input({3}, 0.1, 0.5, 14)}});
  return r;
}

/// The tape gradient of sum(f(args) * weights), eager or inside a kiln::function.
V gradient(const Row& row, const Tensor& weights, bool traced) {
  const auto grads = [&](const V& args) {
    kiln::GradientTape tape;
    for (const Tensor& a : args) tape.watch(a);
    const Tensor loss = kiln::sum(row.f(args) * weights);
    return tape.gradient(loss, args);
  };
  if (!traced) return grads(row.args);
  auto f = kiln::function([&](const V& args) { return grads(args); });
  return f(row.args);
}

}  // namespace

TEST_CASE("control flow gradients match finite differences", "[control_flow][autodiff]") {
  for (const Row& row : rows()) {
    INFO("row: " << row.name);
    const Tensor probe = row.f(row.args);
    const Tensor weights = input(probe.shape(), 0.5, 1.5, 99);
    const V analytic = gradient(row, weights, /*traced=*/false);
    REQUIRE(analytic.size() == row.args.size());
    for (std::size_t i = 0; i < row.args.size(); ++i) {
      INFO("input " << i);
      const std::vector<double> g = analytic[i].to_vector<double>();
      const std::vector<double> numeric = kiln::test::numeric_gradient(
          [&](const V& a) { return kiln::sum(row.f(a) * weights).item<double>(); }, row.args, i);
      for (std::size_t j = 0; j < g.size(); ++j)
        CHECK(g[j] == Approx(numeric[j]).margin(1e-6).epsilon(1e-5));
    }
  }
}

TEST_CASE("traced control flow gradients equal the eager ones", "[control_flow][autodiff]") {
  for (const Row& row : rows()) {
    INFO("row: " << row.name);
    const Tensor probe = row.f(row.args);
    const Tensor weights = input(probe.shape(), 0.5, 1.5, 99);
    const V eager = gradient(row, weights, /*traced=*/false);
    const V traced = gradient(row, weights, /*traced=*/true);
    REQUIRE(traced.size() == eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) {
      INFO("input " << i);
      const std::vector<double> e = eager[i].to_vector<double>();
      const std::vector<double> t = traced[i].to_vector<double>();
      REQUIRE(e.size() == t.size());
      for (std::size_t j = 0; j < e.size(); ++j) CHECK(t[j] == Approx(e[j]).margin(1e-12));
    }
  }
}

TEST_CASE("a traced scan's gradient keeps one trace and one graph for every length",
          "[control_flow][autodiff]") {
  kiln::Variable u(input({3, 3}, -0.5, 0.5, 21), "u");
  const auto gradient_of_u = [&](const Tensor& xs, const Tensor& h0) {
    kiln::GradientTape tape;
    auto [h, ys] = kiln::scan(
        [&](const Tensor& c, const Tensor& x) {
          Tensor n = kiln::tanh(kiln::matmul(c, u.value()) + x);
          return std::pair{n, n};
        },
        h0, xs);
    return tape.gradient(kiln::sum(ys * ys), std::vector<kiln::Variable>{u})[0];
  };
  auto step =
      kiln::function(gradient_of_u, {.input_signature = {kiln::TensorSpec({-1, 2, 3}, kiln::f64),
                                                         kiln::TensorSpec({2, 3}, kiln::f64)}});
  const Tensor h0 = input({2, 3}, -1, 1, 22);
  std::size_t nodes = 0;
  for (std::int64_t t : {1, 7, 60}) {
    const Tensor xs = input({t, 2, 3}, -1, 1, 23 + static_cast<std::uint64_t>(t));
    const Tensor g = step(xs, h0);
    const Tensor eager = gradient_of_u(xs, h0);
    CHECK(kiln::max(kiln::abs(g - eager)).item<double>() < 1e-12);
    const std::size_t n = step.get_concrete_function(xs, h0).graph().num_nodes();
    if (nodes == 0) nodes = n;
    CHECK(n == nodes);
  }
  CHECK(step.tracing_count() == 1);
}

TEST_CASE("a while_loop gradient inside kiln::function needs maximum_iterations",
          "[control_flow][autodiff]") {
  auto f = kiln::function([](const Tensor& x) {
    kiln::GradientTape tape;
    tape.watch(x);
    const V out = kiln::while_loop([](const V& v) { return kiln::sum(v[0]) < 8.0f; },
                                   [](const V& v) { return V{v[0] * 2.0f}; }, {x});
    return tape.gradient(kiln::sum(out[0]), x);
  });
  CHECK_THROWS_WITH(f(kiln::ones({2})),
                    Catch::Contains("[while_loop] a gradient through a while_loop inside "
                                    "kiln::function needs options.maximum_iterations"));
}

TEST_CASE("a weight used inside a scan and outside it gets both gradients, traced",
          "[control_flow][autodiff]") {
  // The weight's gradient is the scan's capture gradient (a result of the backward scan) plus a
  // matmul product taken before that scan runs; a plan must not start the sum before the scan
  // has written its part. Several variables and optimize on and off, as the plans differ.
  kiln::Variable w(kiln::random::uniform({3, 4}, -0.5, 0.5, 1), "w");
  kiln::Variable r(kiln::random::uniform({4, 4}, -0.5, 0.5, 3), "r");
  const Tensor x = kiln::random::uniform({7, 2, 3}, -1, 1, 2);
  for (int mode = 0; mode < 2; ++mode) {
    const auto step = [&](const Tensor& in) {
      kiln::GradientTape tape;
      const Tensor k = w.value(), rk = r.value();
      const auto rnn = [&](const V& c, const V& xt) {
        return std::pair<V, V>{{kiln::tanh(xt[0] + kiln::matmul(c[0], rk))}, {}};
      };
      const auto projected = [&](const V& c, const V& xt) {
        return rnn(c, {kiln::matmul(xt[0], k)});
      };
      V c = kiln::scan(projected, {kiln::zeros({2, 4})}, {kiln::slice(in, 0, 0, 6)}).first;
      const Tensor tail = kiln::matmul(kiln::slice(in, 0, 6, 7), k);
      Tensor loss;
      if (mode == 0) {
        loss = kiln::sum(kiln::square(c[0])) + kiln::sum(tail);
      } else {
        c = kiln::scan(rnn, c, {tail}).first;
        loss = kiln::sum(kiln::square(c[0]));
      }
      return tape.gradient(loss, std::vector<kiln::Variable>{r, w});
    };
    const V eager = step(x);
    for (bool optimize : {true, false}) {
      INFO("mode " << mode << ", optimize " << optimize);
      kiln::FunctionOptions o;
      o.optimize = optimize;
      auto f = kiln::function(step, o);
      for (int call = 0; call < 2; ++call) {
        const V traced = f(x);
        for (std::size_t i = 0; i < eager.size(); ++i)
          CHECK(kiln::max(kiln::abs(traced[i] - eager[i])).item<float>() < 1e-5f);
      }
    }
  }
}

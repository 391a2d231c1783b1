// Autodiff: every differentiable op's gradient against central finite differences (f64), second
// derivatives, a small MLP and an LSTM cell end to end, tape lifetime rules and memory. The
// elementwise ops come from the shared table (elementwise_op_table.hpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include <kiln/autodiff.hpp>
#include <kiln/kiln.hpp>

#include "elementwise_op_table.hpp"
#include "finite_difference.hpp"

using kiln::Shape;
using kiln::Tensor;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Random f64 values in [lo, hi), reproducible per (shape, seed).
Tensor input(const Shape& shape, double lo, double hi, std::uint64_t seed) {
  return kiln::random::uniform(shape, lo, hi, seed, kiln::f64);
}

/// sum(f(args) * w) for a fixed random weight w: a scalar whose gradient checks the full VJP.
double weighted(const Fn& f, const std::vector<Tensor>& args, const Tensor& w) {
  return kiln::sum(f(args) * w).item<double>();
}

/// Checks the tape gradient of sum(f(args) * w) against central differences for every input;
/// returns the tape gradient's values, input by input.
std::vector<std::vector<double>> check_gradient(const std::string& name, const Fn& f,
                                                const std::vector<Tensor>& args,
                                                double tolerance = 1e-6) {
  INFO("op: " << name);
  const Tensor probe = f(args);
  const Tensor w = input(probe.shape(), 0.5, 1.5, 99);
  kiln::GradientTape tape;
  for (const Tensor& a : args) tape.watch(a);
  const Tensor loss = kiln::sum(f(args) * w);
  const std::vector<Tensor> grads = tape.gradient(loss, args);
  REQUIRE(grads.size() == args.size());
  std::vector<std::vector<double>> all_analytic;
  for (std::size_t i = 0; i < args.size(); ++i) {
    INFO("input " << i << " of shape " << args[i].shape().to_string());
    REQUIRE(grads[i].shape() == args[i].shape());
    const std::vector<double> analytic = grads[i].to_vector<double>();
    all_analytic.push_back(analytic);
    const std::vector<double> numeric = kiln::test::numeric_gradient(
        [&](const std::vector<Tensor>& a) { return weighted(f, a, w); }, args, i);
    for (std::size_t j = 0; j < analytic.size(); ++j) {
      INFO("element " << j);
      CHECK(analytic[j] == Approx(numeric[j]).margin(tolerance).epsilon(1e-5));
    }
  }
  return all_analytic;
}

struct GradCase {
  std::string name;
  Fn f;
  std::vector<Tensor> args;
};

using kiln::test::Domain;
using kiln::test::ElementwiseOp;

/// The fixed condition of a ternary op (where) in its gradient checks.
Tensor where_condition() {
  return kiln::tensor(std::vector<bool>{true, false, true, true, false, false, true, false, false,
                                        true, true, false},
                      Shape{3, 4});
}

/// The f64 argument sets a table row's gradient checks use on its domain (a ternary op's
/// condition is where_condition(), held fixed). `seed` varies a unary row's draws; binary rows
/// share their tensors.
std::vector<std::vector<Tensor>> domain_args(const ElementwiseOp& op, std::uint64_t seed) {
  const int arity = op.op.arity();
  if (arity == 1) {
    auto shifted = [seed](std::vector<double> points) {  // points + [0, 0.05)
      return kiln::tensor(points, Shape{2, 3}) + input({2, 3}, 0.0, 0.05, seed);
    };
    switch (op.domain) {
      case Domain::real:
        return {{input({2, 3}, -2.0, 2.0, seed)}};
      case Domain::positive:
        return {{input({2, 3}, 0.5, 2.0, seed)}};
      case Domain::off_zero:
        return {{shifted({-1.5, -0.7, 0.3, 0.9, 1.2, -0.2})}};
      case Domain::off_steps:
        return {{shifted({-1.75, -0.75, 0.25, 1.25, -1.25, 0.75})}};
      case Domain::unit:
        return {{input({2, 3}, -0.9, 0.9, seed)}};
      case Domain::above_one:
        return {{input({2, 3}, 1.1, 3.0, seed)}};
      default:
        break;
    }
  } else {
    Tensor col = input({3, 1}, -1.0, 1.0, 21), row = input({1, 4}, -1.0, 1.0, 22);
    Tensor pos_col = input({3, 1}, 0.5, 2.0, 23), pos_row = input({1, 4}, 0.5, 2.0, 24);
    Tensor a = input({3, 4}, -1.0, 1.0, 25), b = a + 0.5;
    if (arity == 3 && op.domain == Domain::real) return {{col, row}};
    if (arity == 2) {
      switch (op.domain) {
        case Domain::real:
          return {{col, row}};
        case Domain::off_zero:
          return {{kiln::tensor(std::vector<double>{-0.7, 0.3, 0.9}, Shape{3, 1}) +
                       input({3, 1}, 0.0, 0.05, 28),
                   kiln::tensor(std::vector<double>{-1.5, 1.2, -0.2, 0.5}, Shape{1, 4}) +
                       input({1, 4}, 0.0, 0.05, 29)}};
        case Domain::positive_divisor:
          return {{col, pos_row}};
        case Domain::positive_base:
          return {{pos_col, row}};
        case Domain::apart:
          return {{a, kiln::transpose(kiln::transpose(b))}, {b, a}};
        case Domain::within_period:
          return {{input({3, 4}, 0.1, 0.9, 26), kiln::full({1}, 1.3, kiln::f64)}};
        default:
          break;
      }
    }
  }
  FAIL("no gradient-check inputs for domain " << static_cast<int>(op.domain) << " of the " << arity
                                              << "-argument op " << op.name);
  return {};
}

/// Every table row of `arity` that takes f64: its gradient against finite differences on its
/// domain (for a row that is not differentiable the differences are zero there too), and not
/// all zero when the row is differentiable, exactly zero when it is not.
void check_table_gradients(int arity) {
  using V = const std::vector<Tensor>&;
  // Differentiable unary rows draw with seeds 1, 2, ... in table order (as these checks always
  // have); the others from 101.
  std::uint64_t differentiable_seed = 1, other_seed = 101;
  int rows = 0;
  for (const ElementwiseOp& op : kiln::test::elementwise_ops()) {
    if (op.op.arity() != arity) continue;
    ++rows;
    INFO("table row " << op.name);
    if (!kiln::test::accepts(op.accepts, kiln::f64)) {
      CHECK_FALSE(op.differentiable);  // nothing to differentiate in
      continue;
    }
    const std::uint64_t seed = op.differentiable ? differentiable_seed++ : other_seed++;
    const Fn f = [&op](V x) {
      const Tensor y = op.op.arity() == 3 ? op.op({where_condition(), x[0], x[1]}) : op.op(x);
      return op.bool_out ? kiln::cast(y, kiln::f64) : y;
    };
    for (const auto& args : domain_args(op, seed)) {
      bool all_zero = true;
      for (const auto& g : check_gradient(op.name, f, args))
        for (double v : g) all_zero = all_zero && v == 0;
      if (op.differentiable)
        CHECK_FALSE(all_zero);
      else
        CHECK(all_zero);
    }
  }
  CHECK(rows > 0);
}

/// Unary ops beyond the table (elementwise_op_table.hpp).
std::vector<GradCase> unary_cases() {
  auto any = [](std::uint64_t s) { return input({2, 3}, -2.0, 2.0, s); };
  auto away_from_zero = [](std::uint64_t s) {
    return kiln::tensor(std::vector<double>{-1.5, -0.7, 0.3, 0.9, 1.2, -0.2}, Shape{2, 3}) +
           input({2, 3}, 0.0, 0.05, s);
  };
  using V = const std::vector<Tensor>&;
  return {
      {"cast f64", [](V a) { return kiln::cast(a[0], kiln::f64); }, {any(15)}},
      {"clip", [](V a) { return kiln::clip(a[0], -1.0, 1.0); }, {away_from_zero(16)}},
  };
}

/// Binary ops beyond the table.
std::vector<GradCase> binary_cases() {
  using V = const std::vector<Tensor>&;
  Tensor a = input({3, 4}, -1.0, 1.0, 25);
  return {
      {"scalar ops", [](V x) { return 2.0 * x[0] - x[0] / 3.0 + 1.0; }, {a}},
      {"sigmoid_cross_entropy",
       [](V x) { return kiln::sigmoid_cross_entropy(x[0] * 4.0, x[1]); },
       {a, input({3, 4}, 0.0, 1.0, 27)}},
  };
}

std::vector<GradCase> reduction_cases() {
  using V = const std::vector<Tensor>&;
  Tensor x = input({2, 3, 4}, -1.0, 1.0, 31);
  Tensor p = input({2, 3, 4}, 0.5, 1.5, 32);
  Tensor with_zero = kiln::tensor(std::vector<double>{1.5, 0.0, 2.0, 0.7, 1.1, -0.4}, Shape{2, 3});
  return {
      {"sum all", [](V a) { return kiln::sum(a[0]); }, {x}},
      {"sum {0,2}",
       [](V a) {
         return kiln::sum(a[0], {0, 2});
       },
       {x}},
      {"sum keepdims", [](V a) { return kiln::sum(a[0], {1}, true); }, {x}},
      {"mean {-1}", [](V a) { return kiln::mean(a[0], {-1}); }, {x}},
      {"prod {1}", [](V a) { return kiln::prod(a[0], {1}); }, {p}},
      {"prod with a zero", [](V a) { return kiln::prod(a[0], {1}); }, {with_zero}},
      {"max {2}", [](V a) { return kiln::max(a[0], {2}); }, {x}},
      {"min {0,1}",
       [](V a) {
         return kiln::min(a[0], {0, 1});
       },
       {x}},
      {"logsumexp {2}", [](V a) { return kiln::logsumexp(a[0], {2}); }, {x}},
      {"softmax", [](V a) { return kiln::softmax(a[0], 1); }, {x}},
      {"log_softmax", [](V a) { return kiln::log_softmax(a[0]); }, {x}},
  };
}

std::vector<GradCase> movement_cases() {
  using V = const std::vector<Tensor>&;
  Tensor x = input({2, 3, 4}, -1.0, 1.0, 41);
  Tensor y = input({2, 2, 4}, -1.0, 1.0, 42);
  Tensor idx = kiln::tensor({2, 0, 2, -1}, {2, 2});
  return {
      {"reshape",
       [](V a) {
         return kiln::reshape(a[0], {4, -1});
       },
       {x}},
      {"transpose",
       [](V a) {
         return kiln::transpose(a[0], {2, 0, 1});
       },
       {x}},
      {"expand_dims+squeeze",
       [](V a) { return kiln::squeeze(kiln::expand_dims(a[0], 1)) * 2.0; },
       {x}},
      {"broadcast_to",
       [](V a) {
         return kiln::broadcast_to(a[0], {5, 2, 3, 4});
       },
       {x}},
      {"concat",
       [](V a) {
         return kiln::concat({a[0], a[1]}, 1);
       },
       {x, y}},
      {"stack",
       [](V a) {
         return kiln::stack({a[0], a[0] * 2.0}, 2);
       },
       {x}},
      {"unstack",
       [](V a) {
         auto p = kiln::unstack(a[0], 1);
         return p[0] * p[2] + p[1];
       },
       {x}},
      {"split",
       [](V a) {
         auto p = kiln::split(a[0], {1, 3}, 2);
         return kiln::sum(p[1], {2}) * kiln::squeeze(p[0], {2});
       },
       {x}},
      {"slice steps",
       [](V a) {
         return kiln::slice(a[0], {{0, 2, 1}, {2, kiln::Slice::none, -2}, {1, 4, 2}});
       },
       {x}},
      {"slice one axis", [](V a) { return kiln::slice(a[0], 2, 1, 3); }, {x}},
      {"gather", [idx](V a) { return kiln::gather(a[0], idx, 1); }, {x}},
      {"pad",
       [](V a) {
         return kiln::pad(a[0], {{1, 0}, {0, 2}, {1, 1}}, 3.0);
       },
       {x}},
      {"tile",
       [](V a) {
         return kiln::tile(a[0], {1, 2, 3});
       },
       {x}},
  };
}

std::vector<GradCase> indexing_cases() {
  using V = const std::vector<Tensor>&;
  const Tensor x = input({3, 4}, -1, 1, 61);
  // Zeros where cumprod's gradient needs care: one zero, two zeros, and none in a row.
  const Tensor zeros = kiln::tensor(
      std::vector<double>{0.5, 0.0, 1.5, -2.0, 0.0, 1.2, 0.0, 0.8, 1.1, -0.7, 0.9, 1.3}, {3, 4});
  const Tensor at = kiln::tensor({2, 0, 2, 1, 1, -4, 3, 3, 0, 1, 2, 3}, {3, 4});
  const Tensor tuples = kiln::tensor({2, 1, 0, 3, 2, 1}, {3, 2});
  std::vector<GradCase> cases;
  for (bool exclusive : {false, true})
    for (bool reverse : {false, true}) {
      const std::string flags =
          std::string(exclusive ? " exclusive" : "") + (reverse ? " reverse" : "");
      cases.push_back(
          {"cumsum" + flags, [=](V a) { return kiln::cumsum(a[0], 1, exclusive, reverse); }, {x}});
      cases.push_back({"cumprod" + flags,
                       [=](V a) { return kiln::cumprod(a[0], 1, exclusive, reverse); },
                       {x}});
      cases.push_back({"cumprod with zeros" + flags,
                       [=](V a) { return kiln::cumprod(a[0], 1, exclusive, reverse); },
                       {zeros}});
    }
  cases.push_back({"cumprod with zeros along axis 0",
                   [](V a) { return kiln::cumprod(a[0], 0); },
                   {kiln::transpose(zeros)}});
  cases.push_back({"sort", [](V a) { return kiln::sort(a[0], 0, true); }, {x}});
  cases.push_back({"top_k", [](V a) { return kiln::top_k(a[0], 2).values; }, {x}});
  cases.push_back({"take_along_axis (repeated indices)",
                   [at](V a) { return kiln::take_along_axis(a[0], at, 1); },
                   {x}});
  cases.push_back({"take_along_axis broadcast",
                   [](V a) {
                     return kiln::take_along_axis(a[0], kiln::tensor({1, 0, 3}, {3, 1}), 1);
                   },
                   {x}});
  for (kiln::ScatterMode mode : {kiln::ScatterMode::assign, kiln::ScatterMode::add})
    cases.push_back({mode == kiln::ScatterMode::add ? "scatter add" : "scatter assign",
                     [at, mode](V a) { return kiln::scatter(a[0], at, a[1], 1, mode); },
                     {x, input({3, 4}, -1, 1, 62)}});
  cases.push_back({"gather_nd", [tuples](V a) { return kiln::gather_nd(a[0], tuples); }, {x}});
  cases.push_back({"gather_nd rows (repeated)",
                   [](V a) {
                     return kiln::gather_nd(a[0], kiln::tensor({2, 0, 2}, {3, 1}));
                   },
                   {x}});
  cases.push_back({"gather_nd batch dims",
                   [](V a) {
                     return kiln::gather_nd(a[0], kiln::tensor({1, 1, 0, 2}, {2, 2, 1}), 1);
                   },
                   {input({2, 3, 2}, -1, 1, 63)}});
  for (kiln::ScatterMode mode : {kiln::ScatterMode::assign, kiln::ScatterMode::add})
    cases.push_back({mode == kiln::ScatterMode::add ? "scatter_nd add" : "scatter_nd assign",
                     [mode](V a) {
                       return kiln::scatter_nd(a[0], kiln::tensor({1, 0, 1}, {3, 1}), a[1], mode);
                     },
                     {x, input({3, 4}, -1, 1, 64)}});
  return cases;
}

std::vector<GradCase> matmul_cases() {
  using V = const std::vector<Tensor>&;
  auto mm = [](V a) { return kiln::matmul(a[0], a[1]); };
  return {
      {"matmul 2-D", mm, {input({3, 4}, -1, 1, 51), input({4, 2}, -1, 1, 52)}},
      {"matmul batched broadcast",
       mm,
       {input({2, 1, 3, 4}, -1, 1, 53), input({3, 4, 2}, -1, 1, 54)}},
      {"matmul vector", mm, {input({4}, -1, 1, 55), input({2, 4, 3}, -1, 1, 56)}},
      {"matmul matrix-vector", mm, {input({3, 4}, -1, 1, 57), input({4}, -1, 1, 58)}},
  };
}

}  // namespace

TEST_CASE("gradients match finite differences: unary ops", "[autodiff]") {
  check_table_gradients(1);
  for (const auto& c : unary_cases()) check_gradient(c.name, c.f, c.args);
}

TEST_CASE("gradients match finite differences: binary ops with broadcasting", "[autodiff]") {
  check_table_gradients(2);
  check_table_gradients(3);
  for (const auto& c : binary_cases()) check_gradient(c.name, c.f, c.args);
}

TEST_CASE("gradients match finite differences: reductions and softmax", "[autodiff]") {
  for (const auto& c : reduction_cases()) check_gradient(c.name, c.f, c.args);
}

TEST_CASE("gradients match finite differences: shape and movement ops", "[autodiff]") {
  for (const auto& c : movement_cases()) check_gradient(c.name, c.f, c.args);
}

TEST_CASE("gradients match finite differences: scans, sorting and indexing", "[autodiff]") {
  for (const auto& c : indexing_cases()) check_gradient(c.name, c.f, c.args);
  // Repeated assignments: only the update that lands gets a gradient.
  const Tensor x = kiln::zeros({3}, kiln::f64);
  const Tensor updates = kiln::tensor(std::vector<double>{1, 2, 3}, {3});
  kiln::GradientTape tape;
  tape.watch(updates);
  const Tensor out = kiln::scatter(x, kiln::tensor({1, 1, 0}, {3}), updates, 0);
  const Tensor g =
      tape.gradient(kiln::sum(out * kiln::tensor(std::vector<double>{5, 7, 9}, {3})), updates);
  CHECK(g.to_vector<double>() == std::vector<double>{0, 7, 5});
  kiln::GradientTape modes;
  modes.watch(updates);
  const Tensor product =
      kiln::scatter(x, kiln::tensor({1, 1, 0}, {3}), updates, 0, kiln::ScatterMode::multiply);
  CHECK_THROWS_WITH(modes.gradient(kiln::sum(product), updates),
                    Catch::StartsWith("[scatter] has no gradient in modes other than assign"));
}

TEST_CASE("gradients match finite differences: matmul", "[autodiff]") {
  for (const auto& c : matmul_cases()) check_gradient(c.name, c.f, c.args);
}

TEST_CASE("second derivatives through nested tapes", "[autodiff]") {
  Tensor x = kiln::tensor(std::vector<double>{-1.3, 0.2, 0.9}, Shape{3});
  struct Second {
    std::string name;
    std::function<Tensor(const Tensor&)> f;
    std::function<double(double)> d2;
  };
  const std::vector<Second> cases = {
      {"x^3", [](const Tensor& t) { return t * t * t; }, [](double v) { return 6 * v; }},
      {"sin", [](const Tensor& t) { return kiln::sin(t); }, [](double v) { return -std::sin(v); }},
      {"tanh", [](const Tensor& t) { return kiln::tanh(t); },
       [](double v) {
         double y = std::tanh(v);
         return -2 * y * (1 - y * y);
       }},
      {"exp(2x)", [](const Tensor& t) { return kiln::exp(t * 2.0); },
       [](double v) { return 4 * std::exp(2 * v); }},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    kiln::GradientTape outer;
    outer.watch(x);
    Tensor dy;
    {
      kiln::GradientTape inner;
      inner.watch(x);
      dy = inner.gradient(kiln::sum(c.f(x)), x);
    }
    Tensor d2 = outer.gradient(kiln::sum(dy), x);
    const auto got = d2.to_vector<double>();
    const auto xs = x.to_vector<double>();
    for (std::size_t i = 0; i < xs.size(); ++i) CHECK(got[i] == Approx(c.d2(xs[i])).epsilon(1e-9));
  }
}

TEST_CASE("a tiny MLP's full gradient matches finite differences", "[autodiff]") {
  Tensor x = input({5, 3}, -1, 1, 61);
  Tensor labels = input({5, 2}, 0, 1, 62);
  std::vector<Tensor> params = {input({3, 4}, -0.5, 0.5, 63), input({4}, -0.1, 0.1, 64),
                                input({4, 2}, -0.5, 0.5, 65), input({2}, -0.1, 0.1, 66)};
  Fn loss = [x, labels](const std::vector<Tensor>& p) {
    Tensor h = kiln::tanh(kiln::matmul(x, p[0]) + p[1]);
    Tensor logits = kiln::matmul(h, p[2]) + p[3];
    Tensor prob = kiln::sigmoid(logits);
    Tensor bce = -(labels * kiln::log(prob) + (1.0 - labels) * kiln::log(1.0 - prob));
    return kiln::mean(bce);
  };
  check_gradient("mlp", loss, params);
}

TEST_CASE("a hand-unrolled LSTM cell's full gradient matches finite differences", "[autodiff]") {
  const std::int64_t batch = 3, in = 4, hidden = 5;
  Tensor xs = input({2, batch, in}, -1, 1, 71);  // two time steps
  std::vector<Tensor> params = {input({in, 4 * hidden}, -0.4, 0.4, 72),
                                input({hidden, 4 * hidden}, -0.4, 0.4, 73),
                                input({4 * hidden}, -0.1, 0.1, 74)};
  Fn run = [=](const std::vector<Tensor>& p) {
    Tensor h = kiln::zeros({batch, hidden}, kiln::f64), c = kiln::zeros({batch, hidden}, kiln::f64);
    for (Tensor x : kiln::unstack(xs, 0)) {
      Tensor z = kiln::matmul(x, p[0]) + kiln::matmul(h, p[1]) + p[2];
      auto gates = kiln::split(z, 4, 1);  // i, f, c~, o (Keras order)
      Tensor i = kiln::sigmoid(gates[0]), f = kiln::sigmoid(gates[1]);
      Tensor g = kiln::tanh(gates[2]), o = kiln::sigmoid(gates[3]);
      c = f * c + i * g;
      h = o * kiln::tanh(c);
    }
    return kiln::sum(h * h);
  };
  check_gradient("lstm", run, params);
}

TEST_CASE("value_and_grad, grad, vjp and custom_gradient", "[autodiff]") {
  Tensor a = kiln::tensor(std::vector<double>{1.0, 2.0, 3.0});
  Tensor b = kiln::tensor(std::vector<double>{0.5, -1.0, 2.0});
  auto f = [](const std::vector<Tensor>& v) { return kiln::sum(v[0] * v[1] * v[0]); };
  auto [value, grads] = kiln::value_and_grad(f)({a, b});
  CHECK(value.item<double>() == Approx(0.5 - 4.0 + 18.0));
  CHECK(grads[0].to_vector<double>() == std::vector<double>{1.0, -4.0, 12.0});  // 2ab
  CHECK(grads[1].to_vector<double>() == std::vector<double>{1.0, 4.0, 9.0});    // a^2
  auto only_b = kiln::grad(f, {1})({a, b});
  REQUIRE(only_b.size() == 1);
  CHECK(only_b[0].to_vector<double>() == std::vector<double>{1.0, 4.0, 9.0});
  CHECK_THROWS_WITH(kiln::grad(f, {2})({a, b}),
                    "[value_and_grad] argnum 2 out of range for 2 arguments");
  // Separate tensor arguments work the same way.
  auto [v2, g2] = kiln::value_and_grad(
      [](const Tensor& p, const Tensor& q) { return kiln::sum(p * q * p); }, {-1})(a, b);
  CHECK(v2.item<double>() == Approx(value.item<double>()));
  REQUIRE(g2.size() == 1);
  CHECK(g2[0].to_vector<double>() == std::vector<double>{1.0, 4.0, 9.0});

  auto [y, cot] = kiln::vjp([](const std::vector<Tensor>& v) { return v[0] * 3.0; }, {a},
                            kiln::tensor(std::vector<double>{1.0, 0.0, 2.0}));
  CHECK(y.to_vector<double>() == std::vector<double>{3.0, 6.0, 9.0});
  CHECK(cot[0].to_vector<double>() == std::vector<double>{3.0, 0.0, 6.0});

  // Straight-through rounding: forward rounds, backward passes the gradient unchanged.
  auto round_ste = kiln::custom_gradient([](const std::vector<Tensor>& v) {
    return std::pair<Tensor, kiln::GradFn>(kiln::round(v[0]),
                                           [](const Tensor& g) { return std::vector<Tensor>{g}; });
  });
  Tensor x = kiln::tensor(std::vector<double>{0.2, 1.7, -0.6});
  kiln::GradientTape tape;
  tape.watch(x);
  Tensor loss = kiln::sum(round_ste({x}) * x);
  Tensor gx = tape.gradient(loss, x);
  // d/dx [round_ste(x) * x] = 1 * x + round(x)
  CHECK(gx.to_vector<double>() == std::vector<double>{0.2 + 0.0, 1.7 + 2.0, -0.6 - 1.0});
}

TEST_CASE("stop_gradient, unconnected sources and integer paths give zeros", "[autodiff]") {
  Tensor x = kiln::tensor(std::vector<double>{1.0, 2.0});
  Tensor unused = kiln::tensor(std::vector<double>{5.0});
  kiln::GradientTape tape({.persistent = true});
  tape.watch(x);
  tape.watch(unused);
  Tensor y = kiln::sum(x * kiln::stop_gradient(x));
  auto g = tape.gradient(y, {x, unused});
  CHECK(g[0].to_vector<double>() == std::vector<double>{1.0, 2.0});
  CHECK(g[1].to_vector<double>() == std::vector<double>{0.0});
  Tensor through_int = kiln::sum(kiln::cast(kiln::cast(x, kiln::i32), kiln::f64));
  CHECK(tape.gradient(through_int, x).to_vector<double>() == std::vector<double>{0.0, 0.0});
  Tensor through_argmax = kiln::cast(kiln::argmax(x), kiln::f64);
  CHECK(tape.gradient(through_argmax, x).to_vector<double>() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("tape errors are clear and change nothing", "[autodiff]") {
  Tensor x = kiln::tensor(std::vector<double>{1.0, 2.0});
  {
    kiln::GradientTape tape;
    tape.watch(x);
    Tensor y = x * 2.0;
    CHECK_THROWS_WITH(
        tape.gradient(y, x),
        Catch::StartsWith("[GradientTape.gradient] target of shape [2] is not a scalar"));
    // The failed call released nothing: a proper call still works.
    CHECK(tape.gradient(kiln::sum(y), x).to_vector<double>() == std::vector<double>{2.0, 2.0});
    CHECK_THROWS_WITH(tape.gradient(kiln::sum(y), x),
                      Catch::StartsWith("[GradientTape.gradient] this tape was released"));
  }
  kiln::GradientTape tape;
  Tensor ints = kiln::tensor({1, 2});
  CHECK_THROWS_WITH(tape.watch(ints),
                    Catch::StartsWith("[GradientTape.watch] cannot watch a tensor of dtype i32"));
  CHECK_THROWS_WITH(tape.gradient(kiln::sum(x), ints),
                    Catch::StartsWith("[GradientTape.gradient] source 0 has dtype i32"));
  CHECK_THROWS_WITH(tape.gradient(kiln::sum(x), x, kiln::ones({3}, kiln::f64)),
                    Catch::StartsWith("[GradientTape.gradient] output_gradient is f64 [3]"));
}

TEST_CASE("10,000 eager forward+backward steps leave live memory where it started", "[autodiff]") {
  Tensor w = input({8, 8}, -0.3, 0.3, 81);
  Tensor x = input({4, 8}, -1, 1, 82);
  auto step = [&] {
    kiln::GradientTape tape;
    tape.watch(w);
    Tensor loss = kiln::mean(kiln::square(kiln::tanh(kiln::matmul(x, w))));
    Tensor g = tape.gradient(loss, w);
    w = w - g * 0.01;
  };
  step();  // warm caches (libxsmm kernels, thread pool)
  const auto before = kiln::memory_stats();
  for (int i = 0; i < 10000; ++i) step();
  const auto after = kiln::memory_stats();
  CHECK(after.live_tensors == before.live_tensors);
  CHECK(after.live_bytes == before.live_bytes);
}

TEST_CASE("sigmoid_cross_entropy is stable for large logits", "[autodiff]") {
  Tensor logits = kiln::tensor(std::vector<float>{-1000.f, -20.f, 0.f, 20.f, 1000.f});
  Tensor labels = kiln::tensor(std::vector<float>{0.f, 1.f, 0.5f, 0.f, 1.f});
  const auto loss = kiln::sigmoid_cross_entropy(logits, labels).to_vector<float>();
  CHECK(loss[0] == Approx(0.0).margin(1e-6));
  CHECK(loss[1] == Approx(20.0).epsilon(1e-6));
  CHECK(loss[2] == Approx(std::log(2.0)).epsilon(1e-6));
  CHECK(loss[3] == Approx(20.0).epsilon(1e-6));
  CHECK(loss[4] == Approx(0.0).margin(1e-6));
  kiln::GradientTape tape;
  tape.watch(logits);
  Tensor g = tape.gradient(kiln::sum(kiln::sigmoid_cross_entropy(logits, labels)), logits);
  // d/dx = sigmoid(x) - z, exactly, including at x = 0.
  const std::vector<float> expected{0.f, -1.f, 0.f, 1.f, 0.f};
  const auto got = g.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-6));
  CHECK_THROWS_WITH(kiln::sigmoid_cross_entropy(logits, kiln::tensor({1, 2})),
                    Catch::StartsWith("[sigmoid_cross_entropy] dtypes differ"));
}

TEST_CASE("tapes watch the trainable variables they see read", "[autodiff][variables]") {
  kiln::Variable w(kiln::tensor({1.f, 2.f, 3.f}, {3}), "w");
  kiln::Variable frozen(kiln::tensor({2.f}, {1}), "frozen", /*trainable*/ false);
  kiln::Variable unused(kiln::zeros({2, 2}), "unused");
  const Tensor x = kiln::tensor({4.f, 5.f, 6.f}, {3});
  kiln::GradientTape tape({.persistent = true});
  const Tensor loss = kiln::sum(kiln::square(w.value() * x) * frozen.value());
  // d/dw sum(2 (w x)^2) = 4 w x^2
  const auto g = tape.gradient(loss, {w, frozen, unused});
  CHECK(g[0].to_vector<float>() == std::vector<float>{64, 200, 432});
  CHECK(g[1].to_vector<float>() == std::vector<float>{0});  // not trainable: not watched
  CHECK(g[2].shape() == Shape{2, 2});
  CHECK(kiln::sum(g[2]).item<float>() == 0.f);
  REQUIRE(tape.watched_variables().size() == 1);
  CHECK(tape.watched_variables()[0] == w);

  kiln::GradientTape explicit_tape({.watch_accessed_variables = false});
  explicit_tape.watch(frozen);
  const Tensor y = kiln::sum(w.value() * frozen.value() * frozen.value());
  const auto gy = explicit_tape.gradient(y, {frozen, w});
  CHECK(gy[0].to_vector<float>() == std::vector<float>{2 * 2 * 6});  // d/df sum(w) f^2 = 2 f sum(w)
  CHECK(gy[1].to_vector<float>() == std::vector<float>{0, 0, 0});    // not watched
}

TEST_CASE("a variable read before and after an assignment gets both gradients",
          "[autodiff][variables]") {
  kiln::Variable v(kiln::tensor({3.f}, {1}), "v");
  kiln::GradientTape tape;
  const Tensor first = v.value() * 2.f;
  v.assign(kiln::tensor({5.f}, {1}));
  const Tensor second = v.value() * 7.f;
  CHECK(tape.gradient(kiln::sum(first + second), {v})[0].item<float>() == 9.f);
}

TEST_CASE("a traced train step takes gradients with respect to variables",
          "[autodiff][variables][function]") {
  const auto init = kiln::random::normal({4, 2}, 0, 1, 3);
  kiln::Variable traced_w(init, "traced_w"), eager_w(init, "eager_w");
  const Tensor x = kiln::random::normal({8, 4}, 0, 1, 4), y = kiln::random::normal({8, 2}, 0, 1, 5);
  const auto step = [&](const kiln::Variable& w) {
    kiln::GradientTape tape;
    const Tensor loss = kiln::mean(kiln::square(kiln::matmul(x, w.value()) - y));
    const auto grads = tape.gradient(loss, {w});
    w.assign_sub(grads[0] * 0.1f);
    return loss;
  };
  auto traced = kiln::function([&] { return step(traced_w); });
  for (int i = 0; i < 5; ++i) {
    const Tensor a = traced(), b = step(eager_w);
    CHECK(std::abs(a.item<float>() - b.item<float>()) < 1e-5f);
  }
  CHECK(kiln::max(kiln::abs(traced_w.value() - eager_w.value())).item<float>() < 1e-5f);
  CHECK(traced.tracing_count() == 1);
}

TEST_CASE("a tape computes no gradient for an input it does not track", "[autodiff]") {
  // x is a constant: its gradient through a matmul or a convolution (a product the size of x)
  // is not computed, so the backward pass holds nothing of x's size.
  const Tensor x = kiln::random::normal({512, 64}, 0, 1, 1);
  const Tensor images = kiln::random::normal({4, 32, 32, 16}, 0, 1, 2);
  const std::int64_t input_bytes = 512 * 64 * 4;  // both inputs: 128 KiB or more
  kiln::Variable w(kiln::random::normal({64, 8}, 0, 1, 3), "w");
  kiln::Variable kernel(kiln::random::normal({3, 3, 16, 1}, 0, 1, 4), "kernel");
  const std::vector<std::pair<const char*, std::function<Tensor()>>> cases = {
      {"matmul", [&] { return kiln::sum(kiln::square(kiln::matmul(x, w.value()))); }},
      {"conv2d",
       [&] {
         return kiln::sum(kiln::square(
             kiln::conv2d(images, kernel.value(), {.padding = kiln::ConvPadding::same})));
       }},
  };
  for (const auto& [name, loss_of] : cases) {
    CAPTURE(name);
    const kiln::Variable& v = std::string(name) == "matmul" ? w : kernel;
    kiln::GradientTape tape;
    const Tensor loss = loss_of();
    const std::int64_t live = kiln::memory_stats().live_bytes;
    kiln::reset_peak_bytes();
    const Tensor grad = tape.gradient(loss, v.value());
    CHECK(kiln::memory_stats().peak_bytes - live < input_bytes / 2);
    // The gradient itself, against a tape that also watches the input.
    kiln::GradientTape both;
    const Tensor input = std::string(name) == "matmul" ? x : images;
    both.watch(input);
    const auto grads = both.gradient(loss_of(), std::vector<Tensor>{v.value(), input});
    CHECK(kiln::max(kiln::abs(grad - grads[0])).item<float>() == 0.0f);
    CHECK(grads[1].shape() == input.shape());
    CHECK(kiln::max(kiln::abs(grads[1])).item<float>() > 0.0f);
  }
}

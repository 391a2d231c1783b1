// Variables assigned inside scan, while_loop and cond bodies: traced, each such variable is a
// loop carry (or a cond result) of the region node, assigned once after it; reads in the body
// before the assignment see the value of the step before. Every row runs eagerly (plain C++
// loops that assign as they go) and traced (with a dynamic trip count where it has one), twice,
// and must leave the same results and the same variable values; then gradients, and errors.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/kiln.hpp>

#include "finite_difference.hpp"

using kiln::Tensor;

namespace {

using V = std::vector<Tensor>;

/// The variables a row works on, made fresh (same initial values) for each run.
struct State {
  kiln::Variable total{kiln::tensor(std::vector<double>{0.5, -1}, {2}), "cfv/total"};
  kiln::Variable count{kiln::zeros({}, kiln::i32), "cfv/count"};
  kiln::Variable gain{kiln::tensor(std::vector<double>{0.75, 1.5}, {2}), "cfv/gain"};
};

/// A row: f(state, xs) built from control flow that assigns state's variables.
struct Row {
  std::string name;
  std::function<V(State&, const Tensor& xs)> f;
};

std::pair<Tensor, Tensor> step_pair(Tensor c, Tensor y) { return {std::move(c), std::move(y)}; }

std::vector<Row> rows() {
  std::vector<Row> r;
  r.push_back({"scan: a running total, read after each assignment", [](State& s, const Tensor& xs) {
                 auto [c, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       s.total.assign_add(x * s.gain.value());
                       s.count.assign_add(kiln::ones({}, kiln::i32));
                       return step_pair(c + 1.0, s.total.value());
                     },
                     kiln::zeros({}, kiln::f64), xs);
                 return V{c, ys};
               }});
  r.push_back(
      {"scan: read before the assignment sees the step before", [](State& s, const Tensor& xs) {
         auto [c, ys] = kiln::scan(
             [&](const Tensor& c, const Tensor& x) {
               const Tensor before = s.total.value();
               s.total.assign(before * 0.5 + x);
               return step_pair(c + kiln::sum(before), before);
             },
             kiln::zeros({}, kiln::f64), xs);
         return V{c, ys};
       }});
  r.push_back({"scan: assigned before any read, twice per step", [](State& s, const Tensor& xs) {
                 auto [c, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       s.total.assign(x * 2.0);
                       s.total.assign(s.total.value() + c);
                       return step_pair(s.total.value(), x);
                     },
                     kiln::zeros({2}, kiln::f64), xs);
                 return V{c, ys};
               }});
  r.push_back({"scan: a value read before the loop stays the value before it",
               [](State& s, const Tensor& xs) {
                 const Tensor at_start = s.total.value();
                 auto [c, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       s.total.assign_add(x);
                       return step_pair(c + at_start, s.total.value() - at_start);
                     },
                     kiln::zeros({2}, kiln::f64), xs);
                 return V{c, ys, at_start, s.total.value()};
               }});
  r.push_back({"scan in reverse, and the value after the loop", [](State& s, const Tensor& xs) {
                 auto [c, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       s.total.assign(s.total.value() * s.gain.value() + x);
                       return step_pair(c, s.total.value());
                     },
                     kiln::zeros({}, kiln::f64), xs, {.reverse = true});
                 return V{ys, s.total.value() * 3.0};
               }});
  r.push_back({"while_loop: cond reads a counter the body assigns", [](State& s, const Tensor& xs) {
                 const V out = kiln::while_loop([&](const V&) { return s.count.value() < 4; },
                                                [&](const V& v) {
                                                  s.count.assign_add(kiln::ones({}, kiln::i32));
                                                  s.total.assign(s.total.value() + v[0]);
                                                  return V{v[0] * 2.0};
                                                },
                                                {kiln::sum(xs, {0})});
                 return V{out[0]};
               }});
  r.push_back(
      {"cond: one branch assigns, the other passes the value on", [](State& s, const Tensor& xs) {
         V out;
         for (int k = 0; k < 2; ++k) {
           const Tensor pred = k == 0 ? kiln::sum(xs) > 0.0 : kiln::sum(xs) <= 0.0;
           out.push_back(kiln::cond(
               pred,
               [&](const V& v) {
                 s.total.assign(v[0] + s.gain.value());
                 s.count.assign(kiln::full({}, 7, kiln::i32));
                 return V{v[0] * 2.0};
               },
               [&](const V& v) { return V{v[0] - s.total.value()}; }, {kiln::sum(xs, {0})})[0]);
           out.push_back(s.total.value());
         }
         return out;
       }});
  r.push_back({"cond in a scan body assigns on some steps", [](State& s, const Tensor& xs) {
                 auto [c, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       const V kept = kiln::cond(
                           kiln::sum(x) > 0.0,
                           [&](const V& v) {
                             s.total.assign_add(v[0]);
                             s.count.assign_add(kiln::ones({}, kiln::i32));
                             return V{v[0]};
                           },
                           [](const V& v) { return V{v[0] * 0.0}; }, {x});
                       return step_pair(c + kept[0], s.total.value());
                     },
                     kiln::zeros({2}, kiln::f64), xs);
                 return V{c, ys};
               }});
  r.push_back({"scan in a scan body, the inner one assigns", [](State& s, const Tensor& xs) {
                 auto [c, ys] = kiln::scan(
                     [&](const Tensor& c, const Tensor& x) {
                       const Tensor pair = kiln::stack({x, x * -0.5});
                       auto [inner, unused] = kiln::scan(
                           [&](const Tensor& ic, const Tensor& ix) {
                             s.total.assign(s.total.value() * 0.5 + ix);
                             return step_pair(ic + s.total.value(), ix);
                           },
                           c, pair);
                       s.count.assign_add(kiln::ones({}, kiln::i32));
                       return step_pair(inner, s.total.value());
                     },
                     kiln::zeros({2}, kiln::f64), xs);
                 return V{c, ys};
               }});
  return r;
}

Tensor xs_of(std::int64_t steps, std::uint64_t seed) {
  return kiln::random::uniform({steps, 2}, -1, 1, seed, kiln::f64);
}

/// Empty if a and b hold the same values (to rounding), else what differs.
std::string difference(const V& a, const V& b) {
  if (a.size() != b.size()) return "result counts differ";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype() != b[i].dtype() || a[i].shape() != b[i].shape())
      return "result " + std::to_string(i) + " has another type";
    const Tensor d = kiln::abs(kiln::cast(a[i], kiln::f64) - kiln::cast(b[i], kiln::f64));
    if (a[i].size() > 0 && kiln::max(d).item<double>() > 1e-12)
      return "result " + std::to_string(i) + " differs";
  }
  return "";
}

V variables_of(State& s) { return {s.total.value(), s.count.value(), s.gain.value()}; }

}  // namespace

TEST_CASE("variables assigned in control-flow bodies, traced against eager",
          "[control_flow][variables]") {
  for (const Row& row : rows()) {
    SECTION(row.name) {
      State eager_state, traced_state;
      auto f = kiln::function([&](const Tensor& xs) { return row.f(traced_state, xs); },
                              {.input_signature = {kiln::TensorSpec({-1, 2}, kiln::f64)}});
      std::size_t nodes = 0;
      for (std::int64_t steps : {3, 5, 1}) {
        INFO(steps << " steps");
        const Tensor xs = xs_of(steps, 40 + static_cast<std::uint64_t>(steps));
        const V eager = row.f(eager_state, xs);
        const V traced = f(xs);
        CHECK(difference(traced, eager) == "");
        CHECK(difference(variables_of(traced_state), variables_of(eager_state)) == "");
        const std::size_t n = f.get_concrete_function(xs).graph().num_nodes();
        if (nodes == 0) nodes = n;
        CHECK(n == nodes);
      }
      CHECK(f.tracing_count() == 1);
    }
  }
}

TEST_CASE("a variable a body assigns is one carry of the scan node, not a node per step",
          "[control_flow][variables]") {
  State s;
  auto f = kiln::function([&](const Tensor& xs) { return rows()[0].f(s, xs); });
  const std::size_t short_graph = f.get_concrete_function(xs_of(2, 1)).graph().num_nodes();
  const std::size_t long_graph = f.get_concrete_function(xs_of(200, 2)).graph().num_nodes();
  CHECK(short_graph == long_graph);
  const std::string text = f.get_concrete_function(xs_of(2, 1)).graph().to_string();
  CHECK(text.find("scan") != std::string::npos);
}

TEST_CASE("gradients flow through a variable a scan body assigns",
          "[control_flow][variables][autodiff]") {
  // A state variable updated each step (s = tanh(s * w + x)); the loss is its final value.
  kiln::Variable state(kiln::zeros({2}, kiln::f64), "cfv/state");
  kiln::Variable w(kiln::tensor(std::vector<double>{0.8, -0.6}, {2}), "cfv/w");
  const auto run = [&](const Tensor& xs) {
    kiln::scan(
        [&](const Tensor& c, const Tensor& x) {
          state.assign(kiln::tanh(state.value() * w.value() + x));
          return step_pair(c, x);
        },
        kiln::zeros({}, kiln::f64), xs);
    return kiln::sum(kiln::square(state.value()));
  };
  const auto gradient = [&](const Tensor& xs) {
    state.assign(kiln::tensor(std::vector<double>{0.1, 0.2}, {2}));
    kiln::GradientTape tape({.persistent = true});
    tape.watch(xs);
    const Tensor loss = run(xs);
    V g = tape.gradient(loss, std::vector<kiln::Variable>{w});
    g.push_back(tape.gradient(loss, xs));
    return g;
  };
  const Tensor xs = xs_of(6, 9);
  const V eager = gradient(xs);
  const auto loss_at = [&](const V& a) {
    const Tensor keep = w.value();
    w.assign(a[0]);
    state.assign(kiln::tensor(std::vector<double>{0.1, 0.2}, {2}));
    const double l = run(a[1]).item<double>();
    w.assign(keep);
    return l;
  };
  const std::vector<double> dw = kiln::test::numeric_gradient(loss_at, {w.value(), xs}, 0);
  const std::vector<double> dx = kiln::test::numeric_gradient(loss_at, {w.value(), xs}, 1);
  const std::vector<double> ew = eager[0].to_vector<double>(), ex = eager[1].to_vector<double>();
  for (std::size_t j = 0; j < dw.size(); ++j) CHECK(ew[j] == Approx(dw[j]).margin(1e-7));
  for (std::size_t j = 0; j < dx.size(); ++j) CHECK(ex[j] == Approx(dx[j]).margin(1e-7));
  auto traced = kiln::function(gradient);
  for (int call = 0; call < 2; ++call) CHECK(difference(traced(xs), eager) == "");
  CHECK(traced.tracing_count() == 1);
}

TEST_CASE("a differentiable while_loop whose body assigns a variable",
          "[control_flow][variables][autodiff]") {
  kiln::Variable steps(kiln::zeros({}, kiln::i32), "cfv/steps");
  const auto gradient = [&](const Tensor& x) {
    steps.assign(kiln::zeros({}, kiln::i32));
    kiln::GradientTape tape;
    tape.watch(x);
    const V out = kiln::while_loop([](const V& v) { return kiln::sum(v[0]) < 10.0; },
                                   [&](const V& v) {
                                     steps.assign_add(kiln::ones({}, kiln::i32));
                                     return V{v[0] * 1.5 + 0.25};
                                   },
                                   {x}, {.maximum_iterations = 20});
    return V{tape.gradient(kiln::sum(kiln::square(out[0])), x), steps.value()};
  };
  const Tensor x = kiln::tensor(std::vector<double>{0.5, 1.0}, {2});
  const V eager = gradient(x);
  auto traced = kiln::function(gradient);
  CHECK(difference(traced(x), eager) == "");
  CHECK(steps.value().item<std::int32_t>() == eager[1].item<std::int32_t>());
  CHECK(eager[1].item<std::int32_t>() > 1);
}

TEST_CASE("assignments in bodies: errors, and nothing half-changed", "[control_flow][variables]") {
  kiln::Variable v(kiln::zeros({2}), "cfv/errors");
  kiln::FunctionOptions o;
  o.name = "assigns";
  auto in_cond_fn = kiln::function(
      [&](const Tensor& x) {
        return kiln::while_loop(
            [&](const V& w) {
              v.assign(w[0]);
              return kiln::sum(w[0]) < 10.f;
            },
            [](const V& w) { return V{w[0] * 2.f}; }, {x})[0];
      },
      o);
  CHECK_THROWS_WITH(in_cond_fn(kiln::ones({2})),
                    Catch::Contains("[while_loop] cond assigns variable 'cfv/errors'; it may only "
                                    "read variables"));
  auto wrong_shape = kiln::function(
      [&](const Tensor& xs) {
        return kiln::scan(
                   [&](const Tensor& c, const Tensor& x) {
                     v.assign(kiln::concat({x, x}));
                     return step_pair(c, x);
                   },
                   kiln::zeros({2}), xs)
            .first;
      },
      o);
  CHECK_THROWS_WITH(wrong_shape(kiln::ones({3, 2})), Catch::Contains("Variable.assign"));
  // A body that fails after assigning: the function is not cached and v keeps its value.
  auto fails = kiln::function(
      [&](const Tensor& xs) {
        return kiln::scan(
                   [&](const Tensor& c, const Tensor& x) {
                     v.assign(x);
                     return step_pair(kiln::concat({c, x}), x);
                   },
                   kiln::zeros({2}), xs)
            .first;
      },
      o);
  CHECK_THROWS_WITH(fails(kiln::ones({3, 2})), Catch::Contains("[scan] the body changed carry 0"));
  CHECK(fails.cache_size() == 0);
  CHECK(v.value().to_vector<float>() == std::vector<float>{0, 0});
  // A checkpointed function still may not assign (its backward pass replays it).
  auto checkpointed = kiln::checkpoint([&](const V& a) {
    v.assign(a[0]);
    return V{a[0] * 2.f};
  });
  kiln::GradientTape tape;
  const Tensor x = kiln::ones({2});
  tape.watch(x);
  CHECK_THROWS_WITH(checkpointed({x}), Catch::Contains("a checkpointed function must not assign"));
}

// kiln::optim: updates against hand-computed steps, slots (names, created once, dropped with
// their variable), schedules, clipping, eager against traced train steps. How compiled updates
// run (folded into GEMMs, in place, in groups, eagerly compiled) is test_optimizer_updates.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <span>
#include <thread>

#include <kiln/kiln.hpp>

#include "optimizer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace optim = kiln::optim;
using kiln::test::check_values;
using kiln::test::values_of;

namespace {

std::vector<std::string> names_of(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name());
  return out;
}

// Two fixed gradients applied in turn to w = [1, -2].
const std::vector<std::vector<double>> grads{{0.5, -1.0}, {0.25, 2.0}};

Tensor grad_tensor(std::size_t step) { return kiln::tensor(grads[step], {2}); }

}  // namespace

TEST_CASE("SGD: plain, momentum and nesterov steps", "[nn][optim]") {
  kiln::clear_session();
  for (const double momentum : {0.0, 0.9}) {
    for (const bool nesterov : {false, true}) {
      if (momentum == 0.0 && nesterov) continue;
      Variable w(kiln::tensor({1.0, -2.0}), "w");
      optim::SGD opt({.learning_rate = 0.1, .momentum = momentum, .nesterov = nesterov});
      std::vector<double> ref{1.0, -2.0}, m{0.0, 0.0};
      for (std::size_t step = 0; step < 2; ++step) {
        opt.apply({grad_tensor(step)}, {w});
        for (std::size_t i = 0; i < 2; ++i) {
          const double g = grads[step][i];
          if (momentum == 0) {
            ref[i] -= 0.1 * g;
          } else {
            m[i] = momentum * m[i] - 0.1 * g;
            ref[i] += nesterov ? momentum * m[i] - 0.1 * g : m[i];
          }
        }
        check_values(w, ref);
      }
      CHECK(opt.iterations().value().item<std::int64_t>() == 2);
      CHECK(opt.slot_names().size() == (momentum > 0 ? 1u : 0u));
      if (momentum > 0) check_values(opt.slot(w, "momentum"), m);
    }
  }
}

TEST_CASE("Adam: bias-corrected steps", "[nn][optim]") {
  kiln::clear_session();
  Variable w(kiln::tensor({1.0, -2.0}), "w");
  optim::Adam opt({.learning_rate = 0.01, .beta1 = 0.8, .beta2 = 0.9, .epsilon = 1e-3});
  std::vector<double> ref{1.0, -2.0}, m{0, 0}, v{0, 0};
  for (std::size_t step = 0; step < 2; ++step) {
    opt.apply({grad_tensor(step)}, {w});
    const double t = static_cast<double>(step + 1);
    const double alpha = 0.01 * std::sqrt(1 - std::pow(0.9, t)) / (1 - std::pow(0.8, t));
    for (std::size_t i = 0; i < 2; ++i) {
      const double g = grads[step][i];
      m[i] += (g - m[i]) * 0.2;
      v[i] += (g * g - v[i]) * 0.1;
      ref[i] -= alpha * m[i] / (std::sqrt(v[i]) + 1e-3);
    }
    check_values(w, ref, 1e-8);
  }
  check_values(opt.slot(w, "m"), m, 1e-12);
  check_values(opt.slot(w, "v"), v, 1e-12);
  CHECK(opt.slot(w, "m").name() == "adam/w/m");
  CHECK_FALSE(opt.slot(w, "m").trainable());
  CHECK_THROWS_WITH(
      opt.slot(w, "velocity"),
      "[optim.Adam] adam has no slot 'velocity' for variable w (slots are created by "
      "the first apply() that updates the variable; this optimizer's slots are: m, v)");
}

TEST_CASE("RMSprop with and without momentum", "[nn][optim]") {
  kiln::clear_session();
  for (const double momentum : {0.0, 0.5}) {
    Variable w(kiln::tensor({1.0, -2.0}), "w");
    optim::RMSprop opt({.learning_rate = 0.01, .rho = 0.8, .momentum = momentum});
    std::vector<double> ref{1.0, -2.0}, vel{0, 0}, mom{0, 0};
    for (std::size_t step = 0; step < 2; ++step) {
      opt.apply({grad_tensor(step)}, {w});
      for (std::size_t i = 0; i < 2; ++i) {
        const double g = grads[step][i];
        vel[i] = 0.8 * vel[i] + 0.2 * g * g;
        const double inc = 0.01 * g / std::sqrt(vel[i] + 1e-7);
        if (momentum > 0) {
          mom[i] = momentum * mom[i] + inc;
          ref[i] -= mom[i];
        } else {
          ref[i] -= inc;
        }
      }
      check_values(w, ref, 1e-8);
    }
    CHECK(opt.slot_names() == (momentum > 0 ? std::vector<std::string>{"velocity", "momentum"}
                                            : std::vector<std::string>{"velocity"}));
  }
}

TEST_CASE("slots are named under the optimizer and created once", "[nn][optim]") {
  kiln::clear_session();
  struct Net : kiln::Module {
    kiln::nn::Dense l1{4}, l2{1};
    Net() : Module("net") {
      add_module("l1", l1);
      add_module("l2", l2);
    }
    Tensor operator()(const Tensor& x) { return l2(kiln::tanh(l1(x))); }
  } net;
  const Tensor x = kiln::random::normal({8, 3}, 0, 1, 1);
  const Tensor y = kiln::random::normal({8, 1}, 0, 1, 2);
  optim::Adam opt;
  CHECK(names_of(opt.variables()) ==
        std::vector<std::string>{"adam/iterations", "adam/learning_rate"});
  auto step = kiln::function([&](const Tensor& xb, const Tensor& yb) {
    std::vector<Variable> vars;
    std::vector<Tensor> grads;
    Tensor loss;
    {
      kiln::GradientTape tape;
      loss = kiln::nn::losses::mean_squared_error(yb, net(xb));
      vars = net.trainable_variables();
      grads = tape.gradient(loss, vars);
    }
    opt.apply(grads, vars);
    return loss;
  });
  step(x, y);
  const std::vector<std::string> expected{
      "adam/iterations",    "adam/learning_rate", "adam/net/l1/kernel/m", "adam/net/l1/kernel/v",
      "adam/net/l1/bias/m", "adam/net/l1/bias/v", "adam/net/l2/kernel/m", "adam/net/l2/kernel/v",
      "adam/net/l2/bias/m", "adam/net/l2/bias/v"};
  CHECK(names_of(opt.variables()) == expected);
  const auto variables = kiln::global_variables().size();
  const auto nodes = kiln::memory_stats().live_graph_nodes;
  for (int i = 0; i < 20; ++i) step(x, y);
  CHECK(step.tracing_count() == 1);
  CHECK(names_of(opt.variables()) == expected);
  CHECK(kiln::global_variables().size() == variables);
  CHECK(kiln::memory_stats().live_graph_nodes == nodes);
  CHECK(opt.iterations().value().item<std::int64_t>() == 21);
  CHECK(opt.trainable_variables().empty());
  // Eager applies find the same slots.
  opt.apply(std::vector<Tensor>(4), net.trainable_variables());  // undefined gradients: skipped
  CHECK(opt.variables().size() == expected.size());
  CHECK(opt.iterations().value().item<std::int64_t>() == 22);
}

TEST_CASE("slots of destroyed variables are dropped; duplicate names are an error", "[nn][optim]") {
  kiln::clear_session();
  optim::SGD opt({.momentum = 0.9});
  const auto before = kiln::memory_stats().live_bytes;
  for (int round = 0; round < 3; ++round) {
    Variable w(kiln::ones({256}), "model/w");  // the same name every round
    opt.apply({kiln::ones({256})}, {w});
    CHECK(opt.variables().size() == 3);  // iterations, learning_rate, one slot
    check_values(opt.slot(w, "momentum"), std::vector<double>(256, -0.01));  // fresh each round
  }
  opt.apply({}, {});  // notices that the last w is gone
  CHECK(opt.variables().size() == 2);
  CHECK(kiln::memory_stats().live_bytes == before);

  Variable a(kiln::ones({2}), "same"), b(kiln::ones({2}), "same");
  CHECK_THROWS_WITH(
      opt.apply({kiln::ones({2}), kiln::ones({2})}, {a, b}),
      Catch::StartsWith("[optim.SGD] sgd updates two different variables named same"));
  CHECK_THROWS_WITH(opt.apply({kiln::ones({3})}, {a}),
                    "[optim.SGD] gradient 0 is f32 [3], but its variable same is f32 [2]");
  CHECK_THROWS_WITH(opt.apply({kiln::ones({2})}, {a, b}),
                    "[optim.SGD] got 1 gradients for 2 variables");
  CHECK_THROWS_WITH(optim::Adam({.beta1 = 1.0}), "[optim.Adam] beta1 must be in [0, 1), got 1");
  CHECK_THROWS_WITH(optim::SGD({.learning_rate = -1.0}),
                    "[optim.SGD] learning_rate must be finite and >= 0, got -1");
}

TEST_CASE("learning-rate schedules are evaluated from the iteration counter in the graph",
          "[nn][optim]") {
  kiln::clear_session();
  const auto rate_at = [](const optim::Schedule& s, std::int64_t step) {
    return static_cast<double>(s(kiln::scalar(step)).item<float>());
  };
  const auto decay = optim::schedules::exponential_decay(0.1, 10, 0.5);
  CHECK(rate_at(decay, 0) == Approx(0.1));
  CHECK(rate_at(decay, 5) == Approx(0.1 * std::pow(0.5, 0.5)));
  CHECK(rate_at(decay, 20) == Approx(0.025));
  const auto stairs = optim::schedules::exponential_decay(0.1, 10, 0.5, /*staircase*/ true);
  CHECK(rate_at(stairs, 19) == Approx(0.05));
  const auto pieces = optim::schedules::piecewise_constant({2, 4}, {1.0, 0.5, 0.25});
  CHECK(rate_at(pieces, 0) == 1.0);
  CHECK(rate_at(pieces, 2) == 1.0);
  CHECK(rate_at(pieces, 3) == 0.5);
  CHECK(rate_at(pieces, 5) == 0.25);
  CHECK(rate_at(optim::schedules::constant(0.3), 7) == Approx(0.3));
  CHECK_THROWS_WITH(optim::schedules::piecewise_constant({2, 1}, {1, 2, 3}),
                    "[optim.schedules.piecewise_constant] boundaries must increase, got 1 after 2");

  // SGD with a piecewise schedule inside a traced step: w -= rate(step) * 1 per call.
  Variable w(kiln::zeros({1}), "w");
  optim::SGD opt({.learning_rate = pieces});
  CHECK(opt.variables().size() == 1);  // no learning_rate variable for a schedule
  auto step = kiln::function([&] {
    opt.apply({kiln::ones({1})}, {w});
    return w.value();
  });
  std::vector<double> got;
  for (int i = 0; i < 6; ++i) got.push_back(static_cast<double>(step().item<float>()));
  CHECK(step.tracing_count() == 1);
  CHECK(got == std::vector<double>{-1.0, -2.0, -3.0, -3.5, -4.0, -4.25});
  CHECK_THROWS_WITH(opt.set_learning_rate(0.1),
                    "[optim.SGD] sgd uses the schedule 'piecewise_constant'; set_learning_rate "
                    "needs a constant rate");
}

TEST_CASE("set_learning_rate changes a cached step without retracing", "[nn][optim]") {
  kiln::clear_session();
  Variable w(kiln::zeros({1}), "w");
  optim::SGD opt({.learning_rate = 1.0});
  auto step = kiln::function([&] {
    opt.apply({kiln::ones({1})}, {w});
    return w.value();
  });
  CHECK(step().item<float>() == -1.f);
  opt.set_learning_rate(0.5);
  CHECK(step().item<float>() == -1.5f);
  CHECK(opt.learning_rate().item<float>() == 0.5f);
  CHECK(step.tracing_count() == 1);
}

TEST_CASE("gradient clipping by norm and by global norm", "[nn][optim]") {
  kiln::clear_session();
  Variable a(kiln::zeros({2}), "a"), b(kiln::zeros({1}), "b");
  const Tensor ga = kiln::tensor({3.f, 4.f}), gb = kiln::tensor({12.f});  // norms 5 and 12
  optim::SGD per_variable({.learning_rate = 1.0, .clipnorm = 1.0});
  per_variable.apply({ga, gb}, {a, b});
  check_values(a, {-0.6, -0.8});
  check_values(b, {-1.0});
  a.assign(kiln::zeros({2}));
  b.assign(kiln::zeros({1}));
  optim::SGD global({.learning_rate = 1.0, .global_clipnorm = 6.5});  // global norm 13
  global.apply({ga, gb}, {a, b});
  check_values(a, {-1.5, -2.0});
  check_values(b, {-6.0});
  optim::SGD loose({.learning_rate = 1.0, .global_clipnorm = 100.0});  // no effect below the cap
  loose.apply({ga, gb}, {a, b});
  check_values(b, {-18.0});
}

TEST_CASE("a train step traced and eager gives the same weights", "[nn][optim][function]") {
  kiln::clear_session();
  struct Trainer {
    kiln::nn::Sequential model{
        {kiln::nn::LSTM(5), kiln::nn::Dense(1, kiln::nn::Activation::sigmoid)}};
    optim::Adam opt{{.learning_rate = 0.05, .global_clipnorm = 1.0}};
    Tensor step(const Tensor& x, const Tensor& y) {
      std::vector<Variable> vars;
      std::vector<Tensor> grads;
      Tensor loss;
      {
        kiln::GradientTape tape;
        loss = kiln::nn::losses::binary_crossentropy(y, model(x));
        vars = model.trainable_variables();
        grads = tape.gradient(loss, vars);
      }
      opt.apply(grads, vars);
      return loss;
    }
  };
  Trainer eager, traced;
  auto traced_step =
      kiln::function([&](const Tensor& x, const Tensor& y) { return traced.step(x, y); });
  const Tensor x = kiln::random::normal({6, 3, 2}, 0, 1, 3);
  const Tensor y = kiln::cast(kiln::random::uniform({6, 1}, 0, 1, 4) > 0.5f, kiln::f32);
  kiln::random::set_global_seed(9);
  const float first = traced_step(x, y).item<float>();
  kiln::random::set_global_seed(9);
  CHECK(eager.step(x, y).item<float>() == Approx(first).epsilon(1e-6));
  for (int i = 0; i < 5; ++i)
    CHECK(traced_step(x, y).item<float>() == Approx(eager.step(x, y).item<float>()).epsilon(1e-5));
  const auto we = eager.model.get_weights(), wt = traced.model.get_weights();
  REQUIRE(we.size() == wt.size());
  for (std::size_t i = 0; i < we.size(); ++i)
    CHECK(kiln::max(kiln::abs(we[i] - wt[i])).item<float>() < 1e-5f);
  CHECK(traced_step.tracing_count() == 1);
  CHECK(eager.opt.variables().size() == traced.opt.variables().size());
  kiln::random::set_global_seed(0);
}

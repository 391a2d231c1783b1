// kiln::optim: updates against hand-computed steps, slots (names, created once, dropped with
// their variable), schedules, clipping, eager against traced train steps, SGD updates folded
// into their gradients' GEMMs (in place, or on a copy when the old value is held).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <span>
#include <thread>

#include <kiln/kiln.hpp>

#include "kernels/streaming.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace optim = kiln::optim;

namespace {

std::vector<double> values_of(const Variable& v) {
  return kiln::cast(v.value(), kiln::f64).to_vector<double>();
}

void check_values(const Variable& v, const std::vector<double>& expected, double tol = 1e-6) {
  const auto got = values_of(v);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(v.name() << "[" << i << "]");
    CHECK(got[i] == Approx(expected[i]).margin(tol));
  }
}

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

namespace {

/// A traced SGD step on one weight w [features, units]: loss sum((x w) * dy), so w's gradient
/// is x^T dy, one GEMM, into which the compiled plan folds the update (fold_sgd_updates).
struct FoldedStep {
  Variable w;
  optim::SGD opt;
  using Step = std::function<Tensor(const Tensor&, const Tensor&)>;
  kiln::Function<Step> step;
  FoldedStep(const Tensor& initial, double rate)
      : w(initial, "w"),
        opt({.learning_rate = rate}),
        step(kiln::function(Step([this](const Tensor& x, const Tensor& dy) {
          std::vector<Tensor> grads;
          Tensor loss;
          {
            kiln::GradientTape tape;
            loss = kiln::sum(kiln::matmul(x, w.value()) * dy);
            grads = tape.gradient(loss, {w});
          }
          opt.apply(grads, {w});
          return loss;
        }))) {}
};

/// w - rate * x^T dy in f64.
std::vector<double> sgd_reference(const std::vector<double>& w, const Tensor& x, const Tensor& dy,
                                  double rate) {
  const auto xs = kiln::cast(x, kiln::f64).to_vector<double>();
  const auto ds = kiln::cast(dy, kiln::f64).to_vector<double>();
  const std::int64_t rows = x.shape()[0], features = x.shape()[1], units = dy.shape()[1];
  std::vector<double> out = w;
  for (std::int64_t i = 0; i < features; ++i)
    for (std::int64_t j = 0; j < units; ++j) {
      double g = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        g += xs[static_cast<std::size_t>(r * features + i)] *
             ds[static_cast<std::size_t>(r * units + j)];
      out[static_cast<std::size_t>(i * units + j)] -= rate * g;
    }
  return out;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double most = 0;
  for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

}  // namespace

TEST_CASE("SGD updates folded into the weight gradient's GEMM", "[nn][optim][function]") {
  kiln::clear_session();
  // [512, 512]: 2^18 elements, folded whichever backend plans the product.
  for (const kiln::DType dtype : {kiln::f32, kiln::f64}) {
    CAPTURE(kiln::dtype_name(dtype));
    const double tol = dtype == kiln::f32 ? 1e-5 : 1e-12;
    const Tensor x = kiln::cast(kiln::random::normal({16, 512}, 0, 1, 1), dtype);
    const Tensor dy = kiln::cast(kiln::random::normal({16, 512}, 0, 1, 2), dtype);
    FoldedStep t(kiln::cast(kiln::random::normal({512, 512}, 0, 1, 3), dtype), 0.1);
    std::vector<double> expected = values_of(t.w);

    SECTION("in place while only the variable holds its value") {
      for (int call = 0; call < 3; ++call) {
        const void* before = t.w.value().data();
        t.step(x, dy);
        expected = sgd_reference(expected, x, dy, 0.1);
        CHECK(max_difference(values_of(t.w), expected) < tol);
        if (call > 0) CHECK(t.w.value().data() == before);  // the first call built the plan
      }
    }
    SECTION("a value someone holds is left as it was") {
      t.step(x, dy);
      expected = sgd_reference(expected, x, dy, 0.1);
      const Tensor held = t.w.value();
      const std::vector<double> held_values = kiln::cast(held, kiln::f64).to_vector<double>();
      t.step(x, dy);
      expected = sgd_reference(expected, x, dy, 0.1);
      CHECK(kiln::cast(held, kiln::f64).to_vector<double>() == held_values);
      CHECK(t.w.value().data() != held.data());
      CHECK(max_difference(values_of(t.w), expected) < tol);
    }
    SECTION("the learning rate is read at each call") {
      t.step(x, dy);
      t.opt.set_learning_rate(0.5);
      t.step(x, dy);
      expected = sgd_reference(sgd_reference(expected, x, dy, 0.1), x, dy, 0.5);
      CHECK(max_difference(values_of(t.w), expected) < tol);
      CHECK(t.step.tracing_count() == 1);
    }
  }
  SECTION("a function that also returns the value it read gets the old value") {
    const Tensor x = kiln::random::normal({16, 512}, 0, 1, 4);
    const Tensor dy = kiln::random::normal({16, 512}, 0, 1, 5);
    Variable w(kiln::random::normal({512, 512}, 0, 1, 6), "w_returned");
    optim::SGD opt({.learning_rate = 0.1});
    auto step = kiln::function([&](const Tensor& xx, const Tensor& dd) {
      Tensor before;
      std::vector<Tensor> grads;
      {
        kiln::GradientTape tape;
        before = w.value();
        const Tensor loss = kiln::sum(kiln::matmul(xx, before) * dd);
        grads = tape.gradient(loss, {w});
      }
      opt.apply(grads, {w});
      return before;
    });
    for (int call = 0; call < 2; ++call) {
      const std::vector<double> old = values_of(w);
      const Tensor returned = step(x, dy);
      CHECK(kiln::cast(returned, kiln::f64).to_vector<double>() == old);
      CHECK(max_difference(values_of(w), sgd_reference(old, x, dy, 0.1)) < 1e-5);
    }
  }
}

namespace {

/// Whether every element of v is the same.
bool uniform(const Tensor& v) {
  const auto values = v.to_vector<float>();
  return std::all_of(values.begin(), values.end(), [&](float e) { return e == values[0]; });
}

/// Runs `call` `calls` times on each of two threads while a third reads the tensors `read`
/// returns; whether a reading ever found one of them not uniform (an update seen half done).
bool tears_values(const std::function<void()>& call,
                  const std::function<std::vector<Tensor>()>& read, int calls) {
  std::atomic<bool> torn{false};
  std::atomic<int> running{2};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&] {
      for (int c = 0; c < calls; ++c) call();
      --running;
    });
  threads.emplace_back([&] {
    while (running > 0)
      for (const Tensor& v : read())
        if (!uniform(v)) torn = true;
  });
  for (auto& th : threads) th.join();
  return torn;
}

}  // namespace

TEST_CASE("folded SGD updates from several threads never tear a variable's value",
          "[nn][optim][function][threads]") {
  kiln::clear_session();
  // x all ones and dy all 1/16 over 16 rows: every gradient element is exactly 1, so after k
  // updates at rate 1/4 every element of w is exactly -k/4, whichever calls overlap.
  const Tensor x = kiln::ones({16, 512});
  const Tensor dy = kiln::full({16, 512}, 1.0 / 16);
  FoldedStep t(kiln::zeros({512, 512}), 0.25);
  t.step(x, dy);
  constexpr int calls = 20;
  CHECK_FALSE(
      tears_values([&] { t.step(x, dy); }, [&] { return std::vector{t.w.value()}; }, calls));
  const auto final_values = t.w.value().to_vector<float>();
  REQUIRE(uniform(t.w.value()));
  const double k = -final_values[0] * 4;
  CHECK(k == std::round(k));
  CHECK(k >= 2);
  CHECK(k <= 1 + 2 * calls);
}

namespace {

/// One optimizer of each kind whose dense update is elementwise, as a factory (each call a fresh
/// optimizer, so traced and eager runs keep slots of their own).
struct OptimizerCase {
  const char* name;
  std::function<std::unique_ptr<optim::Optimizer>()> make;
  int intermediates = 0;  // values of the variable's size the update computes besides its results
};
std::vector<OptimizerCase> elementwise_optimizers() {
  return {
      {"sgd", [] { return std::make_unique<optim::SGD>(optim::SGDOptions{.learning_rate = 0.1}); }},
      {"momentum",
       [] {
         return std::make_unique<optim::SGD>(
             optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
       }},
      {"nesterov",
       [] {
         return std::make_unique<optim::SGD>(
             optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
       },
       1},  // rate * g, read by both updates
      {"adam",
       [] { return std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01}); }},
      {"rmsprop",
       [] {
         return std::make_unique<optim::RMSprop>(
             optim::RMSpropOptions{.learning_rate = 0.01, .momentum = 0.5});
       }},
      {"adagrad",
       [] {
         return std::make_unique<optim::Adagrad>(optim::AdagradOptions{.learning_rate = 0.1});
       }},
  };
}

/// The buffers of a variable and of its slots.
std::vector<const void*> buffers_of(const optim::Optimizer& opt, const Variable& w) {
  std::vector<const void*> out{w.value().data()};
  for (const std::string& slot : opt.slot_names()) out.push_back(opt.slot(w, slot).value().data());
  return out;
}

}  // namespace

/// Runs f with every kiln::function, and so every optimizer update, op by op.
template <class F>
void op_by_op(F&& f) {
  const bool was = kiln::functions_run_eagerly();
  kiln::run_functions_eagerly(true);
  struct Restore {
    bool was;
    ~Restore() { kiln::run_functions_eagerly(was); }
  } restore{was};
  f();
}

TEST_CASE("compiled optimizer updates write over the variables' values", "[nn][optim][function]") {
  // Traced inside a train step, and eagerly (where apply() compiles its update itself), each
  // against the update run op by op.
  // 34,390 elements: two chunks and a part of one for a group of fused steps (plan_groups.cpp),
  // which runs where the buffers are larger than the last-level cache (or than 4 KiB).
  constexpr std::int64_t value_bytes = 181 * 190 * 4;
  struct RestoreCacheBound {
    ~RestoreCacheBound() { kiln::detail::set_stream_output_bytes(0); }
  } restore_cache_bound;
  for (const OptimizerCase& c : elementwise_optimizers()) {
    for (const auto& [held_by_caller, cache_bytes] :
         {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 4096}, std::pair{true, 4096}}) {
      CAPTURE(c.name, held_by_caller, cache_bytes);
      kiln::detail::set_stream_output_bytes(cache_bytes);
      kiln::clear_session();
      const Tensor initial = kiln::random::normal({181, 190}, 0, 1, 1);
      Variable traced_w(initial, "traced_w"), eager_w(initial, "eager_w"), op_w(initial, "op_w");
      const auto traced_opt = c.make(), eager_opt = c.make(), op_opt = c.make();
      auto step = kiln::function([&](const Tensor& g) { traced_opt->apply({g}, {traced_w}); });
      const auto eager_step = [&](const Tensor& g) { eager_opt->apply({g}, {eager_w}); };
      std::vector<const void*> before[2];
      for (int call = 0; call < 4; ++call) {
        const Tensor g = kiln::random::normal({181, 190}, 0, 1, 10 + call);
        op_by_op([&] { op_opt->apply({g}, {op_w}); });
        int form = 0;
        for (const auto& [w, opt] :
             {std::pair{&traced_w, traced_opt.get()}, std::pair{&eager_w, eager_opt.get()}}) {
          CAPTURE(form);
          // A value the caller holds is left as it was, and the update goes to a new buffer.
          const Tensor held = held_by_caller ? w->value() : Tensor();
          const std::vector<float> held_values =
              held_by_caller ? held.to_vector<float>() : std::vector<float>{};
          const std::int64_t live = kiln::memory_stats().live_bytes;
          kiln::reset_peak_bytes();
          if (form == 0)
            step(g);
          else
            eager_step(g);
          const std::int64_t grown = kiln::memory_stats().peak_bytes - live;
          CHECK(kiln::max(kiln::abs(w->value() - op_w.value())).item<float>() <= 1e-6f);
          if (held_by_caller) {
            CHECK(held.to_vector<float>() == held_values);
            CHECK(w->value().data() != held.data());
          } else if (call > 0) {
            // After the first call (which traces and creates the slots) no variable or slot
            // gets a new buffer.
            CHECK(grown < value_bytes * (1 + c.intermediates));
            CHECK(buffers_of(*opt, *w) == before[form]);
          }
          before[form] = buffers_of(*opt, *w);
          ++form;
        }
      }
    }
  }
}

TEST_CASE("optimizer updates of several variables of every size agree with op by op",
          "[nn][optim][function]") {
  // Where loops are generated, each variable's update steps run as one loop with several
  // outputs (jit/plan_groups.cpp): sizes below a vector, with a tail, and a scalar.
  const std::vector<Shape> shapes = {{1}, {7}, {3, 7}, {33}, {5, 17}, {}};
  for (const OptimizerCase& c : elementwise_optimizers()) {
    CAPTURE(c.name);
    kiln::clear_session();
    std::vector<Variable> traced, op;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Tensor initial = kiln::random::normal(shapes[i], 0, 1, 1 + i);
      traced.emplace_back(initial, "traced" + std::to_string(i));
      op.emplace_back(initial, "op" + std::to_string(i));
    }
    const auto traced_opt = c.make(), op_opt = c.make();
    auto step = kiln::function([&](const std::vector<Tensor>& g) { traced_opt->apply(g, traced); });
    for (int call = 0; call < 3; ++call) {
      std::vector<Tensor> grads;
      for (std::size_t i = 0; i < shapes.size(); ++i)
        grads.push_back(kiln::random::normal(shapes[i], 0, 1, 100 * (call + 1) + i));
      const Tensor held = traced[2].value();  // a value held by the caller stays as it was
      const std::vector<float> held_values = held.to_vector<float>();
      step(grads);
      op_by_op([&] { op_opt->apply(grads, op); });
      CHECK(held.to_vector<float>() == held_values);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        CAPTURE(i, call);
        CHECK(kiln::max(kiln::abs(traced[i].value() - op[i].value())).item<float>() <= 1e-6f);
      }
    }
  }
}

namespace {
/// SGD whose step halves when a gradient holds a value above 1: it reads a value, so it cannot
/// be traced.
class ReadingSGD : public optim::Optimizer {
 public:
  ReadingSGD() : Optimizer("test.ReadingSGD", "reading_sgd", "", 1.0, {}, {}, {}) {}

 protected:
  void update(const Variable& var, const Tensor& grad, std::span<const Variable>,
              const Tensor& learning_rate, const Tensor&) override {
    const double scale = kiln::max(grad).item<float>() > 1 ? 0.5 : 1.0;
    var.assign_sub(grad * learning_rate * scale);
  }
};
}  // namespace

TEST_CASE("eager apply() compiles once per list of variables and holds none of them",
          "[nn][optim][function]") {
  kiln::clear_session();
  // Clipping, a schedule, two dtypes and a variable without a gradient: the same as op by op.
  const auto make = [] {
    return optim::Adam({.learning_rate = optim::schedules::exponential_decay(0.1, 2, 0.5),
                        .clipnorm = 1.0,
                        .global_clipnorm = 1.5});
  };
  std::vector<std::string> warnings;
  kiln::set_log_sink([&](const std::string& m) { warnings.push_back(m); });
  struct RestoreSink {
    ~RestoreSink() { kiln::set_log_sink(nullptr); }
  } restore_sink;
  optim::Adam compiled = make(), reference = make();
  const Tensor a0 = kiln::random::normal({5, 3}, 0, 1, 1), b0 = kiln::random::normal({4}, 0, 1, 2);
  Variable a(a0, "a"), b(kiln::cast(b0, kiln::f64), "b"), c(kiln::zeros({2}), "c");
  Variable ra(a0, "a"), rb(kiln::cast(b0, kiln::f64), "b"), rc(kiln::zeros({2}), "c");
  for (int call = 0; call < 3; ++call) {
    const Tensor ga = kiln::random::normal({5, 3}, 0, 2, 10 + call);
    const Tensor gb = kiln::cast(kiln::random::normal({4}, 0, 2, 20 + call), kiln::f64);
    compiled.apply({ga, gb, Tensor()}, {a, b, c});
    op_by_op([&] { reference.apply({ga, gb, Tensor()}, {ra, rb, rc}); });
    check_values(a, values_of(ra));
    check_values(b, values_of(rb), 1e-12);
    check_values(c, {0.0, 0.0});
    CHECK(compiled.iterations().value().item<std::int64_t>() == call + 1);
  }

  // A model rebuilt in a loop: its compiled update does not keep it alive.
  std::weak_ptr<kiln::detail::VariableImpl> last;
  for (int round = 0; round < 3; ++round) {
    Variable w(kiln::ones({256}), "model/w");
    compiled.apply({kiln::ones({256})}, {w});
    compiled.apply({kiln::ones({256})}, {w});
    CHECK(last.expired());
    last = w.impl();
  }
  CHECK(last.expired());

  // An update that reads values cannot be traced: it runs op by op, eagerly as before.
  CHECK(warnings.empty());  // Adam's update compiled
  ReadingSGD reading;
  Variable w(kiln::zeros({2}), "w");
  reading.apply({kiln::tensor({4.f, 2.f})}, {w});
  check_values(w, {-2.0, -1.0});
  reading.apply({kiln::tensor({0.5f, 1.f})}, {w});
  check_values(w, {-2.5, -2.0});
  REQUIRE(warnings.size() == 1);  // once for this list of variables
  CHECK_THAT(warnings[0], Catch::StartsWith("test.ReadingSGD: reading_sgd's update cannot be "
                                            "traced, so apply() runs it op by op"));
  // Under a recording tape the update runs op by op (the tape sees it), and a later apply()
  // of the same list still compiles.
  optim::SGD sgd({.learning_rate = 0.5});
  Variable u(kiln::ones({3}), "u");
  {
    kiln::GradientTape tape;
    sgd.apply({kiln::ones({3})}, {u});
  }
  sgd.apply({kiln::ones({3})}, {u});
  check_values(u, {0.0, 0.0, 0.0});
  CHECK(warnings.size() == 1);
  auto traced = kiln::function([&](const Tensor& g) { reading.apply({g}, {w}); });
  CHECK_THROWS_WITH(traced(kiln::ones({2})),
                    Catch::Contains("cannot read the value of a symbolic"));
}

TEST_CASE("in-place optimizer updates keep a call's values and its failures whole",
          "[nn][optim][function]") {
  kiln::clear_session();
  SECTION("steps after the update read the old value") {
    Variable w(kiln::random::normal({32, 16}, 0, 1, 1), "w_old_read");
    optim::Adam opt({.learning_rate = 0.1});
    auto step = kiln::function([&](const Tensor& g) {
      const Tensor before = w.value();
      opt.apply({g}, {w});
      return before * 2.0f + 1.0f;  // computed from the value read before the update
    });
    for (int call = 0; call < 3; ++call) {
      const std::vector<float> old = w.value().to_vector<float>();
      const std::vector<float> got = step(kiln::ones({32, 16})).to_vector<float>();
      for (std::size_t i = 0; i < old.size(); ++i) REQUIRE(got[i] == old[i] * 2.0f + 1.0f);
      CHECK(w.value().to_vector<float>() != old);
    }
  }
  SECTION("a step that reads the new value sees it, elementwise or not") {
    Variable w(kiln::random::normal({32, 16}, 0, 1, 3), "w_new_read");
    optim::SGD opt({.learning_rate = 0.5, .momentum = 0.9});
    auto step = kiln::function([&](const Tensor& g) {
      opt.apply({g}, {w});
      const Tensor after = w.value();  // the assigned value
      return std::vector<Tensor>{kiln::sum(after), after * 2.0f};
    });
    for (int call = 0; call < 3; ++call) {
      const std::vector<Tensor> got = step(kiln::full({32, 16}, 0.25 * (call + 1)));
      const Tensor now = w.value();
      CHECK(got[0].item<float>() == Approx(kiln::sum(now).item<float>()).epsilon(1e-5));
      CHECK((got[1].to_vector<float>() == (now * 2.0f).to_vector<float>()));
    }
  }
  SECTION("a long chain of diamonds after an update plans at once") {
    // y and z are each read twice, so neither fuses into the next step: every round is three
    // moved steps, and the update reaches the last one along 2^48 paths.
    Variable w(kiln::full({8, 8}, 0.5), "w_chain"), out(kiln::zeros({8, 8}), "w_chain_out");
    optim::SGD opt({.learning_rate = 0.125});
    const auto rounds = [](auto x) {
      for (int i = 0; i < 48; ++i) {
        const auto y = x * 0.5f, z = x + 0.25f;
        x = y * z + y - z;
      }
      return x;
    };
    auto step = kiln::function([&](const Tensor& g) {
      opt.apply({g}, {w});
      out.assign(rounds(w.value()));
    });
    step(kiln::ones({8, 8}));
    CHECK(w.value().to_vector<float>()[0] == 0.375f);
    CHECK(out.value().to_vector<float>()[0] == Approx(rounds(0.375f)).margin(1e-5));
  }
  SECTION("a call that fails changes no variable and no slot") {
    Variable w(kiln::random::normal({32, 16}, 0, 1, 2), "w_failing");
    optim::Adam opt({.learning_rate = 0.1});
    // The update is traced before the lookup, whose indices are checked when it runs.
    auto step = kiln::function([&](const Tensor& g, const Tensor& rows) {
      opt.apply({g}, {w});
      return kiln::gather(g, rows);
    });
    const Tensor g = kiln::ones({32, 16});
    step(g, kiln::tensor(std::vector<std::int64_t>{0, 1}, {2}));
    const std::vector<float> w_before = w.value().to_vector<float>();
    const std::vector<float> m_before = opt.slot(w, "m").value().to_vector<float>();
    const std::vector<float> v_before = opt.slot(w, "v").value().to_vector<float>();
    const std::int64_t iterations = opt.iterations().value().item<std::int64_t>();
    CHECK_THROWS_AS(step(g, kiln::tensor(std::vector<std::int64_t>{0, 40}, {2})), kiln::Error);
    CHECK(w.value().to_vector<float>() == w_before);
    CHECK(opt.slot(w, "m").value().to_vector<float>() == m_before);
    CHECK(opt.slot(w, "v").value().to_vector<float>() == v_before);
    CHECK(opt.iterations().value().item<std::int64_t>() == iterations);
    step(g, kiln::tensor(std::vector<std::int64_t>{2, 3}, {2}));
    CHECK(w.value().to_vector<float>() != w_before);
  }
}

TEST_CASE("in-place momentum updates from several threads never tear a variable's value",
          "[nn][optim][function][threads]") {
  kiln::clear_session();
  // Every element of w and of its momentum starts equal and gets the same gradient, so every
  // element stays equal to the others whichever calls overlap.
  Variable w(kiln::zeros({256, 512}), "w_threads");
  optim::SGD opt({.learning_rate = 0.25, .momentum = 0.5});
  auto step = kiln::function([&](const Tensor& g) { opt.apply({g}, {w}); });
  const Tensor g = kiln::ones({256, 512});
  step(g);
  CHECK_FALSE(tears_values([&] { step(g); },
                           [&] {
                             return std::vector{w.value(), opt.slot(w, "momentum").value()};
                           },
                           20));
  CHECK(uniform(w.value()));
  CHECK(w.value().to_vector<float>()[0] < 0);
}

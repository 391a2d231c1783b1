// Accumulator hoisting (lib/jit/accumulator_hoisting.cpp): a scan gradient's per-step sums of
// weight gradients, acc' = acc + transpose(h_t) @ dz_t, become one product after the loop, and
// the gradients stay those of the loop as written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <string>

#include <kiln/kiln.hpp>
#include <kiln/nn.hpp>

#include "graph_test_support.hpp"
#include "jit/graph.hpp"
#include "jit/passes.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::detail::GraphData;
using kiln::detail::Node;
using kiln::detail::Prim;
using Tensors = std::vector<Tensor>;

namespace {

// Large enough units that the stacked dz (batch x units per step) is smaller than U.
constexpr std::int64_t steps = 6, batch = 4, features = 8, units = 16;

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return kiln::max(kiln::abs(kiln::cast(a, kiln::f64) - kiln::cast(b, kiln::f64))).item<double>();
}

/// Loss of h' = tanh(x_t W + h U + b) over xs, then its gradients for h0, xs, W, U, b.
Tensors rnn_loss_and_grads(const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u,
                           const Tensor& b, bool reverse) {
  kiln::GradientTape tape({.persistent = true});
  for (const Tensor* t : {&h0, &xs, &w, &u, &b}) tape.watch(*t);
  auto [last, ys] = kiln::scan(
      [&](const Tensor& h, const Tensor& x) {
        Tensor next = kiln::tanh(kiln::matmul(x, w) + kiln::matmul(h, u) + b);
        return std::pair<Tensor, Tensor>{next, next};
      },
      h0, xs, {.reverse = reverse});
  const Tensor loss = kiln::sum(ys * ys) + kiln::sum(last * last);
  Tensors r{loss};
  for (const Tensor& g : tape.gradient(loss, {h0, xs, w, u, b})) r.push_back(g);
  return r;
}

Tensors rnn_arguments(std::uint64_t seed, std::int64_t t = steps) {
  return {kiln::random::normal({batch, units}, 0, 0.5, seed),
          kiln::random::normal({t, batch, features}, 0, 1, seed + 1),
          kiln::random::normal({features, units}, 0, 0.3, seed + 2),
          kiln::random::normal({units, units}, 0, 0.3, seed + 3),
          kiln::random::normal({units}, 0, 0.1, seed + 4)};
}

kiln::FunctionOptions with_pass(bool on) {
  kiln::FunctionOptions o;
  o.hoist_accumulators = on;
  return o;
}

/// Matmuls with result `shape` in listing (GraphData::to_string): inside scan bodies (lines
/// indented deeper than the top level's two spaces), or at the top level.
std::size_t matmuls_of_shape(const std::string& listing, const Shape& shape, bool in_body) {
  std::string type = "f32[";
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) type.push_back(',');
    type.append(std::to_string(shape[d]));
  }
  type += "] = matmul";
  std::size_t found = 0, line = 0;
  while (line < listing.size()) {
    const std::size_t end = std::min(listing.find('\n', line), listing.size());
    const std::string text = listing.substr(line, end - line);
    const bool nested = text.rfind("   ", 0) == 0;
    if (text.find(type) != std::string::npos && nested == in_body) ++found;
    line = end + 1;
  }
  return found;
}

std::size_t body_matmuls_of_shape(const std::string& listing, const Shape& shape) {
  return matmuls_of_shape(listing, shape, true);
}

}  // namespace

TEST_CASE("a scan RNN's weight gradients stay in the backward scan, which stacks nothing new",
          "[accumulator_hoisting]") {
  for (bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    const auto step = [reverse](const Tensor& h0, const Tensor& xs, const Tensor& w,
                                const Tensor& u, const Tensor& b) {
      return rnn_loss_and_grads(h0, xs, w, u, b, reverse);
    };
    auto hoisted = kiln::function(step, with_pass(true));
    auto plain = kiln::function(step, with_pass(false));
    const Tensors a = rnn_arguments(10);
    const Tensors r = hoisted(a[0], a[1], a[2], a[3], a[4]);
    const Tensors p = plain(a[0], a[1], a[2], a[3], a[4]);
    const Tensors e = step(a[0], a[1], a[2], a[3], a[4]);
    REQUIRE(r.size() == 6);
    for (std::size_t i = 0; i < r.size(); ++i) {
      INFO("result " << i);
      CHECK(max_diff(r[i], p[i]) <= 1e-4);
      CHECK(max_diff(r[i], e[i]) <= 1e-4);
    }
    const std::string g =
        hoisted.get_concrete_function(a[0], a[1], a[2], a[3], a[4]).graph().to_string();
    const std::string gp =
        plain.get_concrete_function(a[0], a[1], a[2], a[3], a[4]).graph().to_string();
    INFO(g);
    // The backward body computes h^T dz [units, units] and x^T dz [features, units] every
    // step. Hoisting them would stack dz over all steps, a value per step the backward scan
    // does not otherwise hold (it is traced under StepWorkStaysInside), so both stay. An LSTM's
    // dz is a y of its backward scan already: there they move (the nn::LSTM case below).
    CHECK(body_matmuls_of_shape(gp, {units, units}) == 1);
    CHECK(body_matmuls_of_shape(gp, {features, units}) == 1);
    CHECK(body_matmuls_of_shape(g, {units, units}) == 1);
    CHECK(body_matmuls_of_shape(g, {features, units}) == 1);
  }
}

TEST_CASE("accumulators are left alone when the stacked operands would cost more",
          "[accumulator_hoisting]") {
  // units 2, batch 4: dz [4, 2] per step outweighs U's 4 elements.
  const auto step = [](const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u,
                       const Tensor& b) { return rnn_loss_and_grads(h0, xs, w, u, b, false); };
  const std::vector<Shape> shapes{{batch, 2}, {steps, batch, 3}, {3, 2}, {2, 2}, {2}};
  GraphData g = kiln::test::record(
      shapes, [&](const Tensors& v) { return step(v[0], v[1], v[2], v[3], v[4]); });
  kiln::FunctionOptions o;
  o.hoist_accumulators = false;
  kiln::detail::run_graph_passes(g, o);
  CHECK(kiln::detail::hoist_accumulators(g) == 0);
}

TEST_CASE("a dynamic step count keeps the accumulators and one trace",
          "[accumulator_hoisting][dynamic]") {
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({batch, units}), kiln::TensorSpec({-1, batch, features}),
                       kiln::TensorSpec({features, units}), kiln::TensorSpec({units, units}),
                       kiln::TensorSpec({units})};
  const auto step = [](const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u,
                       const Tensor& b) { return rnn_loss_and_grads(h0, xs, w, u, b, false); };
  auto f = kiln::function(step, o);
  for (std::int64_t t : {1, 2, 7}) {
    INFO("T = " << t);
    const Tensors a = rnn_arguments(20, t);
    const Tensors r = f(a[0], a[1], a[2], a[3], a[4]);
    const Tensors e = step(a[0], a[1], a[2], a[3], a[4]);
    for (std::size_t i = 0; i < r.size(); ++i) CHECK(max_diff(r[i], e[i]) <= 1e-4);
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("a carried accumulator with saved residuals stays a carry", "[accumulator_hoisting]") {
  // The forward scan saves every carry for its gradient: the accumulator's parameter is
  // then also an output, so the forward scan keeps it; the gradient's own accumulators move.
  const auto step = [](const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u,
                       const Tensor& b) {
    kiln::GradientTape tape;
    for (const Tensor* t : {&h0, &w, &u}) tape.watch(*t);
    auto [last, ys] = kiln::scan(
        [&](const Tensors& c, const Tensors& x) {
          Tensor next = kiln::tanh(kiln::matmul(x[0], w) + kiln::matmul(c[0], u) + b);
          Tensor acc = c[1] + kiln::matmul(kiln::transpose(c[0]), next);
          return std::pair<Tensors, Tensors>{{next, acc}, {}};
        },
        {h0, kiln::zeros({units, units})}, {xs});
    const Tensor loss = kiln::sum(last[1] * last[1]) + kiln::sum(last[0]);
    Tensors r{loss, last[1]};
    for (const Tensor& g : tape.gradient(loss, {h0, w, u})) r.push_back(g);
    return r;
  };
  auto hoisted = kiln::function(step, with_pass(true));
  const Tensors a = rnn_arguments(30);
  const Tensors r = hoisted(a[0], a[1], a[2], a[3], a[4]);
  const Tensors e = step(a[0], a[1], a[2], a[3], a[4]);
  for (std::size_t i = 0; i < r.size(); ++i) {
    INFO("result " << i);
    CHECK(max_diff(r[i], e[i]) <= 1e-3 * (1 + kiln::max(kiln::abs(e[i])).item<float>()));
  }
  // Without a tape the same accumulator moves out: the forward scan saves no carries.
  const std::vector<Shape> shapes{
      {batch, units}, {steps, batch, features}, {features, units}, {units, units}, {units}};
  GraphData g = kiln::test::record(shapes, [](const Tensors& v) {
    auto [last, ys] = kiln::scan(
        [&](const Tensors& c, const Tensors& x) {
          Tensor next = kiln::tanh(kiln::matmul(x[0], v[2]) + kiln::matmul(c[0], v[3]) + v[4]);
          return std::pair<Tensors, Tensors>{
              {next, c[1] + kiln::matmul(kiln::transpose(c[0]), next)}, {}};
        },
        {v[0], kiln::zeros({units, units})}, {v[1]});
    return Tensors{last[0], last[1]};
  });
  kiln::detail::run_graph_passes(g, kiln::FunctionOptions{});
  INFO(g.to_string());
  CHECK(body_matmuls_of_shape(g.to_string(), {units, units}) == 0);
}

TEST_CASE("a traced nn::LSTM train step hoists its kernels' gradients",
          "[accumulator_hoisting][nn]") {
  constexpr std::int64_t lstm_units = 48;  // zeros of [48, 192]: a large constant
  kiln::clear_session();
  kiln::nn::LSTM lstm(lstm_units, {.fused = false});  // the scan form, whose body this is about
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 40);
  lstm(x);
  const auto grads = [&](const Tensor& xs) {
    kiln::GradientTape tape;
    tape.watch(xs);
    const Tensor out = lstm(xs);
    const Tensor loss = kiln::sum(out * out);
    std::vector<Tensor> sources{xs};
    for (const kiln::Variable& v : lstm.trainable_variables()) sources.push_back(v.value());
    Tensors r{loss};
    for (const Tensor& g : tape.gradient(loss, sources)) r.push_back(g);
    return r;
  };
  auto hoisted = kiln::function(grads, with_pass(true));
  auto plain = kiln::function(grads, with_pass(false));
  const Tensors r = hoisted(x), p = plain(x), e = grads(x);
  REQUIRE(r.size() == p.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    INFO("result " << i);
    CHECK(max_diff(r[i], p[i]) <= 1e-4);
    CHECK(max_diff(r[i], e[i]) <= 1e-4);
  }
  const std::string g = hoisted.get_concrete_function(x).graph().to_string();
  const std::string gp = plain.get_concrete_function(x).graph().to_string();
  INFO(g);
  CHECK(body_matmuls_of_shape(gp, {lstm_units, 4 * lstm_units}) >= 1);
  CHECK(body_matmuls_of_shape(g, {lstm_units, 4 * lstm_units}) == 0);
}

// Recurrent layers on kiln::scan: the scan form (the default) against the unrolled form
// (unroll = true) in values and gradients for every option, traced with dynamic batch and time
// dims (one trace, one graph size for every length), a traced train step against the eager one,
// SimpleRNN against a hand-written loop, stateful layers in both forms.
//
// Tolerances: both forms run the same ops per step in the same order, so they differ only by
// rounding (a GEMM over [time*batch] rows blocked differently from one over [batch*time] rows,
// fused elementwise kernels and FMA contraction inside traced graphs). The comparisons run in
// f64 at 1e-10 (absolute; every value compared is O(1), gradients O(10)), which a real difference
// in the math (a wrong gate, a step out of order, a missing term) exceeds by many orders of
// magnitude, and f32 at 1e-4 (f32's epsilon 1.2e-7 times a few hundred steps of accumulated
// rounding).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace nn = kiln::nn;

namespace {

using kiln::test::max_diff;
using kiln::test::names_of;
using kiln::test::weighted_loss;

void check_all_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("result " << i << " of " << got.size());
    CHECK(max_diff(got[i], want[i]) <= tol);
  }
}

kiln::FunctionOptions signature(std::vector<kiln::TensorSpec> specs) {
  return kiln::test::options_named("recurrent_scan_test", std::move(specs));
}

using kiln::test::GRUKind;
using kiln::test::LSTMKind;
using kiln::test::SimpleRNNKind;

/// The layer's outputs, then the gradients of weighted_loss with respect to its trainable
/// variables, x and each initial state tensor.
template <class L>
std::vector<Tensor> outputs_and_gradients(L& layer, const Tensor& x,
                                          const std::vector<Tensor>& init) {
  kiln::GradientTape tape({.persistent = true});
  tape.watch(x);
  for (const Tensor& s : init) tape.watch(s);
  std::vector<Tensor> result = layer.call(x, init);
  const Tensor loss = weighted_loss(result);
  for (const Tensor& g : tape.gradient(loss, layer.trainable_variables())) result.push_back(g);
  std::vector<Tensor> sources{x};
  sources.insert(sources.end(), init.begin(), init.end());
  for (const Tensor& g : tape.gradient(loss, sources)) result.push_back(g);
  return result;
}

struct Combo {
  bool return_sequences, go_backwards, initial_state;
};
std::vector<Combo> every_combo() {
  std::vector<Combo> out;
  for (bool seq : {false, true})
    for (bool back : {false, true})
      for (bool init : {false, true}) out.push_back({seq, back, init});
  return out;
}

/// A scan layer and an unrolled one with the same weights, built on x.
template <class K>
struct FormPair {
  typename K::Layer scan, unrolled;
  FormPair(std::int64_t units, typename K::Options options, const Tensor& x)
      : scan(units, with_unroll(options, false)), unrolled(units, with_unroll(options, true)) {
    scan.call(x);
    unrolled.call(x);
    unrolled.set_weights(scan.get_weights());
  }
  static typename K::Options with_unroll(typename K::Options o, bool unroll) {
    o.unroll = unroll;
    return o;
  }
};

template <class K>
typename K::Options options_for(const Combo& c) {
  typename K::Options o;
  o.return_sequences = c.return_sequences;
  o.return_state = true;
  o.go_backwards = c.go_backwards;
  return o;
}

std::vector<Tensor> random_state(std::size_t n, std::int64_t batch, std::int64_t units,
                                 kiln::DType dtype, std::uint64_t seed) {
  std::vector<Tensor> s;
  for (std::size_t i = 0; i < n; ++i)
    s.push_back(kiln::random::normal({batch, units}, 0, 1, seed + i, dtype));
  return s;
}

/// Eager scan form == eager unrolled form, and the traced scan form == the eager unrolled form
/// (gradients taken inside the function), for every option combination.
template <class K>
void check_forms_agree(kiln::DType dtype, double tol) {
  constexpr std::int64_t batch = 3, steps = 6, features = 4, units = 5;
  for (const Combo& c : every_combo()) {
    kiln::clear_session();
    INFO(K::name << " return_sequences " << c.return_sequences << " go_backwards " << c.go_backwards
                 << " initial_state " << c.initial_state << " dtype " << kiln::dtype_name(dtype));
    const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 50, dtype);
    FormPair<K> pair(units, options_for<K>(c), x);
    const std::vector<Tensor> init =
        c.initial_state ? random_state(K::states, batch, units, dtype, 60) : std::vector<Tensor>{};
    const std::vector<Tensor> want = outputs_and_gradients(pair.unrolled, x, init);
    // outputs (1 + states), gradients (3 variables, x, the initial states)
    REQUIRE(want.size() == 1 + K::states + 3 + 1 + init.size());
    CHECK(want[0].shape() ==
          (c.return_sequences ? Shape{batch, steps, units} : Shape{batch, units}));
    check_all_close(outputs_and_gradients(pair.scan, x, init), want, tol);

    auto traced = kiln::function(
        [&](const Tensor& in, const std::vector<Tensor>& s) {
          return outputs_and_gradients(pair.scan, in, s);
        },
        {.name = "forms"});
    check_all_close(traced(x, init), want, tol);
    CHECK(traced.tracing_count() == 1);
  }
}

}  // namespace

TEST_CASE("scan and unrolled forms agree in outputs, states and gradients, every option",
          "[recurrent_scan][nn]") {
  SECTION("LSTM") {
    check_forms_agree<LSTMKind>(kiln::f64, 1e-10);
    check_forms_agree<LSTMKind>(kiln::f32, 1e-4);
  }
  SECTION("GRU") {
    check_forms_agree<GRUKind>(kiln::f64, 1e-10);
    check_forms_agree<GRUKind>(kiln::f32, 1e-4);
  }
  SECTION("SimpleRNN") {
    check_forms_agree<SimpleRNNKind>(kiln::f64, 1e-10);
    check_forms_agree<SimpleRNNKind>(kiln::f32, 1e-4);
  }
}

TEST_CASE("return_state off returns the output alone, the same in both forms",
          "[recurrent_scan][nn]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({2, 4, 3}, 0, 1, 70);
  nn::LSTM lstm(4, {.return_sequences = true});
  nn::LSTM lstm_unrolled(4, {.return_sequences = true, .unroll = true});
  nn::GRU gru(4);
  nn::GRU gru_unrolled(4, {.unroll = true});
  nn::SimpleRNN rnn(4, {.go_backwards = true});
  nn::SimpleRNN rnn_unrolled(4, {.go_backwards = true, .unroll = true});
  for (nn::Layer* layer : std::initializer_list<nn::Layer*>{&lstm, &lstm_unrolled, &gru,
                                                            &gru_unrolled, &rnn, &rnn_unrolled})
    (*layer)(x);
  lstm_unrolled.set_weights(lstm.get_weights());
  gru_unrolled.set_weights(gru.get_weights());
  rnn_unrolled.set_weights(rnn.get_weights());
  REQUIRE(lstm.call(x).size() == 1);
  REQUIRE(gru.call(x).size() == 1);
  REQUIRE(rnn.call(x).size() == 1);
  CHECK(max_diff(lstm(x), lstm_unrolled(x)) < 1e-5);
  CHECK(max_diff(gru(x), gru_unrolled(x)) < 1e-5);
  CHECK(max_diff(rnn(x), rnn_unrolled(x)) < 1e-5);
  CHECK(lstm(x).shape() == Shape{2, 4, 4});
  CHECK(gru(x).shape() == Shape{2, 4});
}

namespace {

/// A traced call with dynamic batch and time: T in {1, 5, 50, 200} (and a batch that changes)
/// gives the eager results with one trace and the same graph for every length.
template <class K>
void check_dynamic_time(typename K::Options options) {
  kiln::clear_session();
  constexpr std::int64_t features = 3, units = 6;
  typename K::Layer layer(units, options);
  layer.call(kiln::random::normal({2, 3, features}, 0, 1, 80));  // builds it
  auto f = kiln::function([&](const Tensor& x) { return layer.call(x); },
                          signature({kiln::TensorSpec({-1, -1, features})}));
  std::vector<std::size_t> nodes;
  const std::pair<std::int64_t, std::int64_t> sizes[] = {{2, 1}, {3, 5}, {1, 50}, {4, 200}};
  for (const auto& [batch, steps] : sizes) {
    INFO(K::name << " batch " << batch << " time " << steps);
    const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1,
                                          81 + static_cast<std::uint64_t>(steps));
    const std::vector<Tensor> traced = f(x);
    const std::vector<Tensor> eager = layer.call(x);
    REQUIRE(traced.size() == eager.size());
    CHECK(traced[0].shape() ==
          (options.return_sequences ? Shape{batch, steps, units} : Shape{batch, units}));
    check_all_close(traced, eager, 1e-5);
    nodes.push_back(f.get_concrete_function(x).graph().num_nodes());
  }
  CHECK(f.tracing_count() == 1);
  for (std::size_t n : nodes) CHECK(n == nodes.front());
  CHECK(nodes.front() < 40);  // no step is unrolled
}

}  // namespace

TEST_CASE("traced with dynamic batch and time: one trace, one graph size for every length",
          "[recurrent_scan][nn][function]") {
  for (bool seq : {false, true})
    for (bool back : {false, true}) {
      INFO("return_sequences " << seq << " go_backwards " << back);
      check_dynamic_time<LSTMKind>(
          {.return_sequences = seq, .return_state = true, .go_backwards = back});
      check_dynamic_time<GRUKind>(
          {.return_sequences = seq, .return_state = true, .go_backwards = back});
      check_dynamic_time<SimpleRNNKind>(
          {.return_sequences = seq, .return_state = true, .go_backwards = back});
    }
  // A dynamic time dim of 0 gives the initial state and an empty sequence.
  {
    kiln::clear_session();
    nn::LSTM lstm(3, {.return_sequences = true, .return_state = true});
    auto f = kiln::function(
        [&](const Tensor& x, const Tensor& h, const Tensor& c) {
          return lstm.call(x, {h, c});
        },
        signature(
            {kiln::TensorSpec({-1, -1, 2}), kiln::TensorSpec({-1, 3}), kiln::TensorSpec({-1, 3})}));
    lstm.call(kiln::ones({4, 2, 2}));
    const std::vector<Tensor> init = random_state(2, 4, 3, kiln::f32, 95);
    const std::vector<Tensor> out = f(kiln::ones({4, 0, 2}), init[0], init[1]);
    REQUIRE(out.size() == 3);
    CHECK(out[0].shape() == Shape{4, 0, 3});
    CHECK(max_diff(out[1], init[0]) == 0);
    CHECK(max_diff(out[2], init[1]) == 0);
  }
  // The unrolled form still needs a static time dim, and says so naming the layer.
  kiln::clear_session();
  nn::GRU gru(3, {.unroll = true});
  nn::SimpleRNN rnn(3, {.unroll = true});
  auto f = kiln::function([&](const Tensor& x) { return gru(x); },
                          signature({kiln::TensorSpec({2, -1, 4})}));
  CHECK_THROWS_WITH(f(kiln::ones({2, 5, 4})),
                    Catch::Contains("[nn.GRU] gru: the time dim of [2,?0,4] is dynamic; with "
                                    "unroll = true the layer unrolls over time steps"));
  auto g = kiln::function([&](const Tensor& x) { return rnn(x); },
                          signature({kiln::TensorSpec({2, -1, 4})}));
  CHECK_THROWS_WITH(g(kiln::ones({2, 5, 4})),
                    Catch::Contains("[nn.SimpleRNN] simple_rnn: the time dim of [2,?0,4] is "
                                    "dynamic"));
}

TEST_CASE("a dynamic-length initial state and gradients trace once for every length",
          "[recurrent_scan][nn][function]") {
  kiln::clear_session();
  constexpr std::int64_t features = 3, units = 4;
  FormPair<LSTMKind> pair(units,
                          {.return_sequences = true, .return_state = true, .go_backwards = true},
                          kiln::random::normal({2, 3, features}, 0, 1, 90));
  auto f = kiln::function(
      [&](const Tensor& x, const Tensor& h, const Tensor& c) {
        return outputs_and_gradients(pair.scan, x, {h, c});
      },
      signature({kiln::TensorSpec({-1, -1, features}), kiln::TensorSpec({-1, units}),
                 kiln::TensorSpec({-1, units})}));
  for (std::int64_t steps : {1, 5, 50}) {
    INFO("time " << steps);
    const Tensor x = kiln::random::normal({3, steps, features}, 0, 1, 91);
    const std::vector<Tensor> init = random_state(2, 3, units, kiln::f32, 92);
    check_all_close(f(x, init[0], init[1]), outputs_and_gradients(pair.unrolled, x, init), 1e-4);
  }
  CHECK(f.tracing_count() == 1);
}

namespace {

/// LSTM(8) over the sequence, then Dense(1): the model of the train-step test.
struct SeqNet : kiln::Module {
  nn::LSTM lstm;
  nn::Dense out{1};
  explicit SeqNet(bool unroll) : Module("net"), lstm(8, {.unroll = unroll}) {
    add_module("lstm", lstm);
    add_module("out", out);
  }
  Tensor operator()(const Tensor& x) { return out(lstm(x)); }
};

Tensor train_step(SeqNet& net, kiln::optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  std::vector<Variable> vars;
  std::vector<Tensor> grads;
  Tensor loss;
  {
    kiln::GradientTape tape;
    loss = nn::losses::mean_squared_error(y, net(x));
    vars = net.trainable_variables();
    grads = tape.gradient(loss, vars);
  }
  opt.apply(grads, vars);
  return loss;
}

}  // namespace

TEST_CASE("a traced train step on the scan LSTM matches the eager step", "[recurrent_scan][nn]") {
  kiln::clear_session();
  const Tensor x0 = kiln::random::normal({4, 6, 3}, 0, 1, 100);
  SeqNet traced_net(false), eager_net(false), unrolled_net(true);
  for (SeqNet* net : {&traced_net, &eager_net, &unrolled_net}) (*net)(x0);
  eager_net.set_weights(traced_net.get_weights());
  unrolled_net.set_weights(traced_net.get_weights());
  kiln::optim::Adam traced_opt({.learning_rate = 1e-2}), eager_opt({.learning_rate = 1e-2}),
      unrolled_opt({.learning_rate = 1e-2});
  auto step = kiln::function(
      [&](const Tensor& x, const Tensor& y) { return train_step(traced_net, traced_opt, x, y); },
      signature({kiln::TensorSpec({-1, -1, 3}), kiln::TensorSpec({-1, 1})}));
  std::vector<float> losses;
  for (int i = 0; i < 4; ++i) {
    INFO("step " << i);
    // Batch and time never equal: equal dynamic sizes would be a new equality pattern (a retrace).
    const std::int64_t steps = 3 + 2 * i, batch = 10 + i;
    const Tensor x =
        kiln::random::normal({batch, steps, 3}, 0, 1, 101 + static_cast<std::uint64_t>(i));
    const Tensor y = kiln::random::normal({batch, 1}, 0, 1, 111 + static_cast<std::uint64_t>(i));
    const float traced_loss = step(x, y).item<float>();
    const float eager_loss = train_step(eager_net, eager_opt, x, y).item<float>();
    const float unrolled_loss = train_step(unrolled_net, unrolled_opt, x, y).item<float>();
    CHECK(traced_loss == Approx(eager_loss).epsilon(1e-5));
    CHECK(unrolled_loss == Approx(eager_loss).epsilon(1e-5));
    check_all_close(traced_net.get_weights(), eager_net.get_weights(), 1e-5);
    check_all_close(unrolled_net.get_weights(), eager_net.get_weights(), 1e-5);
    losses.push_back(traced_loss);
  }
  CHECK(step.tracing_count() == 1);
  // The losses are not all equal (the steps did something) and Adam counted four updates.
  CHECK(losses.front() != losses.back());
  CHECK(traced_opt.iterations().value().item<std::int64_t>() == 4);
}

TEST_CASE("SimpleRNN: Keras layout and a hand-written loop", "[recurrent_scan][nn]") {
  kiln::clear_session();
  constexpr std::int64_t batch = 2, steps = 5, features = 3, units = 4;
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 120);
  nn::SimpleRNN rnn(units, {.return_sequences = true,
                            .return_state = true,
                            .bias_initializer = kiln::init::random_normal(0, 1, 121)});
  const std::vector<Tensor> out = rnn.call(x);
  REQUIRE(out.size() == 2);
  CHECK(rnn.name() == "simple_rnn");
  CHECK(names_of(rnn.variables()) == std::vector<std::string>{"simple_rnn/kernel",
                                                              "simple_rnn/recurrent_kernel",
                                                              "simple_rnn/bias"});
  CHECK(rnn.kernel().shape() == Shape{features, units});
  CHECK(rnn.recurrent_kernel().shape() == Shape{units, units});
  CHECK(rnn.bias().shape() == Shape{units});
  CHECK(rnn.units() == units);

  // The reference, element by element from the weights' values.
  const std::vector<float> k = rnn.kernel().value().to_vector<float>();
  const std::vector<float> r = rnn.recurrent_kernel().value().to_vector<float>();
  const std::vector<float> b = rnn.bias().value().to_vector<float>();
  const std::vector<float> xv = x.to_vector<float>();
  const auto reference = [&](std::vector<float> h, bool backwards, float (*act)(float)) {
    std::vector<float> seq;  // [steps][batch][units] in processing order
    for (std::int64_t kstep = 0; kstep < steps; ++kstep) {
      const std::int64_t t = backwards ? steps - 1 - kstep : kstep;
      std::vector<float> next(batch * units);
      for (std::int64_t i = 0; i < batch; ++i)
        for (std::int64_t u = 0; u < units; ++u) {
          double z = b[u];
          for (std::int64_t f = 0; f < features; ++f)
            z += double(xv[(i * steps + t) * features + f]) * k[f * units + u];
          for (std::int64_t v = 0; v < units; ++v) z += double(h[i * units + v]) * r[v * units + u];
          next[i * units + u] = act(static_cast<float>(z));
        }
      h = next;
      seq.insert(seq.end(), h.begin(), h.end());
    }
    std::vector<float> bt(seq.size());  // to [batch][steps][units]
    for (std::int64_t s = 0; s < steps; ++s)
      for (std::int64_t i = 0; i < batch; ++i)
        for (std::int64_t u = 0; u < units; ++u)
          bt[(i * steps + s) * units + u] = seq[(s * batch + i) * units + u];
    return std::pair{kiln::tensor(bt, {batch, steps, units}), kiln::tensor(h, {batch, units})};
  };
  const auto tanh_f = [](float v) { return std::tanh(v); };
  const auto relu_f = [](float v) { return v > 0 ? v : 0.f; };
  const std::vector<float> zero(batch * units, 0.f);
  {
    const auto [seq, h] = reference(zero, false, tanh_f);
    CHECK(max_diff(out[0], seq) < 1e-5);
    CHECK(max_diff(out[1], h) < 1e-5);
  }
  // Initial state, go_backwards, another activation; both forms.
  const Tensor h0 = kiln::random::normal({batch, units}, 0, 1, 122);
  for (bool unroll : {false, true}) {
    INFO("unroll " << unroll);
    nn::SimpleRNN back(units, {.activation = nn::Activation::relu,
                               .return_sequences = true,
                               .return_state = true,
                               .go_backwards = true,
                               .unroll = unroll});
    back(x);
    back.set_weights(rnn.get_weights());
    const auto got = back.call(x, {h0});
    const auto [seq, h] = reference(h0.to_vector<float>(), true, relu_f);
    CHECK(max_diff(got[0], seq) < 1e-5);
    CHECK(max_diff(got[1], h) < 1e-5);
    nn::SimpleRNN last(units, {.unroll = unroll});
    last(x);
    last.set_weights(rnn.get_weights());
    CHECK(max_diff(last(x), reference(zero, false, tanh_f).second) < 1e-5);
  }

  // Errors name the layer.
  CHECK_THROWS_WITH(rnn(kiln::ones({2, 3})),
                    "[nn.SimpleRNN] simple_rnn: needs inputs of rank >= 3, got f32 [2,3]");
  CHECK_THROWS_WITH(rnn(kiln::ones({2, 1, 5, 3})),
                    "[nn.SimpleRNN] simple_rnn: needs [batch, time, features] inputs, got f32 "
                    "[2,1,5,3]");
  CHECK_THROWS_WITH(rnn(kiln::ones({2, 5, 7})),
                    Catch::StartsWith("[nn.SimpleRNN] simple_rnn was built for f32 inputs with "
                                      "last dim 3"));
  CHECK_THROWS_WITH(rnn(kiln::ones({2, 0, 3})),
                    "[nn.SimpleRNN] simple_rnn: the input [2,0,3] has no time steps");
  CHECK_THROWS_WITH(rnn.call(x, {h0, h0}),
                    "[nn.SimpleRNN] simple_rnn: initial_state must be {h}, got 2 tensors");
  CHECK_THROWS_WITH(rnn.call(x, {kiln::zeros({3, units})}),
                    "[nn.SimpleRNN] simple_rnn: the initial h must be f32 [2,4], got f32 [3,4]");
  CHECK_THROWS_WITH(nn::SimpleRNN(0), "[nn.SimpleRNN] simple_rnn: units must be positive, got 0");
}

TEST_CASE("LSTM and GRU scan forms follow the Keras equations step by step",
          "[recurrent_scan][nn]") {
  kiln::clear_session();
  constexpr std::int64_t batch = 2, steps = 4, features = 3, units = 5;
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 150);
  const auto step_at = [&](std::int64_t t) {
    return kiln::squeeze(kiln::slice(x, 1, t, t + 1), {1});
  };
  const auto part = [](const Tensor& t, std::int64_t k) {
    return kiln::slice(t, 1, k * units, (k + 1) * units);
  };
  const Tensor h0 = kiln::random::normal({batch, units}, 0, 1, 151);
  const Tensor c0 = kiln::random::normal({batch, units}, 0, 1, 152);

  nn::LSTM lstm(units, {.return_sequences = true,
                        .return_state = true,
                        .go_backwards = true,
                        .bias_initializer = kiln::init::random_normal(0, 1, 153)});
  const auto lstm_out = lstm.call(x, {h0, c0});
  {
    const Tensor k = lstm.kernel().value(), r = lstm.recurrent_kernel().value(),
                 b = lstm.bias().value();
    Tensor h = h0, c = c0;
    std::vector<Tensor> hs;
    for (std::int64_t t = steps - 1; t >= 0; --t) {
      const Tensor z = kiln::matmul(step_at(t), k) + kiln::matmul(h, r) + b;
      c = kiln::sigmoid(part(z, 1)) * c + kiln::sigmoid(part(z, 0)) * kiln::tanh(part(z, 2));
      h = kiln::sigmoid(part(z, 3)) * kiln::tanh(c);
      hs.push_back(h);
    }
    CHECK(max_diff(lstm_out[0], kiln::stack(hs, 1)) < 1e-5);
    CHECK(max_diff(lstm_out[1], h) < 1e-5);
    CHECK(max_diff(lstm_out[2], c) < 1e-5);
  }

  nn::GRU gru(units, {.return_sequences = true,
                      .return_state = true,
                      .bias_initializer = kiln::init::random_normal(0, 1, 154)});
  const auto gru_out = gru.call(x, {h0});
  {
    const Tensor k = gru.kernel().value(), r = gru.recurrent_kernel().value();
    const Tensor bx = kiln::squeeze(kiln::slice(gru.bias().value(), 0, 0, 1), {0});
    const Tensor bh = kiln::squeeze(kiln::slice(gru.bias().value(), 0, 1, 2), {0});
    Tensor h = h0;
    std::vector<Tensor> hs;
    for (std::int64_t t = 0; t < steps; ++t) {
      const Tensor xp = kiln::matmul(step_at(t), k) + bx, hp = kiln::matmul(h, r) + bh;
      const Tensor z = kiln::sigmoid(part(xp, 0) + part(hp, 0));
      const Tensor rg = kiln::sigmoid(part(xp, 1) + part(hp, 1));
      const Tensor n = kiln::tanh(part(xp, 2) + rg * part(hp, 2));
      h = z * h + (1.f - z) * n;
      hs.push_back(h);
    }
    CHECK(max_diff(gru_out[0], kiln::stack(hs, 1)) < 1e-5);
    CHECK(max_diff(gru_out[1], h) < 1e-5);
  }
}

TEST_CASE("the recurrent layers reject inputs that are not [batch, time, features]",
          "[recurrent_scan][nn]") {
  kiln::clear_session();
  nn::LSTM lstm(2);
  nn::GRU gru(2);
  const Tensor four_d = kiln::ones({2, 3, 4, 5});
  CHECK_THROWS_WITH(lstm(four_d),
                    "[nn.LSTM] lstm: needs [batch, time, features] inputs, got f32 [2,3,4,5]");
  CHECK_THROWS_WITH(gru(four_d),
                    "[nn.GRU] gru: needs [batch, time, features] inputs, got f32 [2,3,4,5]");
  CHECK_THROWS_WITH(gru(kiln::ones({2, 3, 4}, kiln::i32)),
                    "[nn.GRU] gru: needs f32 or f64 inputs, got i32 [2,3,4]");
  CHECK_THROWS_WITH(lstm.call(kiln::ones({2, 3, 4}), {kiln::zeros({2, 2})}),
                    "[nn.LSTM] lstm: initial_state must be {h, c}, got 1 tensors");
}

TEST_CASE("SimpleRNN in Sequential: names, weights, save and load", "[recurrent_scan][nn]") {
  kiln::clear_session();
  nn::Sequential model({nn::SimpleRNN(5, {.return_sequences = true}), nn::GRU(4), nn::Dense(1)});
  const Tensor x = kiln::random::normal({3, 7, 2}, 0, 1, 130);
  const Tensor y = model(x);
  CHECK(y.shape() == Shape{3, 1});
  CHECK(names_of(model.variables()) ==
        std::vector<std::string>{"sequential/simple_rnn/kernel",
                                 "sequential/simple_rnn/recurrent_kernel",
                                 "sequential/simple_rnn/bias", "sequential/gru/kernel",
                                 "sequential/gru/recurrent_kernel", "sequential/gru/bias",
                                 "sequential/dense/kernel", "sequential/dense/bias"});
  const auto path =
      std::filesystem::temp_directory_path() / "kiln_recurrent_scan_weights.safetensors";
  kiln::save_weights(model, path);
  kiln::clear_session();
  nn::Sequential copy(
      {nn::SimpleRNN(5, {.return_sequences = true, .unroll = true}), nn::GRU(4), nn::Dense(1)});
  copy(x);
  kiln::load_weights(copy, path);
  std::filesystem::remove(path);
  CHECK(max_diff(copy(x), y) < 1e-5);
}

namespace {

/// A stateful layer fed a sequence in two halves gives the whole sequence's result; traced calls
/// carry the state too; reset_states zeroes it.
template <class K>
void check_stateful(bool unroll) {
  kiln::clear_session();
  INFO(K::name << " unroll " << unroll);
  constexpr std::int64_t units = 4;
  const Tensor x = kiln::random::normal({2, 6, 3}, 0, 1, 140);
  const Tensor first = kiln::slice(x, 1, 0, 3), second = kiln::slice(x, 1, 3, 6);
  typename K::Options whole_options, stateful_options;
  whole_options.unroll = !unroll;  // the reference runs in the other form
  stateful_options.stateful = true;
  stateful_options.unroll = unroll;
  typename K::Layer whole(units, whole_options), stateful(units, stateful_options);
  const Tensor all_at_once = whole(x);
  stateful(first);  // builds the weights and the state
  std::vector<Tensor> weights = whole.get_weights();
  for (std::size_t i = 0; i < K::states; ++i) weights.push_back(kiln::zeros({2, units}));
  stateful.set_weights(weights);
  CHECK(stateful.non_trainable_variables().size() == K::states);
  stateful(first);
  CHECK(max_diff(stateful(second), all_at_once) < 1e-5);
  stateful.reset_states();
  for (const Variable& v : stateful.non_trainable_variables())
    CHECK(kiln::max(kiln::abs(v.value())).item<float>() == 0.f);
  CHECK(max_diff(stateful(first), whole(first)) < 1e-6);

  // Traced: each call reads the carried state and assigns the new one.
  stateful.reset_states();
  auto f = kiln::function([&](const Tensor& in) { return stateful(in); },
                          signature({kiln::TensorSpec({2, unroll ? 3 : -1, 3})}));
  f(first);
  CHECK(max_diff(f(second), all_at_once) < 1e-5);
  stateful.reset_states();
  CHECK(max_diff(f(first), whole(first)) < 1e-6);
  CHECK(f.tracing_count() == 1);
  CHECK_THROWS_WITH(stateful(kiln::ones({3, 3, 3})),
                    Catch::EndsWith("is stateful and was built for batch 2; called with batch 3"));
}

}  // namespace

TEST_CASE("stateful layers keep their state across calls in both forms; reset_states zeroes it",
          "[recurrent_scan][nn]") {
  for (bool unroll : {false, true}) {
    check_stateful<LSTMKind>(unroll);
    check_stateful<GRUKind>(unroll);
    check_stateful<SimpleRNNKind>(unroll);
  }
}

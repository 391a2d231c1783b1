// kiln::nn layers: lazy building, shapes and values against references computed with kiln ops
// from the layers' own variables, gradients against finite differences, Dropout's randomness
// in cached graphs, Sequential.
#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace nn = kiln::nn;

namespace {

using kiln::test::max_diff;
using kiln::test::names_of;

kiln::FunctionOptions dynamic_batch(std::vector<kiln::TensorSpec> specs) {
  return kiln::test::options_named("layers_test", std::move(specs));
}

/// d loss / d v by central differences, one element at a time (v must be f64).
Tensor numeric_gradient(const Variable& v, const std::function<Tensor()>& loss, double h = 1e-6) {
  const Tensor original = v.value();
  std::vector<double> values = original.to_vector<double>();
  std::vector<double> grad(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double keep = values[i];
    values[i] = keep + h;
    v.assign(kiln::tensor(values, original.shape()));
    const double up = loss().item<double>();
    values[i] = keep - h;
    v.assign(kiln::tensor(values, original.shape()));
    const double down = loss().item<double>();
    values[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  v.assign(original);
  return kiln::tensor(grad, original.shape());
}

/// Checks the tape's gradient of loss() with respect to every variable against finite
/// differences.
void check_gradients(const std::vector<Variable>& vars, const std::function<Tensor()>& loss) {
  std::vector<Tensor> analytic;
  {
    kiln::GradientTape tape;
    analytic = tape.gradient(loss(), vars);
  }
  for (std::size_t i = 0; i < vars.size(); ++i) {
    INFO(vars[i].name());
    CHECK(max_diff(analytic[i], numeric_gradient(vars[i], loss)) < 1e-6);
  }
}

// The LSTM step of the Keras formulation, from the weights (the reference the layers must match).
std::pair<Tensor, Tensor> lstm_step_reference(const Tensor& x, const Tensor& h, const Tensor& c,
                                              const Tensor& kernel, const Tensor& recurrent,
                                              const Tensor& bias, std::int64_t units) {
  const Tensor z = kiln::matmul(x, kernel) + kiln::matmul(h, recurrent) + bias;
  const auto gate = [&](int k) { return kiln::slice(z, 1, k * units, (k + 1) * units); };
  const Tensor i = kiln::sigmoid(gate(0)), f = kiln::sigmoid(gate(1)), g = kiln::tanh(gate(2)),
               o = kiln::sigmoid(gate(3));
  const Tensor c_new = f * c + i * g;
  return {o * kiln::tanh(c_new), c_new};
}

}  // namespace

TEST_CASE("Dense builds lazily from the input's last dim and computes act(x @ W + b)",
          "[nn][layers]") {
  kiln::clear_session();
  nn::Dense dense(3, nn::Activation::tanh);
  CHECK(dense.name() == "dense");
  CHECK(dense.variables().empty());
  const Tensor x = kiln::random::normal({4, 5}, 0, 1, 1);
  const Tensor y = dense(x);
  CHECK(y.shape() == Shape{4, 3});
  CHECK(names_of(dense.variables()) == std::vector<std::string>{"dense/kernel", "dense/bias"});
  CHECK(dense.kernel().shape() == Shape{5, 3});
  CHECK(max_diff(y, kiln::tanh(kiln::matmul(x, dense.kernel().value()) + dense.bias().value())) <
        1e-6);
  CHECK(kiln::all(kiln::equal(dense.bias().value(), kiln::zeros({3}))).item<bool>());

  // Any rank: the kernel applies to the last axis.
  const Tensor seq = kiln::random::normal({2, 7, 5}, 0, 1, 2);
  CHECK(dense(seq).shape() == Shape{2, 7, 3});
  CHECK(dense.variables().size() == 2);

  CHECK_THROWS_WITH(dense(kiln::ones({4, 6})),
                    "[nn.Dense] dense was built for f32 inputs with last dim 5; called with f32 "
                    "[4,6] (variable dense/kernel is f32 [5,3])");
  CHECK_THROWS_WITH(dense(kiln::ones({4, 5}, kiln::i32)),
                    "[nn.Dense] dense: needs f32 or f64 inputs, got i32 [4,5]");
  CHECK_THROWS_WITH(nn::Dense(0), Catch::StartsWith("[nn.Dense] dense: units must be positive"));

  // Names: automatic, explicit, and the registration path inside a model.
  nn::Dense second(2, nn::Activation::none, {.use_bias = false, .name = "head"});
  kiln::Module net("net");
  net.add_module("out", second);
  second(x);
  CHECK(names_of(net.variables()) == std::vector<std::string>{"net/out/kernel"});
  CHECK_THROWS_WITH(
      second(kiln::ones({1, 2})),
      Catch::StartsWith("[nn.Dense] net/out was built for f32 inputs with last dim 5"));
  CHECK_THROWS_WITH(second.bias(), "[nn.Dense] net/out has no bias (use_bias is false)");
}

TEST_CASE("activations", "[nn][layers]") {
  const Tensor x = kiln::tensor({-2.f, 0.f, 3.f}, {1, 3});
  CHECK(max_diff(nn::activate(nn::Activation::relu, x), kiln::tensor({0.f, 0.f, 3.f}, {1, 3})) ==
        0);
  CHECK(max_diff(nn::activate(nn::Activation::none, x), x) == 0);
  CHECK(max_diff(nn::activate(nn::Activation::sigmoid, x), kiln::sigmoid(x)) == 0);
  CHECK(max_diff(nn::activate(nn::Activation::tanh, x), kiln::tanh(x)) == 0);
  CHECK(kiln::sum(nn::activate(nn::Activation::softmax, x)).item<float>() ==
        Approx(1.0).epsilon(1e-6));
  CHECK(nn::activation_name(nn::Activation::softmax) == "softmax");
}

TEST_CASE("Dense and LSTM gradients match finite differences", "[nn][layers][gradient]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({3, 4, 2}, 0, 1, 3, kiln::f64);
  nn::LSTM lstm(3, {.return_sequences = true});
  nn::Dense dense(2, nn::Activation::sigmoid);
  const auto loss = [&] { return kiln::sum(kiln::square(dense(lstm(x)))); };
  loss();  // builds both
  auto vars = lstm.trainable_variables();
  const auto dense_vars = dense.trainable_variables();
  vars.insert(vars.end(), dense_vars.begin(), dense_vars.end());
  REQUIRE(vars.size() == 5);
  CHECK(vars[0].dtype() == kiln::f64);  // variables take the input's dtype
  check_gradients(vars, loss);

  nn::GRU gru(2, {.return_sequences = false});
  const auto gru_loss = [&] { return kiln::sum(kiln::square(gru(x))); };
  gru_loss();
  check_gradients(gru.trainable_variables(), gru_loss);
}

TEST_CASE("Embedding looks rows up", "[nn][layers]") {
  kiln::clear_session();
  nn::Embedding emb(10, 4);
  const Tensor ids = kiln::tensor({1, 3, 3, 9, 0, 2}, {2, 3});
  const Tensor out = emb(ids);
  CHECK(out.shape() == Shape{2, 3, 4});
  const Tensor table = emb.embeddings().value();
  CHECK(table.shape() == Shape{10, 4});
  CHECK(max_diff(kiln::slice(out, {{0, 1}, {1, 2}}),
                 kiln::reshape(kiln::slice(table, 0, 3, 4), {1, 1, 4})) == 0);
  CHECK(kiln::max(kiln::abs(table)).item<float>() <= 0.05f);
  CHECK(max_diff(emb(kiln::cast(ids, kiln::f32)), out) == 0);  // float ids are truncated
  CHECK_THROWS_WITH(emb(kiln::ones({2}, kiln::boolean)),
                    "[nn.Embedding] embedding: indices must be integers, got bool [2]");
  // Gradient: rows that were looked up twice get twice the output gradient.
  kiln::GradientTape tape;
  const Tensor loss = kiln::sum(emb(ids));
  const Tensor g = tape.gradient(loss, std::vector<Variable>{emb.embeddings()})[0];
  CHECK(kiln::sum(kiln::slice(g, 0, 3, 4)).item<float>() == 8.f);
  CHECK(kiln::sum(kiln::slice(g, 0, 4, 5)).item<float>() == 0.f);
}

TEST_CASE("gather's gradient traces with a dynamic batch of indices", "[nn][layers][gradient]") {
  kiln::clear_session();
  nn::Embedding emb(6, 3);
  const Tensor data = kiln::random::normal({3, 6, 2}, 0, 1, 14);
  const auto grads = [&](const Tensor& ids) {
    kiln::GradientTape tape({.persistent = true});
    tape.watch(data);
    const Tensor loss =
        kiln::sum(kiln::square(emb(ids))) + kiln::sum(kiln::square(kiln::gather(data, ids, 1)));
    auto g = tape.gradient(loss, std::vector<Variable>{emb.embeddings()});
    g.push_back(tape.gradient(loss, std::vector<Tensor>{data})[0]);
    return g;
  };
  auto f = kiln::function(grads, dynamic_batch({kiln::TensorSpec({-1, 4}, kiln::i32)}));
  for (std::int64_t batch : {2, 5}) {
    const Tensor ids = kiln::cast(kiln::random::uniform({batch, 4}, 0, 6, 15), kiln::i32);
    const auto traced = f(ids);
    const auto eager = grads(ids);
    CHECK(max_diff(traced[0], eager[0]) < 1e-5);
    CHECK(max_diff(traced[1], eager[1]) < 1e-5);
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("LSTMCell: one step equals the Keras equations on its variables", "[nn][layers]") {
  kiln::clear_session();
  nn::LSTMCell cell(5);
  const Tensor x = kiln::random::normal({3, 4}, 0, 1, 4);
  const Tensor h = kiln::random::normal({3, 5}, 0, 1, 5);
  const Tensor c = kiln::random::normal({3, 5}, 0, 1, 6);
  const nn::LSTMState next = cell(x, {h, c});
  CHECK(cell.kernel().shape() == Shape{4, 20});
  CHECK(cell.recurrent_kernel().shape() == Shape{5, 20});
  CHECK(cell.bias().shape() == Shape{20});
  // Unit forget bias: ones for the forget gate, zeros elsewhere.
  const Tensor expected_bias =
      kiln::concat({kiln::zeros({5}), kiln::ones({5}), kiln::zeros({10})}, 0);
  CHECK(max_diff(cell.bias().value(), expected_bias) == 0);
  const auto [h_ref, c_ref] = lstm_step_reference(
      x, h, c, cell.kernel().value(), cell.recurrent_kernel().value(), cell.bias().value(), 5);
  CHECK(max_diff(next.h, h_ref) < 1e-6);
  CHECK(max_diff(next.c, c_ref) < 1e-6);
  // The one-argument call starts from zeros.
  const Tensor zero = kiln::zeros({3, 5});
  CHECK(
      max_diff(cell(x), lstm_step_reference(x, zero, zero, cell.kernel().value(),
                                            cell.recurrent_kernel().value(), cell.bias().value(), 5)
                            .first) < 1e-6);
  CHECK_THROWS_WITH(cell(x, {kiln::zeros({3, 4}), c}),
                    "[nn.LSTMCell] lstm_cell: the initial h must be f32 [3,5], got f32 [3,4]");
}

TEST_CASE("LSTM: Keras layout, unrolled values, sequences, state, direction", "[nn][layers]") {
  kiln::clear_session();
  constexpr std::int64_t units = 6;
  const Tensor x = kiln::random::normal({2, 4, 3}, 0, 1, 7);
  nn::LSTM lstm(units, {.return_sequences = true, .return_state = true});
  const std::vector<Tensor> out = lstm.call(x);
  REQUIRE(out.size() == 3);
  CHECK(out[0].shape() == Shape{2, 4, units});
  CHECK(out[1].shape() == Shape{2, units});
  CHECK(names_of(lstm.variables()) ==
        std::vector<std::string>{"lstm/kernel", "lstm/recurrent_kernel", "lstm/bias"});
  CHECK(lstm.kernel().shape() == Shape{3, 4 * units});
  CHECK(lstm.recurrent_kernel().shape() == Shape{units, 4 * units});
  // The recurrent kernel is orthogonal: its rows are orthonormal.
  const Tensor r = lstm.recurrent_kernel().value();
  CHECK(max_diff(kiln::matmul(r, kiln::transpose(r)), kiln::eye(units)) < 1e-5);

  // The reference: the step equations applied in a loop.
  const Tensor k = lstm.kernel().value(), b = lstm.bias().value();
  Tensor h = kiln::zeros({2, units}), c = kiln::zeros({2, units});
  std::vector<Tensor> hs;
  for (std::int64_t t = 0; t < 4; ++t) {
    std::tie(h, c) =
        lstm_step_reference(kiln::squeeze(kiln::slice(x, 1, t, t + 1), {1}), h, c, k, r, b, units);
    hs.push_back(h);
  }
  CHECK(max_diff(out[0], kiln::stack(hs, 1)) < 1e-5);
  CHECK(max_diff(out[1], h) < 1e-5);
  CHECK(max_diff(out[2], c) < 1e-5);
  CHECK(max_diff(lstm(x), out[0]) == 0);  // operator() returns the output only

  // Initial state.
  const Tensor h0 = kiln::random::normal({2, units}, 0, 1, 8);
  const Tensor c0 = kiln::random::normal({2, units}, 0, 1, 9);
  const auto from_state = lstm.call(x, {h0, c0});
  const auto [h1, c1] =
      lstm_step_reference(kiln::squeeze(kiln::slice(x, 1, 0, 1), {1}), h0, c0, k, r, b, units);
  CHECK(max_diff(kiln::squeeze(kiln::slice(from_state[0], 1, 0, 1), {1}), h1) < 1e-5);
  CHECK_THROWS_WITH(lstm.call(x, {h0}),
                    "[nn.LSTM] lstm: initial_state must be {h, c}, got 1 tensors");

  // go_backwards with shared weights: the same as the forward layer on the reversed sequence,
  // and the output sequence is in processing order.
  nn::LSTM backwards(units, {.return_sequences = true, .go_backwards = true});
  backwards(x);
  backwards.set_weights(lstm.get_weights());
  const Tensor reversed = kiln::slice(x, 1, kiln::Slice::none, kiln::Slice::none, -1);
  CHECK(max_diff(backwards(x), lstm(reversed)) < 1e-6);

  // Errors: rank, dynamic time (only the unrolled form needs a static one), input size.
  CHECK_THROWS_WITH(lstm(kiln::ones({2, 3})),
                    "[nn.LSTM] lstm: needs inputs of rank >= 3, got f32 [2,3]");
  CHECK_THROWS_WITH(lstm(kiln::ones({2, 4, 5})),
                    Catch::StartsWith("[nn.LSTM] lstm was built for f32 inputs with last dim 3"));
  nn::LSTM unrolled(units, {.return_sequences = true, .return_state = true, .unroll = true});
  auto dynamic_time = kiln::function([&](const Tensor& t) { return unrolled(t); },
                                     dynamic_batch({kiln::TensorSpec({2, -1, 3})}));
  CHECK_THROWS_WITH(dynamic_time(x), Catch::Contains("the time dim of [2,?0,3] is dynamic"));
  auto dynamic_time_scan = kiln::function([&](const Tensor& t) { return lstm(t); },
                                          dynamic_batch({kiln::TensorSpec({2, -1, 3})}));
  CHECK(max_diff(dynamic_time_scan(x), out[0]) < 1e-5);
}

TEST_CASE("stateful LSTM and GRU carry their state; reset_states zeroes it", "[nn][layers]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({2, 6, 3}, 0, 1, 10);
  const Tensor first = kiln::slice(x, 1, 0, 3), second = kiln::slice(x, 1, 3, 6);
  nn::LSTM whole(4), stateful(4, {.stateful = true});
  const Tensor all_at_once = whole(x);
  stateful(first);
  stateful.set_weights({whole.kernel().value(), whole.recurrent_kernel().value(),
                        whole.bias().value(), kiln::zeros({2, 4}), kiln::zeros({2, 4})});
  CHECK(names_of(stateful.non_trainable_variables()) ==
        std::vector<std::string>{"lstm/state_h", "lstm/state_c"});
  stateful(first);
  CHECK(max_diff(stateful(second), all_at_once) < 1e-5);
  stateful.reset_states();
  CHECK(max_diff(stateful(first), whole(first)) < 1e-6);
  CHECK_THROWS_WITH(stateful(kiln::ones({3, 3, 3})),
                    "[nn.LSTM] lstm is stateful and was built for batch 2; called with batch 3");

  nn::GRU gru_whole(4), gru_stateful(4, {.stateful = true});
  const Tensor gru_all = gru_whole(x);
  gru_stateful(first);
  gru_stateful.set_weights({gru_whole.kernel().value(), gru_whole.recurrent_kernel().value(),
                            gru_whole.bias().value(), kiln::zeros({2, 4})});
  gru_stateful(first);
  CHECK(max_diff(gru_stateful(second), gru_all) < 1e-5);
}

TEST_CASE("GRU: one step equals the Keras reset_after equations", "[nn][layers]") {
  kiln::clear_session();
  nn::GRU gru(3, {.return_state = true, .bias_initializer = kiln::init::random_normal(0, 1, 4)});
  const Tensor x = kiln::random::normal({2, 1, 4}, 0, 1, 11);
  const Tensor h0 = kiln::random::normal({2, 3}, 0, 1, 12);
  const auto out = gru.call(x, {h0});
  REQUIRE(out.size() == 2);
  CHECK(gru.kernel().shape() == Shape{4, 9});
  CHECK(gru.recurrent_kernel().shape() == Shape{3, 9});
  CHECK(gru.bias().shape() == Shape{2, 9});
  const Tensor b = gru.bias().value();
  const Tensor xp = kiln::matmul(kiln::reshape(x, {2, 4}), gru.kernel().value()) +
                    kiln::reshape(kiln::slice(b, 0, 0, 1), {9});
  const Tensor hp = kiln::matmul(h0, gru.recurrent_kernel().value()) +
                    kiln::reshape(kiln::slice(b, 0, 1, 2), {9});
  const auto part = [](const Tensor& t, int k) { return kiln::slice(t, 1, 3 * k, 3 * k + 3); };
  const Tensor z = kiln::sigmoid(part(xp, 0) + part(hp, 0));
  const Tensor r = kiln::sigmoid(part(xp, 1) + part(hp, 1));
  const Tensor n = kiln::tanh(part(xp, 2) + r * part(hp, 2));
  const Tensor expected = z * h0 + (1.f - z) * n;
  CHECK(max_diff(out[0], expected) < 1e-6);
  CHECK(max_diff(out[1], expected) < 1e-6);
}

TEST_CASE("layers trace with a dynamic batch and match eager results", "[nn][layers][function]") {
  kiln::clear_session();
  nn::Sequential model({nn::LSTM(8, {.return_sequences = true}), nn::GRU(6), nn::Dense(2)});
  auto f = kiln::function([&](const Tensor& x) { return model(x); },
                          dynamic_batch({kiln::TensorSpec({-1, 5, 3})}));
  for (std::int64_t batch : {4, 1, 7}) {
    const Tensor x = kiln::random::normal({batch, 5, 3}, 0, 1, static_cast<std::uint64_t>(batch));
    CHECK(max_diff(f(x), model(x)) < 1e-5);
  }
  CHECK(f.tracing_count() == 1);
  CHECK(model.variables().size() == 8);
}

TEST_CASE("Sequential owns its layers and names them", "[nn][layers]") {
  kiln::clear_session();
  nn::Sequential seq({nn::LSTM(4, {.return_sequences = true}), nn::LSTM(3),
                      nn::Dense(1, nn::Activation::sigmoid)});
  CHECK(seq.name() == "sequential");
  CHECK(seq.size() == 3);
  const Tensor x = kiln::random::normal({2, 5, 6}, 0, 1, 13);
  const Tensor y = seq(x);
  CHECK(y.shape() == Shape{2, 1});
  CHECK(names_of(seq.variables()) ==
        std::vector<std::string>{"sequential/lstm/kernel", "sequential/lstm/recurrent_kernel",
                                 "sequential/lstm/bias", "sequential/lstm_1/kernel",
                                 "sequential/lstm_1/recurrent_kernel", "sequential/lstm_1/bias",
                                 "sequential/dense/kernel", "sequential/dense/bias"});
  CHECK(max_diff(y, seq.layer(2)(seq.layer(1)(seq.layer(0)(x)))) == 0);
  nn::Dense& extra = seq.add(nn::Dense(2));
  CHECK(seq(x).shape() == Shape{2, 2});
  CHECK(extra.kernel().name() == "sequential/dense_1/kernel");
  auto shared = std::make_shared<nn::Dense>(3, nn::Activation::none, nn::DenseOptions{.name = "d"});
  seq.add(shared);
  CHECK(seq(x).shape() == Shape{2, 3});
  CHECK(shared->kernel().name() == "sequential/d/kernel");
  CHECK_THROWS_WITH(
      seq.add(nn::Dense(1, nn::Activation::none, {.name = "d"})),
      Catch::StartsWith("[Module.add_module] sequential already has a child named 'd'"));
  CHECK_THROWS_WITH(seq.layer(9), "[nn.Sequential] sequential has 5 layers; asked for layer 9");
  nn::Sequential empty;
  CHECK_THROWS_WITH(empty(x), "[nn.Sequential] sequential has no layers");
}

TEST_CASE("Dropout: inactive in inference, a new mask per training call, also when cached",
          "[nn][layers][dropout]") {
  kiln::clear_session();
  const Tensor x = kiln::ones({64, 32});
  nn::Dropout dropout(0.25, 42);
  CHECK(max_diff(dropout(x), x) == 0);  // inference by default
  CHECK(max_diff(dropout(x, false), x) == 0);
  CHECK(dropout.variables().empty());

  const Tensor a = dropout(x, true), b = dropout(x, true);
  CHECK(dropout.variable("rng_counter").value().item<std::int64_t>() == 2);
  // Kept elements are scaled by 1 / (1 - rate); about a quarter are dropped.
  const Tensor kept = kiln::cast(kiln::greater(a, 0.f), kiln::f32);
  CHECK(kiln::mean(kept).item<float>() == Approx(0.75).margin(0.03));
  CHECK(kiln::max(a).item<float>() == Approx(1 / 0.75));
  CHECK(max_diff(a, b) > 0);  // a new mask per call
  {
    nn::LearningPhaseScope training(true);
    CHECK(nn::learning_phase());
    CHECK(max_diff(dropout(x), x) > 0);
  }
  CHECK_FALSE(nn::learning_phase());

  // In a cached graph: the counter is read and incremented by the graph, so every call draws a
  // new mask, the same sequence of masks as eager calls from the same counter.
  nn::Dropout eager(0.5, 7), traced(0.5, 7);
  auto f = kiln::function([&](const Tensor& t) { return traced(t, true); });
  std::vector<Tensor> traced_masks, eager_masks;
  for (int i = 0; i < 4; ++i) {
    traced_masks.push_back(f(x));
    eager_masks.push_back(eager(x, true));
  }
  CHECK(f.tracing_count() == 1);
  for (int i = 0; i < 4; ++i) CHECK(max_diff(traced_masks[i], eager_masks[i]) == 0);
  CHECK(max_diff(traced_masks[0], traced_masks[1]) > 0);
  CHECK(max_diff(traced_masks[2], traced_masks[3]) > 0);
  CHECK(traced.variable("rng_counter").value().item<std::int64_t>() == 4);

  // Gradients flow through the kept elements only.
  const Tensor w = kiln::random::normal({64, 32}, 0, 1, 3);
  kiln::GradientTape tape;
  tape.watch(w);
  const Tensor g = tape.gradient(kiln::sum(dropout(w, true)), w);
  const Tensor mask = dropout(x, true);  // not the same mask, but the same value set
  CHECK(kiln::all(kiln::logical_or(kiln::equal(g, 0.f), kiln::equal(g, 1 / 0.75f))).item<bool>());
  CHECK(kiln::all(kiln::logical_or(kiln::equal(mask, 0.f), kiln::equal(mask, 1 / 0.75f)))
            .item<bool>());
  CHECK_THROWS_WITH(nn::Dropout(1.0), Catch::Contains("rate must be in [0, 1), got 1"));
}

TEST_CASE("stateless_uniform: keyed draws, a graph node reading its key per call", "[nn][random]") {
  const Tensor key = kiln::tensor<std::int64_t>({5, 0});
  CHECK(max_diff(kiln::random::stateless_uniform({3, 4}, key),
                 kiln::random::uniform({3, 4}, 0, 1, 5)) == 0);
  const Tensor other = kiln::random::stateless_uniform({3, 4}, kiln::tensor<std::int64_t>({5, 1}));
  CHECK(max_diff(other, kiln::random::uniform({3, 4}, 0, 1, 5)) > 0);
  const Tensor ranged = kiln::random::stateless_uniform({1000}, key, -2.0, 3.0, kiln::f64);
  CHECK(ranged.dtype() == kiln::f64);
  CHECK(kiln::min(ranged).item<double>() >= -2.0);
  CHECK(kiln::max(ranged).item<double>() <= 3.0);
  CHECK(kiln::mean(ranged).item<double>() == Approx(0.5).margin(0.2));
  auto f = kiln::function(
      [](const Tensor& k, const Tensor& like) {
        return kiln::random::stateless_uniform(like.shape(), k);
      },
      dynamic_batch({kiln::TensorSpec({2}, kiln::i64), kiln::TensorSpec({-1, 4})}));
  CHECK(max_diff(f(key, kiln::zeros({3, 4})), kiln::random::uniform({3, 4}, 0, 1, 5)) == 0);
  CHECK(max_diff(f(kiln::tensor<std::int64_t>({5, 1}), kiln::zeros({3, 4})), other) == 0);
  CHECK(f(key, kiln::zeros({6, 4})).shape() == Shape{6, 4});
  CHECK(f.tracing_count() == 1);
  CHECK_THROWS_WITH(kiln::random::stateless_uniform({2}, kiln::tensor({1, 2})),
                    "[random.stateless_uniform] key must be i64 [2] (seed, counter), got i32 [2]");
}

// Stateful recurrent models: nn::is_stateful and nn::reset_states over module trees
// (Sequential, Bidirectional, plain Modules), and train::fit / evaluate / predict on a stateful
// model (static batch, state carried from batch to batch in order, one trace), against the same
// batches run by hand; the errors of a partial batch and of shuffling.
//
// Tolerances: f64. fit runs a compiled graph and the by-hand loop runs eagerly; the same
// arithmetic in another order agrees to ~1e-13 over a few steps, so 1e-10 is loose, while a
// dropped or reset state changes the values at O(0.1).
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace nn = kiln::nn;
namespace train = kiln::train;

namespace {

using kiln::test::max_diff;
using kiln::test::names_of;

constexpr double tol = 1e-10;
constexpr std::int64_t samples = 8, batch_size = 4, steps = 5, features = 3;

/// A model with a stateful layer, and a twin with the same weights to run by hand.
struct StatefulNet : kiln::Module {
  nn::Sequential seq;
  explicit StatefulNet(std::string name)
      : Module(std::move(name)),
        seq({nn::SimpleRNN(4, {.return_sequences = true, .stateful = true}),
             nn::Bidirectional(nn::LSTM(2, {.return_sequences = true, .stateful = true})),
             nn::GRU(3, {.stateful = true}), nn::Dense(1)},
            "seq") {
    add_module("seq", seq);
  }
  Tensor operator()(const Tensor& x) { return seq(x); }
};

Tensor data_x() { return kiln::random::normal({samples, steps, features}, 0, 1, 21, kiln::f64); }
Tensor data_y() { return kiln::random::normal({samples, 1}, 0, 1, 22, kiln::f64); }

/// fit's step run eagerly over the batches in order, for `epochs` epochs; the per-epoch mean
/// losses.
std::vector<double> fit_by_hand(StatefulNet& net, kiln::optim::Optimizer& opt, const Tensor& x,
                                const Tensor& y, int epochs, bool reset_at_epoch_end) {
  std::vector<double> losses;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total = 0;
    for (std::int64_t begin = 0; begin < samples; begin += batch_size) {
      const Tensor xb = kiln::slice(x, 0, begin, begin + batch_size);
      const Tensor yb = kiln::slice(y, 0, begin, begin + batch_size);
      nn::LearningPhaseScope phase(true);
      kiln::GradientTape tape;
      const Tensor loss = nn::losses::mean_squared_error(yb, net(xb));
      const std::vector<Variable> vars = net.trainable_variables();
      opt.apply(tape.gradient(loss, vars), vars);
      total += loss.item<double>();
    }
    losses.push_back(total / static_cast<double>(samples / batch_size));
    if (reset_at_epoch_end) nn::reset_states(net);
  }
  return losses;
}

void check_fit_against_by_hand(bool reset_at_epoch_end) {
  kiln::clear_session();
  INFO("reset_states_at_epoch_end " << reset_at_epoch_end);
  const Tensor x = data_x(), y = data_y();
  StatefulNet fitted("fitted"), by_hand("by_hand");
  fitted(kiln::slice(x, 0, 0, batch_size));
  by_hand(kiln::slice(x, 0, 0, batch_size));
  by_hand.set_weights(fitted.get_weights());
  nn::reset_states(fitted);
  nn::reset_states(by_hand);
  kiln::optim::SGD sgd_fit({.learning_rate = 0.1}), sgd_hand({.learning_rate = 0.1});
  const train::History history = train::fit(fitted, sgd_fit, nn::losses::mean_squared_error, x, y,
                                            {.epochs = 3,
                                             .batch_size = batch_size,
                                             .shuffle = false,
                                             .verbose = 0,
                                             .reset_states_at_epoch_end = reset_at_epoch_end});
  const std::vector<double> want = fit_by_hand(by_hand, sgd_hand, x, y, 3, reset_at_epoch_end);
  CHECK(history.traces == 1);
  REQUIRE(history.loss.size() == want.size());
  for (std::size_t e = 0; e < want.size(); ++e)
    CHECK(history.loss[e] == Approx(want[e]).margin(tol));
  const std::vector<Tensor> got_weights = fitted.get_weights(),
                            want_weights = by_hand.get_weights();
  REQUIRE(got_weights.size() == want_weights.size());
  for (std::size_t i = 0; i < got_weights.size(); ++i) {
    INFO(fitted.variables()[i].name());
    CHECK(max_diff(got_weights[i], want_weights[i]) < tol);
  }
  CHECK(names_of(fitted.non_trainable_variables()) ==
        std::vector<std::string>{
            "fitted/seq/simple_rnn/state_h", "fitted/seq/bidirectional/forward_lstm/state_h",
            "fitted/seq/bidirectional/forward_lstm/state_c",
            "fitted/seq/bidirectional/backward_lstm/state_h",
            "fitted/seq/bidirectional/backward_lstm/state_c", "fitted/seq/gru/state_h"});
  // The carried state is the last batch's (or zeros after the reset).
  const Tensor state = fitted.variable("seq/gru/state_h").value();
  CHECK(state.shape() == Shape{batch_size, 3});
  if (reset_at_epoch_end)
    CHECK(max_diff(state, kiln::zeros({batch_size, 3}, kiln::f64)) == 0);
  else
    CHECK(max_diff(kiln::zeros({batch_size, 3}, kiln::f64), state) > 0.01);
}

}  // namespace

TEST_CASE("is_stateful and reset_states walk the module tree", "[stateful][nn]") {
  kiln::clear_session();
  struct Tree : kiln::Module {
    nn::Sequential seq;
    nn::Bidirectional bi;
    nn::LSTM plain;
    nn::SimpleRNN carried;
    Tree()
        : Module("tree"),
          seq({nn::LSTM(3, {.return_sequences = true, .stateful = true}), nn::Dense(2)}),
          bi(nn::GRU(2, {.stateful = true})),
          plain(3),
          carried(2, {.stateful = true}) {
      add_module("seq", seq);
      add_module("bi", bi);
      add_module("plain", plain);
      add_module("carried", carried);
    }
  } tree;
  const Tensor x = kiln::random::normal({2, 4, 3}, 0, 1, 1);
  tree.seq(x);
  tree.bi(x);
  tree.plain(x);
  tree.carried(x);
  const std::vector<Variable> states = tree.non_trainable_variables();
  CHECK(names_of(states) ==
        std::vector<std::string>{"tree/seq/lstm/state_h", "tree/seq/lstm/state_c",
                                 "tree/bi/forward_gru/state_h", "tree/bi/backward_gru/state_h",
                                 "tree/carried/state_h"});
  for (const Variable& v : states) CHECK(kiln::max(kiln::abs(v.value())).item<float>() > 1e-3f);
  const std::vector<Tensor> weights_before = tree.get_weights();
  CHECK(nn::is_stateful(tree));
  CHECK(tree.seq.stateful());
  CHECK(tree.bi.stateful());
  CHECK_FALSE(tree.plain.stateful());
  CHECK_FALSE(nn::is_stateful(tree.plain));

  // Sequential's reset_states resets its layers only.
  tree.seq.reset_states();
  CHECK(kiln::max(kiln::abs(tree.variable("seq/lstm/state_c").value())).item<float>() == 0);
  CHECK(kiln::max(kiln::abs(tree.variable("carried/state_h").value())).item<float>() > 1e-3f);
  tree.seq(x);
  nn::reset_states(tree);
  for (const Variable& v : states) {
    INFO(v.name());
    CHECK(kiln::max(kiln::abs(v.value())).item<float>() == 0);
  }
  // The trainable weights and the non-stateful layers are untouched.
  const std::vector<Variable> all = tree.variables();
  const std::vector<Tensor> after = tree.get_weights();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].trainable()) CHECK(max_diff(after[i], weights_before[i]) == 0);

  nn::Sequential without({nn::LSTM(2), nn::Dense(1)});
  CHECK_FALSE(without.stateful());
  CHECK_FALSE(nn::is_stateful(without));
  without.reset_states();  // nothing to reset: fine
}

TEST_CASE("fit carries a stateful model's state across batches, as the batches run by hand",
          "[stateful][train]") {
  check_fit_against_by_hand(false);
  check_fit_against_by_hand(true);
}

TEST_CASE("evaluate and predict run a stateful model with its static batch, state carried",
          "[stateful][train]") {
  kiln::clear_session();
  const Tensor x = data_x(), y = data_y();
  StatefulNet net("net"), twin("twin");
  net(kiln::slice(x, 0, 0, batch_size));
  twin(kiln::slice(x, 0, 0, batch_size));
  twin.set_weights(net.get_weights());
  nn::reset_states(net);
  nn::reset_states(twin);
  const Tensor predicted = train::predict(net, x, {.batch_size = batch_size});
  const Tensor first = twin(kiln::slice(x, 0, 0, batch_size));
  const Tensor second = twin(kiln::slice(x, 0, batch_size, samples));
  CHECK(max_diff(predicted, kiln::concat({first, second}, 0)) < tol);
  // evaluate continues from the carried state, as the twin does.
  const train::EvaluateResult result =
      train::evaluate(net, nn::losses::mean_squared_error, x, y, {.batch_size = batch_size});
  const double l1 = nn::losses::mean_squared_error(kiln::slice(y, 0, 0, batch_size),
                                                   twin(kiln::slice(x, 0, 0, batch_size)))
                        .item<double>();
  const double l2 = nn::losses::mean_squared_error(kiln::slice(y, 0, batch_size, samples),
                                                   twin(kiln::slice(x, 0, batch_size, samples)))
                        .item<double>();
  CHECK(result.loss == Approx((l1 + l2) / 2).margin(tol));
}

TEST_CASE("fit on a stateful model: a partial last batch and shuffling are errors",
          "[stateful][train][errors]") {
  kiln::clear_session();
  using Catch::Matchers::Contains;
  const Tensor x = data_x(), y = data_y();
  StatefulNet net("net");
  kiln::optim::SGD sgd;
  CHECK_THROWS_WITH(
      train::fit(net, sgd, nn::losses::mean_squared_error, x, y,
                 {.batch_size = 3, .shuffle = false, .verbose = 0}),
      "[train.fit] the model net is stateful (the layer net/seq/simple_rnn carries its state "
      "from one batch to the next), so every batch must have batch_size 3 samples; 8 samples "
      "are not a multiple of it (drop the last 2 or choose another batch_size)");
  CHECK_THROWS_WITH(
      train::fit(net, sgd, nn::losses::mean_squared_error, x, y,
                 {.batch_size = batch_size, .verbose = 0}),
      Contains("[train.fit] the model net is stateful") && Contains("pass shuffle = false"));
  CHECK_THROWS_WITH(
      train::evaluate(net, nn::losses::mean_squared_error, x, y, {.batch_size = 5}),
      Contains("[train.evaluate] the model net is stateful") && Contains("batch_size 5"));
  CHECK_THROWS_WITH(train::predict(net, x, {.batch_size = 16}),
                    Contains("[train.predict] the model net is stateful") &&
                        Contains("8 samples are not a multiple"));
  CHECK(net.variables().empty());  // nothing was built by the failed calls
  // A model without state still takes a partial last batch and shuffling.
  nn::Sequential plain({nn::SimpleRNN(2), nn::Dense(1)});
  const train::History h =
      train::fit(plain, sgd, nn::losses::mean_squared_error, x, y, {.batch_size = 3, .verbose = 0});
  CHECK(h.traces == 1);
}

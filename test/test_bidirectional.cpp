// nn::Bidirectional: against its two directions run by hand (a forward layer, and a forward
// layer with the backward copy's weights over the time-reversed input), in every merge mode, with
// and without return_sequences, return_state and initial states, in both forms (scan, unroll);
// padded sequences against each sequence run unpadded; traced (dynamic batch and time) against
// eager; gradients against finite differences; variable paths, nn::Sequential, stateful copies;
// the errors.
//
// Tolerances: f64 throughout. The by-hand runs do the same arithmetic as the wrapped copies
// (a reversed scan over x against a forward scan over reversed x), so they agree to rounding:
// 1e-12. Central differences with eps 1e-6 on O(1) losses are good to about 1e-8.
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
namespace nn = kiln::nn;

namespace {

using kiln::test::max_diff;
using kiln::test::names_of;
using kiln::test::weighted_loss;

using kiln::test::GRUKind;
using kiln::test::LSTMKind;
using kiln::test::SimpleRNNKind;

constexpr std::int64_t batch = 3, steps = 6, features = 4, units = 5;
constexpr double tol = 1e-12;
const std::vector<std::int64_t> lengths{6, 3, 1};
const std::vector<nn::MergeMode> all_modes{nn::MergeMode::concat, nn::MergeMode::sum,
                                           nn::MergeMode::mul, nn::MergeMode::ave,
                                           nn::MergeMode::none};

Tensor lengths_tensor() { return kiln::tensor<std::int64_t>({6, 3, 1}); }

/// Row b of a [batch, ...] tensor, keeping the batch axis.
Tensor row(const Tensor& t, std::int64_t b) { return kiln::slice(t, 0, b, b + 1); }
/// The first n steps of row b of a [batch, time, ...] tensor.
Tensor prefix(const Tensor& t, std::int64_t b, std::int64_t n) {
  return kiln::slice(row(t, b), 1, 0, n);
}
/// Steps [begin, end) of a [batch, time, ...] tensor.
Tensor steps_of(const Tensor& t, std::int64_t begin, std::int64_t end) {
  return kiln::slice(t, 1, begin, end);
}
/// t with its (static) time axis 1 reversed.
Tensor reversed(const Tensor& t) {
  return kiln::slice(t, 1, kiln::Slice::none, kiln::Slice::none, -1);
}

template <class K>
typename K::Options options(bool sequences, bool state, bool unroll = false) {
  typename K::Options o;
  o.return_sequences = sequences;
  o.return_state = state;
  o.unroll = unroll;
  return o;
}

/// Keras's merges, written out.
Tensor merged_by_hand(nn::MergeMode mode, const Tensor& f, const Tensor& b) {
  switch (mode) {
    case nn::MergeMode::concat:
      return kiln::concat({f, b}, -1);
    case nn::MergeMode::sum:
      return f + b;
    case nn::MergeMode::mul:
      return f * b;
    case nn::MergeMode::ave:
      return (f + b) / 2.0;
    case nn::MergeMode::none:
      break;
  }
  FAIL("no merge");
  return {};
}

/// What bi.call(x, init) should return, from two plain forward layers of K with bi's weights:
/// the forward one over x, the backward one over x reversed in time (its sequence reversed
/// back to input order).
template <class K>
std::vector<Tensor> by_hand(const nn::Bidirectional& bi, const Tensor& x, typename K::Options o,
                            nn::MergeMode mode, const std::vector<Tensor>& init) {
  const bool sequences = o.return_sequences, state = o.return_state;
  o.return_state = true;
  o.name = "by_hand_forward";
  typename K::Layer forward(units, o);
  o.name = "by_hand_backward";
  typename K::Layer backward(units, o);
  forward.call(x);
  backward.call(x);
  forward.set_weights(bi.forward_layer().get_weights());
  backward.set_weights(bi.backward_layer().get_weights());
  std::vector<Tensor> init_f, init_b;
  for (std::size_t i = 0; i < init.size(); ++i)
    (i < K::states ? init_f : init_b).push_back(init[i]);
  const std::vector<Tensor> f = forward.call(x, init_f);
  const std::vector<Tensor> b = backward.call(reversed(x), init_b);
  const Tensor b_out = sequences ? reversed(b[0]) : b[0];
  std::vector<Tensor> out;
  if (mode == nn::MergeMode::none)
    out = {f[0], b_out};
  else
    out = {merged_by_hand(mode, f[0], b_out)};
  if (state) {
    out.insert(out.end(), f.begin() + 1, f.end());
    out.insert(out.end(), b.begin() + 1, b.end());
  }
  return out;
}

void check_all(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double limit) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    CHECK(max_diff(got[i], want[i]) <= limit);
  }
}

template <class K>
void check_against_by_hand(bool sequences, bool state, bool unroll, bool with_init) {
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 1, kiln::f64);
  std::vector<Tensor> init;
  for (std::size_t i = 0; i < 2 * K::states && with_init; ++i)
    init.push_back(kiln::random::normal({batch, units}, 0, 1, 10 + i, kiln::f64));
  for (nn::MergeMode mode : all_modes) {
    kiln::clear_session();
    INFO(K::name << " return_sequences " << sequences << " return_state " << state << " unroll "
                 << unroll << " initial_state " << with_init << " merge "
                 << nn::merge_mode_name(mode));
    nn::Bidirectional bi(typename K::Layer(units, options<K>(sequences, state, unroll)),
                         {.merge_mode = mode});
    const std::vector<Tensor> got = bi.call(x, init);
    const std::size_t outputs = mode == nn::MergeMode::none ? 2 : 1;
    REQUIRE(got.size() == outputs + (state ? 2 * K::states : 0));
    const std::int64_t width = mode == nn::MergeMode::concat ? 2 * units : units;
    CHECK(got[0].shape() == (sequences ? Shape{batch, steps, width} : Shape{batch, width}));
    check_all(got, by_hand<K>(bi, x, options<K>(sequences, state, unroll), mode, init), tol);
    if (mode != nn::MergeMode::none && !with_init) {
      CHECK(max_diff(bi(x), got[0]) == 0);
    }
  }
}

template <class K>
void check_kind_against_by_hand() {
  for (bool sequences : {false, true})
    for (bool state : {false, true})
      for (bool unroll : {false, true})
        for (bool init : {false, true}) check_against_by_hand<K>(sequences, state, unroll, init);
}

/// Padded sequences (by mask and by sequence_lengths) against each one run unpadded through the
/// same Bidirectional: final states and outputs agree; with return_sequences the real steps
/// agree, and over the padding the forward output repeats its last real step and the backward
/// output (whose run skipped the padding before its first real step) is zeros.
template <class K>
void check_masked(bool sequences, bool unroll) {
  kiln::clear_session();
  INFO(K::name << " return_sequences " << sequences << " unroll " << unroll);
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 3, kiln::f64);
  const Tensor mask = nn::sequence_mask(lengths_tensor(), steps);
  // Large padding values: any padded step that ran would show.
  const Tensor padded = kiln::where(kiln::expand_dims(mask, -1), x, kiln::full_like(x, 7.0));
  nn::Bidirectional bi(typename K::Layer(units, options<K>(sequences, true, unroll)),
                       {.merge_mode = nn::MergeMode::none});
  const std::vector<Tensor> got = bi.call(padded, {.mask = mask});
  check_all(bi.call(padded, {.sequence_lengths = lengths_tensor()}), got, 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t n = lengths[b];
    INFO("sequence " << b << " length " << n);
    const std::vector<Tensor> want = bi.call(prefix(padded, b, n));
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 2; i < want.size(); ++i) CHECK(max_diff(row(got[i], b), want[i]) < 1e-10);
    if (!sequences) {
      CHECK(max_diff(row(got[0], b), want[0]) < 1e-10);
      CHECK(max_diff(row(got[1], b), want[1]) < 1e-10);
      continue;
    }
    const Tensor forward = row(got[0], b), backward = row(got[1], b);
    CHECK(max_diff(steps_of(forward, 0, n), want[0]) < 1e-10);
    CHECK(max_diff(steps_of(backward, 0, n), want[1]) < 1e-10);
    // Padded steps carry the last real output through unchanged (the unpadded run may be the
    // fused layer, equal to the masked scan within rounding).
    for (std::int64_t t = n; t < steps; ++t) {
      CHECK(max_diff(steps_of(forward, t, t + 1), steps_of(forward, n - 1, n)) == 0);
      CHECK(max_diff(steps_of(backward, t, t + 1), kiln::zeros({1, 1, units}, kiln::f64)) == 0);
    }
  }
}

template <class K>
void check_kind_masked() {
  for (bool sequences : {false, true})
    for (bool unroll : {false, true}) check_masked<K>(sequences, unroll);
}

/// A kiln::function over (x, mask) with dynamic batch and time dims == the eager calls, for two
/// batch sizes and two lengths, in one trace; the same for the gradients.
template <class K>
void check_traced() {
  kiln::clear_session();
  INFO(K::name);
  nn::Bidirectional bi(typename K::Layer(units, options<K>(true, true)));
  const auto forward = [&bi](const Tensor& x, const Tensor& m) { return bi.call(x, {.mask = m}); };
  const auto gradients = [&bi](const Tensor& x, const Tensor& m) {
    kiln::GradientTape tape({.persistent = true});
    tape.watch(x);
    const Tensor loss = weighted_loss(bi.call(x, {.mask = m}));
    std::vector<Tensor> g = tape.gradient(loss, bi.trainable_variables());
    g.push_back(tape.gradient(loss, std::vector<Tensor>{x})[0]);
    return g;
  };
  const std::vector<kiln::TensorSpec> specs{kiln::TensorSpec({-1, -1, features}, kiln::f64),
                                            kiln::TensorSpec({-1, -1}, kiln::boolean)};
  auto traced = kiln::function(forward, kiln::test::options_named("bi_forward", specs));
  auto traced_gradients =
      kiln::function(gradients, kiln::test::options_named("bi_gradients", specs));
  for (const auto& [b, t] : std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 6}, {2, 9}}) {
    INFO("batch " << b << " time " << t);
    const Tensor x = kiln::random::normal({b, t, features}, 0, 1, 5 + t, kiln::f64);
    const Tensor mask = nn::sequence_mask(kiln::tensor<std::int64_t>({t, 1, t - 2}), t);
    const Tensor m = kiln::slice(mask, 0, 0, b);
    check_all(traced(x, m), forward(x, m), 1e-12);
    check_all(traced_gradients(x, m), gradients(x, m), 1e-10);
  }
  CHECK(traced.tracing_count() == 1);
  CHECK(traced_gradients.tracing_count() == 1);
}

/// The scalar loss of bi's outputs at x.
double loss_at(nn::Bidirectional& bi, const Tensor& x) {
  return weighted_loss(bi.call(x)).item<double>();
}

/// d loss / d x and d loss / d (a few entries of each direction's kernels) against central
/// differences.
template <class K>
void check_finite_differences(nn::MergeMode mode) {
  kiln::clear_session();
  INFO(K::name << " merge " << nn::merge_mode_name(mode));
  constexpr double eps = 1e-6;
  const Tensor x = kiln::random::normal({2, 4, 3}, 0, 1, 7, kiln::f64);
  nn::Bidirectional bi(typename K::Layer(units, options<K>(true, true)), {.merge_mode = mode});
  bi.call(x);
  std::vector<kiln::Variable> vars = bi.trainable_variables();
  std::vector<Tensor> analytic;
  {
    kiln::GradientTape tape({.persistent = true});
    tape.watch(x);
    const Tensor loss = weighted_loss(bi.call(x));
    analytic = tape.gradient(loss, vars);
    analytic.push_back(tape.gradient(loss, std::vector<Tensor>{x})[0]);
  }
  std::vector<double> xs = x.to_vector<double>();
  const std::vector<double> dx = analytic.back().to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double saved = xs[i];
    xs[i] = saved + eps;
    const double plus = loss_at(bi, kiln::tensor(xs, x.shape()));
    xs[i] = saved - eps;
    const double minus = loss_at(bi, kiln::tensor(xs, x.shape()));
    xs[i] = saved;
    INFO("x[" << i << "]");
    CHECK(dx[i] == Approx((plus - minus) / (2 * eps)).margin(1e-7));
  }
  for (std::size_t v = 0; v < vars.size(); ++v) {
    const Tensor value = vars[v].value();
    std::vector<double> w = value.to_vector<double>();
    const std::vector<double> dw = analytic[v].to_vector<double>();
    for (std::size_t i = 0; i < w.size(); i += 7) {  // a spread of entries of each variable
      const double saved = w[i];
      w[i] = saved + eps;
      vars[v].assign(kiln::tensor(w, value.shape()));
      const double plus = loss_at(bi, x);
      w[i] = saved - eps;
      vars[v].assign(kiln::tensor(w, value.shape()));
      const double minus = loss_at(bi, x);
      w[i] = saved;
      vars[v].assign(value);
      INFO(vars[v].name() << "[" << i << "]");
      CHECK(dw[i] == Approx((plus - minus) / (2 * eps)).margin(1e-7));
    }
  }
}

}  // namespace

TEST_CASE("Bidirectional equals its two directions run by hand, in every merge mode",
          "[bidirectional][nn]") {
  SECTION("LSTM") { check_kind_against_by_hand<LSTMKind>(); }
  SECTION("GRU") { check_kind_against_by_hand<GRUKind>(); }
  SECTION("SimpleRNN") { check_kind_against_by_hand<SimpleRNNKind>(); }
}

TEST_CASE("Bidirectional names its copies as Keras does; each has its own variables",
          "[bidirectional][nn]") {
  kiln::clear_session();
  nn::Bidirectional bi(nn::LSTM(3, {.stateful = false}));
  bi.call(kiln::ones({2, 4, 2}, kiln::f64));
  CHECK(names_of(bi.variables()) ==
        std::vector<std::string>{
            "bidirectional/forward_lstm/kernel", "bidirectional/forward_lstm/recurrent_kernel",
            "bidirectional/forward_lstm/bias", "bidirectional/backward_lstm/kernel",
            "bidirectional/backward_lstm/recurrent_kernel", "bidirectional/backward_lstm/bias"});
  CHECK(max_diff(bi.variable("forward_lstm/kernel").value(),
                 bi.variable("backward_lstm/kernel").value()) > 0.01);
  CHECK(bi.forward_layer().name() == "forward_lstm");
  CHECK(bi.backward_layer().name() == "backward_lstm");
  CHECK(dynamic_cast<nn::LSTM&>(bi.backward_layer()).options().go_backwards);
  CHECK_FALSE(dynamic_cast<nn::LSTM&>(bi.forward_layer()).options().go_backwards);
  CHECK(bi.state_size() == 2);
  CHECK_FALSE(bi.stateful());
  // A wrapped go_backwards layer: the copies' directions are swapped (Keras negates the flag).
  nn::Bidirectional swapped(nn::GRU(3, {.go_backwards = true, .name = "g"}), {.name = "swapped"});
  CHECK(dynamic_cast<nn::GRU&>(swapped.forward_layer()).options().go_backwards);
  CHECK_FALSE(dynamic_cast<nn::GRU&>(swapped.backward_layer()).options().go_backwards);
  CHECK(swapped.forward_layer().path() == "swapped/forward_g");
}

TEST_CASE("Bidirectional over padded sequences equals each sequence run unpadded",
          "[bidirectional][masking][nn]") {
  SECTION("LSTM") { check_kind_masked<LSTMKind>(); }
  SECTION("GRU") { check_kind_masked<GRUKind>(); }
  SECTION("SimpleRNN") { check_kind_masked<SimpleRNNKind>(); }
}

TEST_CASE("Bidirectional traced with dynamic batch and time equals eager, values and gradients",
          "[bidirectional][nn][function]") {
  SECTION("LSTM") { check_traced<LSTMKind>(); }
  SECTION("GRU") { check_traced<GRUKind>(); }
  SECTION("SimpleRNN") { check_traced<SimpleRNNKind>(); }
}

TEST_CASE("Bidirectional gradients match finite differences", "[bidirectional][nn][autodiff]") {
  for (nn::MergeMode mode : {nn::MergeMode::concat, nn::MergeMode::mul, nn::MergeMode::ave}) {
    check_finite_differences<LSTMKind>(mode);
    check_finite_differences<GRUKind>(mode);
    check_finite_differences<SimpleRNNKind>(mode);
  }
  check_finite_differences<LSTMKind>(nn::MergeMode::none);
}

TEST_CASE("Bidirectional in a Sequential trains with train::fit", "[bidirectional][nn][train]") {
  kiln::clear_session();
  nn::Sequential model({nn::Bidirectional(nn::LSTM(4, {.return_sequences = true})),
                        nn::Bidirectional(nn::GRU(3), {.merge_mode = nn::MergeMode::sum}),
                        nn::Dense(1)});
  const Tensor x = kiln::random::normal({10, 5, 2}, 0, 1, 11);
  const Tensor y = kiln::sum(x, {1, 2}, /*keepdims*/ false);
  const Tensor y2 = kiln::reshape(y, {10, 1});
  model(x);
  CHECK(model.variables().size() == 3 * 4 + 2);
  CHECK(model.has_variable("sequential/bidirectional/backward_lstm/recurrent_kernel"));
  CHECK(model.has_variable("sequential/bidirectional_1/forward_gru/bias"));
  CHECK(model(x).shape() == Shape{10, 1});
  kiln::optim::Adam adam({.learning_rate = 0.02});
  const kiln::train::History history =
      kiln::train::fit(model, adam, nn::losses::mean_squared_error, x, y2,
                       {.epochs = 20, .batch_size = 4, .seed = 1, .verbose = 0});
  CHECK(history.traces == 1);
  CHECK(history.loss.back() < 0.5 * history.loss.front());
}

TEST_CASE("a stateful Bidirectional carries both directions' states; reset_states zeroes them",
          "[bidirectional][nn][stateful]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({2, 6, 3}, 0, 1, 13, kiln::f64);
  nn::Bidirectional bi(nn::SimpleRNN(4, {.return_state = true, .stateful = true}),
                       {.merge_mode = nn::MergeMode::none});
  CHECK(bi.stateful());
  const std::vector<Tensor> first = bi.call(x);
  CHECK(names_of(bi.non_trainable_variables()) ==
        std::vector<std::string>{"bidirectional/forward_simple_rnn/state_h",
                                 "bidirectional/backward_simple_rnn/state_h"});
  // The carried states are the returned final states; the next call starts from them.
  CHECK(max_diff(bi.variable("forward_simple_rnn/state_h").value(), first[2]) == 0);
  CHECK(max_diff(bi.variable("backward_simple_rnn/state_h").value(), first[3]) == 0);
  const std::vector<Tensor> second = bi.call(x);
  bi.reset_states();
  check_all(bi.call(x, {first[2], first[3]}), second, 0);
  bi.reset_states();
  CHECK(max_diff(bi.variable("forward_simple_rnn/state_h").value(),
                 kiln::zeros({2, 4}, kiln::f64)) == 0);
  check_all(bi.call(x), first, 0);
}

TEST_CASE("Bidirectional's errors name the op and the problem", "[bidirectional][nn][errors]") {
  kiln::clear_session();
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(nn::Bidirectional(nn::Dense(3)),
                    "[nn.Bidirectional] bidirectional: can wrap an nn.LSTM, nn.GRU or "
                    "nn.SimpleRNN (a sequence layer with go_backwards); got the layer dense, which "
                    "is not one");
  CHECK_THROWS_WITH(nn::Bidirectional(nn::LSTMCell(3)),
                    Contains("[nn.Bidirectional]") && Contains("got the layer lstm_cell"));
  nn::LSTM built(3);
  built(kiln::ones({1, 2, 2}));
  CHECK_THROWS_WITH(nn::Bidirectional(built),
                    Contains("[nn.Bidirectional]") && Contains("the layer lstm has been called"));
  CHECK_THROWS_WITH(nn::merge_mode_named("max"),
                    "[nn.Bidirectional] unknown merge_mode 'max'; expected concat, sum, mul, ave "
                    "or none (Keras's None)");
  CHECK(nn::merge_mode_named("ave") == nn::MergeMode::ave);
  CHECK_THROWS_WITH(nn::Bidirectional(nn::GRU(3), {.merge_mode = static_cast<nn::MergeMode>(9)}),
                    Contains("[nn.Bidirectional]") && Contains("unknown merge_mode 9"));
  nn::Bidirectional none(nn::GRU(3), {.merge_mode = nn::MergeMode::none, .name = "bi_none"});
  const Tensor x = kiln::ones({2, 4, 2});
  CHECK_THROWS_WITH(none(x), Contains("[nn.Bidirectional] bi_none: merge_mode none gives two "
                                      "outputs"));
  CHECK(none.call(x).size() == 2);
  nn::Bidirectional lstm(nn::LSTM(3), {.name = "bi_lstm"});
  CHECK_THROWS_WITH(lstm.call(x, {kiln::zeros({2, 3}), kiln::zeros({2, 3})}),
                    "[nn.Bidirectional] bi_lstm: initial_state must be empty or 4 tensors (2 "
                    "forward states, then 2 backward ones), got 2");
  // The wrapped copies' own checks name their paths.
  CHECK_THROWS_WITH(lstm(kiln::ones({2, 4})),
                    Contains("[nn.LSTM] bi_lstm/forward_lstm") && Contains("rank >= 3"));
  // A stateful Bidirectional needs a static batch, as its copies do.
  nn::Bidirectional stateful(nn::GRU(3, {.stateful = true}), {.name = "bi_stateful"});
  auto traced = kiln::function(
      [&stateful](const Tensor& in) { return stateful(in); },
      kiln::test::options_named("bi_stateful", {kiln::TensorSpec({-1, 4, 2}, kiln::f32)}));
  CHECK_THROWS_WITH(traced(x), Contains("[nn.GRU] bi_stateful/forward_gru") &&
                                   Contains("is stateful, so it needs a static batch"));
}

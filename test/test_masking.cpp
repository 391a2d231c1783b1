// Masking of the recurrent layers (Keras's semantics, see "Padding and masking" in
// nn/recurrent.hpp): a masked batch of padded sequences against each sequence run unpadded to
// its own length, in both forms, eager and traced with a dynamic time dim, in values and
// gradients; nn::sequence_mask; nn::Masking; the errors of a bad mask.
//
// Tolerances: f64 throughout. The masked and the unpadded runs do the same arithmetic on the
// real steps (a where picks the new state unchanged), so they differ only by the rounding of a
// GEMM over a different number of rows: 1e-10 is far below any real difference (a step applied
// where it should be skipped changes values at O(0.1)).
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
namespace nn = kiln::nn;

namespace {

using kiln::test::max_diff;
using kiln::test::weighted_loss;

constexpr double tol = 1e-10;

using kiln::test::GRUKind;
using kiln::test::LSTMKind;
using kiln::test::SimpleRNNKind;

constexpr std::int64_t batch = 3, steps = 6, features = 4, units = 5;
const std::vector<std::int64_t> lengths{6, 3, 1};

Tensor lengths_tensor() { return kiln::tensor<std::int64_t>({6, 3, 1}); }

/// Row b of a [batch, ...] tensor, keeping the batch axis.
Tensor row(const Tensor& t, std::int64_t b) { return kiln::slice(t, 0, b, b + 1); }

/// The first n steps of row b of a [batch, time, ...] tensor.
Tensor prefix(const Tensor& t, std::int64_t b, std::int64_t n) {
  return kiln::slice(row(t, b), 1, 0, n);
}

template <class K>
typename K::Options options(bool sequences, bool backwards, bool unroll) {
  typename K::Options o;
  o.return_sequences = sequences;
  o.return_state = true;
  o.go_backwards = backwards;
  o.unroll = unroll;
  return o;
}

/// A masked call (by mask and by sequence_lengths) == each sequence run unpadded to its own
/// length: final states and last output; with return_sequences, the real steps' outputs and
/// (Keras) the last real output repeated over the padding (forwards) or zeros over the padding
/// processed first (go_backwards).
template <class K>
void check_against_unpadded(bool sequences, bool backwards, bool unroll, bool with_init) {
  kiln::clear_session();
  INFO(K::name << " return_sequences " << sequences << " go_backwards " << backwards << " unroll "
               << unroll << " initial_state " << with_init);
  // The padding holds large values, so any padded step that ran would show.
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 1, kiln::f64);
  const Tensor mask = nn::sequence_mask(lengths_tensor(), steps);
  const Tensor padded = kiln::where(kiln::expand_dims(mask, -1), x, kiln::full_like(x, 7.0));
  typename K::Layer layer(units, options<K>(sequences, backwards, unroll));
  std::vector<Tensor> init;
  for (std::size_t i = 0; i < K::states && with_init; ++i)
    init.push_back(kiln::random::normal({batch, units}, 0, 1, 10 + i, kiln::f64));
  const std::vector<Tensor> by_mask = layer.call(padded, init, mask);
  const std::vector<Tensor> by_lengths =
      layer.call(padded, {.initial_state = init, .sequence_lengths = lengths_tensor()});
  REQUIRE(by_mask.size() == 1 + K::states);
  REQUIRE(by_lengths.size() == by_mask.size());
  for (std::size_t i = 0; i < by_mask.size(); ++i) CHECK(max_diff(by_mask[i], by_lengths[i]) == 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    INFO("sequence " << b << " length " << lengths[b]);
    const std::int64_t n = lengths[b];
    std::vector<Tensor> init_b;
    for (const Tensor& s : init) init_b.push_back(row(s, b));
    const std::vector<Tensor> want = layer.call(prefix(padded, b, n), init_b);
    for (std::size_t i = 1; i < want.size(); ++i)
      CHECK(max_diff(row(by_mask[i], b), want[i]) < tol);
    if (!sequences) {
      CHECK(max_diff(row(by_mask[0], b), want[0]) < tol);
      continue;
    }
    const Tensor got = row(by_mask[0], b);  // [1, steps, units], in processing order
    if (!backwards) {
      CHECK(max_diff(kiln::slice(got, 1, 0, n), want[0]) < tol);
      // Padded steps carry the last real output through unchanged (the unpadded run above may
      // be the fused layer, equal within rounding).
      const Tensor last = kiln::slice(got, 1, n - 1, n);
      for (std::int64_t t = n; t < steps; ++t)
        CHECK(max_diff(kiln::slice(got, 1, t, t + 1), last) == 0);
    } else {
      // The padding comes first in processing order: zeros, then the unpadded run.
      CHECK(max_diff(kiln::slice(got, 1, 0, steps - n),
                     kiln::zeros({1, steps - n, units}, kiln::f64)) == 0);
      CHECK(max_diff(kiln::slice(got, 1, steps - n, steps), want[0]) < tol);
    }
  }
}

template <class K>
void check_kind_against_unpadded() {
  for (bool seq : {false, true})
    for (bool back : {false, true})
      for (bool unroll : {false, true})
        for (bool init : {false, true}) check_against_unpadded<K>(seq, back, unroll, init);
}

/// Gradients of the masked batch's loss (final states and last output) with respect to the
/// weights and x == the sum over the sequences of their unpadded runs' gradients (and zero for
/// the padded steps of x). Eagerly and traced with dynamic batch and time (one trace), in both
/// forms.
template <class K>
void check_gradients(bool backwards, bool unroll) {
  kiln::clear_session();
  INFO(K::name << " go_backwards " << backwards << " unroll " << unroll);
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 2, kiln::f64);
  typename K::Layer layer(units, options<K>(false, backwards, unroll));
  layer.call(x);
  const Tensor mask = nn::sequence_mask(lengths_tensor(), steps);
  const auto masked_grads = [&layer](const Tensor& in, const Tensor& m) {
    kiln::GradientTape tape({.persistent = true});
    tape.watch(in);
    const Tensor loss = weighted_loss(layer.call(in, {}, m));
    std::vector<Tensor> g = tape.gradient(loss, layer.trainable_variables());
    g.push_back(tape.gradient(loss, std::vector<Tensor>{in})[0]);
    return g;
  };
  // The unpadded runs, one per sequence, in one tape.
  std::vector<Tensor> want;
  {
    kiln::GradientTape tape({.persistent = true});
    tape.watch(x);
    Tensor loss;
    for (std::int64_t b = 0; b < batch; ++b) {
      const Tensor term = weighted_loss(layer.call(prefix(x, b, lengths[b])));
      loss = loss.defined() ? loss + term : term;
    }
    want = tape.gradient(loss, layer.trainable_variables());
    want.push_back(tape.gradient(loss, std::vector<Tensor>{x})[0]);
  }
  const Tensor real = kiln::cast(kiln::expand_dims(mask, -1), kiln::f64);
  CHECK(max_diff(want.back() * real, want.back()) == 0);  // the padding has no gradient
  const auto check = [&](const std::vector<Tensor>& got) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("gradient " << i);
      CHECK(max_diff(got[i], want[i]) < 1e-9);
    }
  };
  check(masked_grads(x, mask));
  if (unroll) return;  // the traced form below has a dynamic time dim
  kiln::FunctionOptions o;
  o.name = "masked_gradients";
  o.input_signature = {kiln::TensorSpec({-1, -1, features}, kiln::f64),
                       kiln::TensorSpec({-1, -1}, kiln::boolean)};
  auto traced = kiln::function(masked_grads, o);
  check(traced(x, mask));
  // Longer padding: the same gradients for the real steps, the same trace.
  const Tensor longer = kiln::concat({x, kiln::full({batch, 4, features}, 3.0, kiln::f64)}, 1);
  const Tensor longer_mask = nn::sequence_mask(lengths_tensor(), steps + 4);
  const std::vector<Tensor> got = traced(longer, longer_mask);
  for (std::size_t i = 0; i + 1 < got.size(); ++i) CHECK(max_diff(got[i], want[i]) < 1e-9);
  CHECK(max_diff(kiln::slice(got.back(), 1, 0, steps), want.back()) < 1e-9);
  CHECK(max_diff(kiln::slice(got.back(), 1, steps, steps + 4),
                 kiln::zeros({batch, 4, features}, kiln::f64)) == 0);
  CHECK(traced.tracing_count() == 1);
}

}  // namespace

TEST_CASE("a masked recurrent layer equals each sequence run unpadded to its length",
          "[masking][nn]") {
  SECTION("LSTM") { check_kind_against_unpadded<LSTMKind>(); }
  SECTION("GRU") { check_kind_against_unpadded<GRUKind>(); }
  SECTION("SimpleRNN") { check_kind_against_unpadded<SimpleRNNKind>(); }
}

TEST_CASE("gradients through the mask equal the unpadded runs', eager and traced",
          "[masking][nn][autodiff]") {
  for (bool back : {false, true})
    for (bool unroll : {false, true}) {
      check_gradients<LSTMKind>(back, unroll);
      check_gradients<GRUKind>(back, unroll);
      check_gradients<SimpleRNNKind>(back, unroll);
    }
}

TEST_CASE("padded steps do not change the final state", "[masking][nn]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 3, kiln::f64);
  const Tensor mask = nn::sequence_mask(lengths_tensor(), steps);
  const Tensor real = kiln::expand_dims(mask, -1);
  const Tensor other = kiln::where(real, x, kiln::random::normal(x.shape(), 5, 3, 4, kiln::f64));
  for (bool unroll : {false, true}) {
    INFO("unroll " << unroll);
    nn::LSTM lstm(units, {.return_state = true, .unroll = unroll});
    const std::vector<Tensor> a = lstm.call(x, {}, mask);
    const std::vector<Tensor> b = lstm.call(other, {}, mask);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(max_diff(a[i], b[i]) == 0);
    // Without the mask the padding does change it (so the check above can fail).
    CHECK(max_diff(lstm.call(x)[1], lstm.call(other)[1]) > 1e-3);
    // An all-true mask changes nothing.
    const std::vector<Tensor> plain = lstm.call(x);
    const std::vector<Tensor> all_real =
        lstm.call(x, {}, kiln::ones({batch, steps}, kiln::boolean));
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(max_diff(plain[i], all_real[i]) < tol);
  }
  // A fully masked sequence keeps its initial state; its output is zeros (Keras).
  nn::GRU gru(units, {.return_state = true});
  const Tensor h0 = kiln::random::normal({batch, units}, 0, 1, 5, kiln::f64);
  const std::vector<Tensor> out = gru.call(x, {h0}, kiln::zeros({batch, steps}, kiln::boolean));
  CHECK(max_diff(out[1], h0) == 0);
  CHECK(max_diff(out[0], kiln::zeros({batch, units}, kiln::f64)) == 0);
}

TEST_CASE("sequence_lengths with a dynamic time dim: one trace", "[masking][nn][function]") {
  kiln::clear_session();
  nn::SimpleRNN rnn(units, {.return_sequences = true, .return_state = true});
  kiln::FunctionOptions o;
  o.name = "by_lengths";
  o.input_signature = {kiln::TensorSpec({-1, -1, features}, kiln::f64),
                       kiln::TensorSpec({-1}, kiln::i32)};
  auto f = kiln::function(
      [&](const Tensor& in, const Tensor& n) { return rnn.call(in, {.sequence_lengths = n}); }, o);
  for (std::int64_t t : {6, 9}) {
    INFO("time " << t);
    const Tensor x = kiln::random::normal({batch, t, features}, 0, 1, 6, kiln::f64);
    const Tensor n = kiln::tensor<std::int32_t>({4, 1, 6});
    const std::vector<Tensor> got = f(x, n);
    const std::vector<Tensor> want = rnn.call(x, {}, nn::sequence_mask(n, t));
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(max_diff(got[i], want[i]) < tol);
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("sequence_mask", "[masking][nn]") {
  const Tensor m = nn::sequence_mask(kiln::tensor<std::int32_t>({2, 0, 4}), 4);
  CHECK(m.dtype() == kiln::boolean);
  CHECK(m.shape() == Shape{3, 4});
  CHECK(kiln::cast(m, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(nn::sequence_mask(kiln::tensor<std::int64_t>({1, 5}), 2).shape() == Shape{2, 2});
  CHECK(nn::sequence_mask(kiln::tensor<std::int64_t>({1, 5}), 0).shape() == Shape{2, 0});
  CHECK_THROWS_WITH(nn::sequence_mask(kiln::ones({3}), 4),
                    Catch::Contains("[nn.sequence_mask] the lengths must be an i32 or i64"));
  CHECK_THROWS_WITH(nn::sequence_mask(kiln::tensor<std::int32_t>({1}), -1),
                    Catch::Contains("max_time must be >= 0"));
}

TEST_CASE("Masking: the mask of any feature != mask_value, and x * mask", "[masking][nn]") {
  // Sequence 0: steps 0 and 2 real; sequence 1: only step 1 (-1 is the mask value).
  const Tensor x = kiln::tensor<float>({1, 2, -1, -1, 0, -1,  //
                                        -1, -1, 3, -1, -1, -1},
                                       {2, 3, 2});
  nn::Masking masking(-1.0);
  const Tensor m = masking.mask(x);
  CHECK(m.dtype() == kiln::boolean);
  CHECK(kiln::cast(m, kiln::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, 0, 1, 0, 1, 0});
  CHECK(masking(x).to_vector<float>() == std::vector<float>{1, 2, 0, 0, 0, -1, 0, 0, 3, -1, 0, 0});
  CHECK(nn::Masking().mask(kiln::zeros({2, 3, 2})).shape() == Shape{2, 3});
  CHECK_THROWS_WITH(masking(kiln::ones({4})), Catch::Contains("[nn.Masking] masking: needs"));
  // Its mask into an LSTM: the same as the lengths of the real prefix of each sequence.
  kiln::clear_session();
  const Tensor seqs =
      kiln::where(kiln::expand_dims(nn::sequence_mask(lengths_tensor(), steps), -1),
                  kiln::random::normal({batch, steps, features}, 0, 1, 7), kiln::zeros({1}));
  nn::Masking zero_masking;
  nn::LSTM lstm(units);
  const Tensor got = lstm.call(zero_masking(seqs), {}, zero_masking.mask(seqs))[0];
  CHECK(max_diff(got, lstm.call(seqs, {.sequence_lengths = lengths_tensor()})[0]) == 0);
}

TEST_CASE("a bad mask is an error naming the layer", "[masking][nn]") {
  kiln::clear_session();
  const Tensor x = kiln::ones({2, 3, 4});
  nn::LSTM lstm(3);
  nn::GRU gru(3, {.name = "my_gru"});
  nn::SimpleRNN rnn(3, {.unroll = true});
  CHECK_THROWS_WITH(lstm.call(x, {}, kiln::ones({2, 4}, kiln::boolean)),
                    Catch::Contains("[nn.LSTM] lstm: the mask must be bool [batch, time] = bool "
                                    "[2,3] for the input [2,3,4], got bool [2,4]"));
  CHECK_THROWS_WITH(gru.call(x, {}, kiln::ones({2, 3})),
                    Catch::Contains("[nn.GRU] my_gru: the mask must be bool [batch, time]") &&
                        Catch::Contains("got f32 [2,3]"));
  CHECK_THROWS_WITH(rnn.call(x, {}, kiln::ones({2, 3, 1}, kiln::boolean)),
                    Catch::Contains("[nn.SimpleRNN] simple_rnn: the mask must be bool"));
  CHECK_THROWS_WITH(lstm.call(x, {.sequence_lengths = kiln::ones({2})}),
                    Catch::Contains("[nn.LSTM] lstm: sequence_lengths must be i32 or i64 [batch] "
                                    "= [2], got f32 [2]"));
  CHECK_THROWS_WITH(lstm.call(x, {.sequence_lengths = kiln::tensor<std::int32_t>({1, 2, 3})}),
                    Catch::Contains("sequence_lengths must be i32 or i64"));
  CHECK_THROWS_WITH(lstm.call(x, {.mask = kiln::ones({2, 3}, kiln::boolean),
                                  .sequence_lengths = kiln::tensor<std::int32_t>({1, 2})}),
                    Catch::Contains("[nn.LSTM] lstm: give a mask or sequence_lengths, not both"));
}

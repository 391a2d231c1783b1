// The convolution, pooling, reshaping, normalization and attention layers: shapes in both
// layouts, values against the functional ops called with the layers' own variables, variables
// created once at stable paths, BatchNormalization's moving statistics (eager and traced),
// gradients, architecture files, and every error message.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::DataLayout;
using kiln::Shape;
using kiln::Tensor;
using kiln::TensorSpec;
using kiln::Variable;
namespace nn = kiln::nn;

namespace {

using kiln::test::max_diff;
using kiln::test::names_of;

Tensor normal(const Shape& shape, std::uint64_t seed) {
  return kiln::random::normal(shape, 0, 1, seed);
}

kiln::FunctionOptions signature(std::vector<TensorSpec> specs) {
  return kiln::test::options_named("layers_extra", std::move(specs));
}

/// kiln::ConvOptions with these settings (the others as default).
kiln::ConvOptions conv_options(std::vector<std::int64_t> strides,
                               std::vector<std::int64_t> dilations = {},
                               kiln::ConvPadding padding = kiln::ConvPadding::valid,
                               DataLayout layout = DataLayout::channels_last) {
  kiln::ConvOptions o;
  o.strides = std::move(strides);
  o.dilations = std::move(dilations);
  o.padding = padding;
  o.layout = layout;
  return o;
}

kiln::ConvTransposeOptions transpose_options(std::vector<std::int64_t> strides,
                                             kiln::ConvPadding padding = kiln::ConvPadding::valid,
                                             DataLayout layout = DataLayout::channels_last) {
  kiln::ConvTransposeOptions o;
  o.strides = std::move(strides);
  o.padding = padding;
  o.layout = layout;
  return o;
}

kiln::PoolOptions pool_options(std::vector<std::int64_t> window,
                               std::vector<std::int64_t> strides = {},
                               kiln::ConvPadding padding = kiln::ConvPadding::valid) {
  kiln::PoolOptions o;
  o.window = std::move(window);
  o.strides = std::move(strides);
  o.padding = padding;
  return o;
}

/// Replaces every variable of m with random values, so that initial zeros and ones (biases,
/// gamma, beta, moving statistics) do not hide a wrong use of them.
void randomize(const kiln::Module& m, std::uint64_t seed) {
  for (const Variable& v : m.variables()) {
    Tensor value = kiln::random::uniform(v.shape(), 0.5, 1.5, seed++, v.dtype());
    v.assign(value);
  }
}

/// The tape's gradient of a weighted sum of layer(x) for each trainable variable: each must be
/// defined and somewhere nonzero.
void check_gradients_flow(nn::Layer& layer, const Tensor& x) {
  (void)layer(x);
  const std::vector<Variable> vars = layer.trainable_variables();
  REQUIRE_FALSE(vars.empty());
  kiln::GradientTape tape;
  const Tensor loss = kiln::test::weighted_loss({layer(x)});
  const std::vector<Tensor> grads = tape.gradient(loss, vars);
  REQUIRE(grads.size() == vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    INFO(vars[i].name());
    REQUIRE(grads[i].defined());
    CHECK(grads[i].shape() == vars[i].shape());
    CHECK(kiln::max(kiln::abs(grads[i])).item<float>() > 0.0f);
  }
}

}  // namespace

TEST_CASE("Conv2D: shapes in both layouts, values of kiln::conv with its variables",
          "[layers_extra]") {
  kiln::clear_session();
  const Tensor x = normal({2, 7, 6, 3}, 1);
  nn::Conv2D conv(
      4, {3},
      {.strides = {2, 1}, .padding = kiln::ConvPadding::same, .activation = nn::Activation::relu});
  const Tensor y = conv(x);
  CHECK(y.shape() == Shape{2, 4, 6, 4});
  CHECK(names_of(conv.variables()) == std::vector<std::string>{"conv2d/kernel", "conv2d/bias"});
  CHECK(conv.kernel().shape() == Shape{3, 3, 3, 4});
  CHECK(conv.bias().shape() == Shape{4});
  randomize(conv, 10);
  const Tensor expected = kiln::relu(
      kiln::conv2d(x, conv.kernel().value(), conv_options({2, 1}, {}, kiln::ConvPadding::same)) +
      conv.bias().value());
  CHECK(max_diff(conv(x), expected) < 1e-5);

  // channels_first: OIHW kernel, [N, C, H, W] in and out, the bias along axis 1.
  nn::Conv2D first(5, {3, 2}, {.dilation_rate = {2}, .data_format = DataLayout::channels_first});
  const Tensor xf = kiln::transpose(x, {0, 3, 1, 2});
  CHECK(first(xf).shape() == Shape{2, 5, 3, 4});
  CHECK(first.kernel().shape() == Shape{5, 3, 3, 2});
  randomize(first, 20);
  const Tensor expected_first =
      kiln::conv2d(xf, first.kernel().value(),
                   conv_options({}, {2, 2}, kiln::ConvPadding::valid, DataLayout::channels_first)) +
      kiln::reshape(first.bias().value(), {1, 5, 1, 1});
  CHECK(max_diff(first(xf), expected_first) < 1e-5);

  // The two layouts compute the same function of the same weights.
  nn::Conv2D last(5, {3, 2}, {.dilation_rate = {2}});
  (void)last(x);
  last.kernel().assign(kiln::transpose(first.kernel().value(), {2, 3, 1, 0}));
  last.bias().assign(first.bias().value());
  CHECK(max_diff(kiln::transpose(last(x), {0, 3, 1, 2}), first(xf)) < 1e-4);

  // Grouped, without bias.
  nn::Conv2D grouped(6, {1}, {.groups = 3, .use_bias = false});
  CHECK(grouped(x).shape() == Shape{2, 7, 6, 6});
  CHECK(grouped.kernel().shape() == Shape{1, 1, 1, 6});
  CHECK(grouped.variables().size() == 1);
}

TEST_CASE("Conv kernels take Keras's fans in both layouts", "[layers_extra]") {
  kiln::clear_session();
  // glorot_uniform with a seed: the channels_first kernel is the channels_last one transposed.
  const kiln::init::Initializer init = kiln::init::glorot_uniform(5);
  nn::Conv2D a(8, {3}, {.kernel_initializer = init});
  nn::Conv2D b(8, {3}, {.data_format = DataLayout::channels_first, .kernel_initializer = init});
  (void)a(kiln::zeros({1, 5, 5, 4}));
  (void)b(kiln::zeros({1, 4, 5, 5}));
  CHECK(max_diff(kiln::transpose(a.kernel().value(), {3, 2, 0, 1}), b.kernel().value()) == 0.0);
  const double limit = std::sqrt(6.0 / (9 * 4 + 9 * 8));
  CHECK(kiln::max(kiln::abs(a.kernel().value())).item<float>() <= limit);
  CHECK(kiln::max(kiln::abs(a.kernel().value())).item<float>() > 0.8 * limit);
}

TEST_CASE("Conv1D and Conv2DTranspose: shapes and values", "[layers_extra]") {
  kiln::clear_session();
  const Tensor x = normal({3, 9, 2}, 2);
  nn::Conv1D conv(4, {3}, {.strides = {2}});
  CHECK(conv(x).shape() == Shape{3, 4, 4});
  CHECK(names_of(conv.variables()) == std::vector<std::string>{"conv1d/kernel", "conv1d/bias"});
  CHECK(conv.kernel().shape() == Shape{3, 2, 4});
  randomize(conv, 30);
  CHECK(max_diff(conv(x), kiln::conv1d(x, conv.kernel().value(), conv_options({2})) +
                              conv.bias().value()) < 1e-5);
  nn::Conv1D first(4, {3},
                   {.padding = kiln::ConvPadding::same, .data_format = DataLayout::channels_first});
  CHECK(first(kiln::transpose(x, {0, 2, 1})).shape() == Shape{3, 4, 9});
  CHECK(first.kernel().shape() == Shape{4, 2, 3});

  const Tensor img = normal({2, 4, 5, 3}, 3);
  nn::Conv2DTranspose up(6, {3}, {.strides = {2}, .activation = nn::Activation::tanh});
  CHECK(up(img).shape() == Shape{2, 9, 11, 6});
  CHECK(names_of(up.variables()) ==
        std::vector<std::string>{"conv2d_transpose/kernel", "conv2d_transpose/bias"});
  CHECK(up.kernel().shape() == Shape{3, 3, 6, 3});
  randomize(up, 40);
  CHECK(max_diff(up(img), kiln::tanh(kiln::conv_transpose(img, up.kernel().value(),
                                                          transpose_options({2, 2})) +
                                     up.bias().value())) < 1e-5);
  nn::Conv2DTranspose same(2, {3},
                           {.strides = {2},
                            .padding = kiln::ConvPadding::same,
                            .data_format = DataLayout::channels_first});
  const Tensor imgf = kiln::transpose(img, {0, 3, 1, 2});
  CHECK(same(imgf).shape() == Shape{2, 2, 8, 10});
  CHECK(same.kernel().shape() == Shape{3, 2, 3, 3});
  randomize(same, 50);
  CHECK(max_diff(same(imgf), kiln::conv_transpose(imgf, same.kernel().value(),
                                                  transpose_options({2, 2}, kiln::ConvPadding::same,
                                                                    DataLayout::channels_first)) +
                                 kiln::reshape(same.bias().value(), {1, 2, 1, 1})) < 1e-5);
  nn::Conv2DTranspose padded(1, {3}, {.strides = {2}, .output_padding = {1}});
  CHECK(padded(img).shape() == Shape{2, 10, 12, 1});
}

TEST_CASE("layers create their variables once, also when retraced", "[layers_extra]") {
  kiln::clear_session();
  nn::Sequential model({nn::Conv2D(4, {3}), nn::BatchNormalization(), nn::MaxPooling2D(),
                        nn::Flatten(), nn::Dense(2)});
  const Tensor x = normal({2, 6, 6, 3}, 4);
  (void)model(x);
  const std::vector<std::string> paths = names_of(model.variables());
  CHECK(paths == std::vector<std::string>{"sequential/conv2d/kernel", "sequential/conv2d/bias",
                                          "sequential/batch_normalization/gamma",
                                          "sequential/batch_normalization/beta",
                                          "sequential/batch_normalization/moving_mean",
                                          "sequential/batch_normalization/moving_variance",
                                          "sequential/dense/kernel", "sequential/dense/bias"});
  const std::size_t global = kiln::global_variables().size();
  (void)model(x);
  auto f = kiln::function([&](const Tensor& in) { return model(in); },
                          signature({TensorSpec({-1, 6, 6, 3})}));
  for (std::int64_t batch : {1, 3, 5}) {
    const Tensor xb = normal({batch, 6, 6, 3}, 5 + static_cast<std::uint64_t>(batch));
    CHECK(max_diff(f(xb), model(xb)) < 1e-5);
  }
  CHECK(f.tracing_count() == 1);
  kiln::clear_caches();
  (void)f(x);
  CHECK(f.tracing_count() == 2);
  CHECK(names_of(model.variables()) == paths);
  CHECK(kiln::global_variables().size() == global);
  CHECK(model.trainable_variables().size() == 6);
  CHECK(model.non_trainable_variables().size() == 2);
}

TEST_CASE("pooling layers: values of the pooling ops, strides default to the pool size",
          "[layers_extra]") {
  kiln::clear_session();
  const Tensor x = normal({2, 7, 6, 3}, 6);
  const Tensor xf = kiln::transpose(x, {0, 3, 1, 2});
  nn::MaxPooling2D max2;
  CHECK(max2.options().strides == std::vector<std::int64_t>{2, 2});
  CHECK(max2(x).shape() == Shape{2, 3, 3, 3});
  CHECK(max_diff(max2(x), kiln::max_pool(x, pool_options({2, 2}))) == 0.0);
  nn::AveragePooling2D avg2({3, 2}, {.strides = {1}, .padding = kiln::ConvPadding::same});
  CHECK(avg2(x).shape() == Shape{2, 7, 6, 3});
  CHECK(max_diff(avg2(x),
                 kiln::avg_pool(x, pool_options({3, 2}, {1, 1}, kiln::ConvPadding::same))) == 0.0);
  // Keras's same padding: the corner mean is over the positions inside x only.
  const Tensor corner = kiln::mean(kiln::slice(kiln::slice(x, 1, 0, 2), 2, 0, 2), {1, 2});
  CHECK(max_diff(kiln::reshape(kiln::slice(kiln::slice(avg2(x), 1, 0, 1), 2, 0, 1), {2, 3}),
                 corner) < 1e-6);
  nn::MaxPooling2D first({2}, {.data_format = DataLayout::channels_first});
  CHECK(max_diff(first(xf), kiln::transpose(max2(x), {0, 3, 1, 2})) == 0.0);

  const Tensor seq = normal({2, 9, 4}, 7);
  nn::MaxPooling1D max1;
  CHECK(max1(seq).shape() == Shape{2, 4, 4});
  CHECK(max_diff(max1(seq), kiln::max_pool(seq, pool_options({2}))) == 0.0);
  nn::AveragePooling1D avg1({3}, {.strides = {2}});
  CHECK(max_diff(avg1(seq), kiln::avg_pool(seq, pool_options({3}, {2}))) == 0.0);
  CHECK(avg1(seq).shape() == Shape{2, 4, 4});

  CHECK(max_diff(nn::GlobalAveragePooling2D()(x), kiln::mean(x, {1, 2})) < 1e-6);
  CHECK(max_diff(nn::GlobalMaxPooling2D()(x), kiln::max(x, {1, 2})) == 0.0);
  CHECK(max_diff(nn::GlobalAveragePooling1D()(seq), kiln::mean(seq, {1})) < 1e-6);
  CHECK(max_diff(nn::GlobalMaxPooling1D()(seq), kiln::max(seq, {1})) == 0.0);
  CHECK(max_diff(nn::GlobalAveragePooling2D({.data_format = DataLayout::channels_first})(xf),
                 kiln::mean(x, {1, 2})) < 1e-6);
  CHECK(nn::GlobalMaxPooling2D({.keepdims = true})(x).shape() == Shape{2, 1, 1, 3});
  CHECK(nn::GlobalMaxPooling1D({.data_format = DataLayout::channels_first, .keepdims = true})(seq)
            .shape() == Shape{2, 9, 1});
  CHECK(max2.variables().empty());
}

TEST_CASE("Flatten, Reshape and ActivationLayer, also with a dynamic batch", "[layers_extra]") {
  kiln::clear_session();
  const Tensor x = normal({3, 4, 2, 5}, 8);
  nn::Flatten flatten;
  CHECK(flatten(x).shape() == Shape{3, 40});
  CHECK(max_diff(flatten(x), kiln::reshape(x, {3, 40})) == 0.0);
  CHECK(flatten(kiln::ones({4})).shape() == Shape{4, 1});
  nn::Reshape reshape({8, -1});
  CHECK(reshape(x).shape() == Shape{3, 8, 5});
  CHECK(max_diff(reshape(x), kiln::reshape(x, {3, 8, 5})) == 0.0);
  CHECK(nn::Reshape({10, 4})(x).shape() == Shape{3, 10, 4});
  nn::ActivationLayer relu(nn::Activation::relu);
  CHECK(max_diff(relu(x), kiln::relu(x)) == 0.0);
  nn::ActivationLayer softmax("softmax");
  CHECK(softmax.activation() == nn::Activation::softmax);
  CHECK(max_diff(softmax(x), kiln::softmax(x, -1)) == 0.0);
  CHECK(softmax.name() == "activation");

  auto f = kiln::function(
      [&](const Tensor& in) {
        return std::vector<Tensor>{flatten(in), reshape(in), relu(in)};
      },
      signature({TensorSpec({-1, 4, 2, 5})}));
  for (std::int64_t batch : {1, 6}) {
    const Tensor xb = normal({batch, 4, 2, 5}, 9 + static_cast<std::uint64_t>(batch));
    const std::vector<Tensor> out = f(xb);
    CHECK(out[0].shape() == Shape{batch, 40});
    CHECK(max_diff(out[0], flatten(xb)) == 0.0);
    CHECK(out[1].shape() == Shape{batch, 8, 5});
    CHECK(max_diff(out[2], relu(xb)) == 0.0);
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("LayerNormalization: values of layer_norm with its variables", "[layers_extra]") {
  kiln::clear_session();
  const Tensor x = normal({2, 3, 6}, 11);
  nn::LayerNormalization ln;
  const Tensor y = ln(x);
  CHECK(names_of(ln.variables()) ==
        std::vector<std::string>{"layer_normalization/gamma", "layer_normalization/beta"});
  CHECK(max_diff(ln.gamma().value(), kiln::ones({6})) == 0.0);
  CHECK(max_diff(ln.beta().value(), kiln::zeros({6})) == 0.0);
  CHECK(max_diff(y, nn::layer_norm(x, Tensor(), Tensor(), -1, 1e-3)) < 1e-6);
  randomize(ln, 60);
  CHECK(max_diff(ln(x), nn::layer_norm(x, ln.gamma().value(), ln.beta().value(), -1, 1e-3)) < 1e-6);
  // By hand: epsilon 1e-3, biased variance.
  const auto [m, v] = nn::moments(x, {2}, true);
  CHECK(max_diff(ln(x), (x - m) / kiln::sqrt(v + 1e-3) * ln.gamma().value() + ln.beta().value()) <
        1e-5);

  nn::LayerNormalization middle({.axis = 1, .epsilon = 1e-5, .center = false});
  const Tensor ym = middle(x);
  CHECK(names_of(middle.variables()) == std::vector<std::string>{"layer_normalization/gamma"});
  CHECK(middle.gamma().shape() == Shape{3});
  randomize(middle, 70);
  const auto [m1, v1] = nn::moments(x, {1}, true);
  CHECK(max_diff(middle(x), (x - m1) / kiln::sqrt(v1 + 1e-5) *
                                kiln::reshape(middle.gamma().value(), {1, 3, 1})) < 1e-5);
  CHECK(ym.shape() == x.shape());
}

TEST_CASE("BatchNormalization: batch statistics in training, moving ones in inference",
          "[layers_extra]") {
  kiln::clear_session();
  nn::BatchNormalization bn({.momentum = 0.9});
  const Tensor x0 = normal({4, 3, 5}, 12);
  // Inference before any training: the initial moving statistics (0 and 1).
  CHECK(max_diff(bn(x0), x0 / std::sqrt(1.0 + 1e-3)) < 1e-6);
  CHECK(names_of(bn.trainable_variables()) ==
        std::vector<std::string>{"batch_normalization/gamma", "batch_normalization/beta"});
  CHECK(names_of(bn.non_trainable_variables()) ==
        std::vector<std::string>{"batch_normalization/moving_mean",
                                 "batch_normalization/moving_variance"});
  randomize(bn, 80);
  const Tensor gamma = bn.gamma().value(), beta = bn.beta().value();
  Tensor moving_mean = bn.moving_mean().value(), moving_var = bn.moving_variance().value();
  for (std::uint64_t step = 0; step < 3; ++step) {
    const Tensor x = normal({4, 3, 5}, 100 + step) * 2.0 + 1.0;
    const Tensor mean = kiln::mean(x, {0, 1});
    const Tensor var = kiln::mean(kiln::square(x - mean), {0, 1});
    Tensor y;
    {
      nn::LearningPhaseScope training(true);
      y = bn(x);
    }
    CHECK(max_diff(y, (x - mean) / kiln::sqrt(var + 1e-3) * gamma + beta) < 1e-5);
    moving_mean = moving_mean * 0.9 + mean * 0.1;
    moving_var = moving_var * 0.9 + var * 0.1;
    CHECK(max_diff(bn.moving_mean().value(), moving_mean) < 1e-6);
    CHECK(max_diff(bn.moving_variance().value(), moving_var) < 1e-6);
  }
  // Inference uses them and leaves them as they are.
  CHECK(max_diff(bn(x0), (x0 - moving_mean) / kiln::sqrt(moving_var + 1e-3) * gamma + beta) < 1e-5);
  CHECK(max_diff(bn(x0, false),
                 nn::batch_norm(x0, moving_mean, moving_var, gamma, beta, 1e-3, -1)) < 1e-6);
  CHECK(max_diff(bn.moving_mean().value(), moving_mean) == 0.0);

  // channels_first: statistics per axis-1 channel.
  nn::BatchNormalization first({.axis = 1, .center = false, .scale = false});
  const Tensor xf = normal({3, 2, 4, 4}, 13);
  const Tensor out = first(xf, true);
  const auto [mean, var] = nn::moments(xf, {0, 2, 3}, true);
  CHECK(max_diff(out, (xf - mean) / kiln::sqrt(var + 1e-3)) < 1e-5);
  CHECK(first.variables().size() == 2);
  CHECK(max_diff(first.moving_mean().value(), kiln::reshape(mean, {2}) * 0.01) < 1e-6);
}

TEST_CASE("BatchNormalization: a traced training step updates the statistics as eager does",
          "[layers_extra]") {
  kiln::clear_session();
  nn::BatchNormalization eager_bn({.name = "eager"});
  nn::BatchNormalization traced_bn({.name = "traced"});
  const Tensor x0 = normal({6, 4}, 14);
  (void)eager_bn(x0);
  (void)traced_bn(x0);
  randomize(eager_bn, 90);
  traced_bn.set_weights(eager_bn.get_weights());
  const Tensor initial_mean = eager_bn.moving_mean().value();
  auto step = kiln::function(
      [&](const Tensor& x) {
        nn::LearningPhaseScope training(true);
        return traced_bn(x);
      },
      signature({TensorSpec({-1, 4})}));
  for (std::uint64_t i = 0; i < 4; ++i) {
    const Tensor x = normal({6 + static_cast<std::int64_t>(i), 4}, 200 + i) + 3.0;
    Tensor expected;
    {
      nn::LearningPhaseScope training(true);
      expected = eager_bn(x);
    }
    CHECK(max_diff(step(x), expected) < 1e-5);
    CHECK(max_diff(traced_bn.moving_mean().value(), eager_bn.moving_mean().value()) < 1e-6);
    CHECK(max_diff(traced_bn.moving_variance().value(), eager_bn.moving_variance().value()) < 1e-6);
  }
  CHECK(step.tracing_count() == 1);
  // Four updates moved the mean from 0.5..1.5 towards 3 (the traced graph did assign).
  CHECK(kiln::min(traced_bn.moving_mean().value() - initial_mean).item<float>() > 0.02f);
}

TEST_CASE("MultiHeadAttention: Keras's projections around scaled_dot_product_attention",
          "[layers_extra]") {
  kiln::clear_session();
  const Tensor query = normal({2, 5, 8}, 15);
  const Tensor value = normal({2, 7, 6}, 16);
  const Tensor key = normal({2, 7, 4}, 17);
  nn::MultiHeadAttention mha(3, 4, {.value_dim = 5});
  const Tensor y = mha.call(query, value, {.key = key});
  CHECK(y.shape() == Shape{2, 5, 8});
  CHECK(names_of(mha.variables()) ==
        std::vector<std::string>{
            "multi_head_attention/query/kernel", "multi_head_attention/query/bias",
            "multi_head_attention/key/kernel", "multi_head_attention/key/bias",
            "multi_head_attention/value/kernel", "multi_head_attention/value/bias",
            "multi_head_attention/attention_output/kernel",
            "multi_head_attention/attention_output/bias"});
  CHECK(mha.variable("query/kernel").shape() == Shape{8, 3, 4});
  CHECK(mha.variable("key/kernel").shape() == Shape{4, 3, 4});
  CHECK(mha.variable("value/kernel").shape() == Shape{6, 3, 5});
  CHECK(mha.variable("attention_output/kernel").shape() == Shape{3, 5, 8});
  randomize(mha, 300);
  const auto w = [&](const std::string& p) { return mha.variable(p).value(); };
  // By hand with matmul: per head h, x @ kernel[:, h, :] + bias[h].
  const auto heads = [&](const Tensor& x, const std::string& name, std::int64_t size) {
    const std::int64_t d = x.dim(2);
    const Tensor flat = kiln::matmul(x, kiln::reshape(w(name + "/kernel"), {d, 3 * size}));
    const Tensor split = kiln::reshape(flat, {2, x.dim(1), 3, size}) +
                         kiln::reshape(w(name + "/bias"), {1, 1, 3, size});
    return kiln::transpose(split, {0, 2, 1, 3});
  };
  const Tensor mask = kiln::random::uniform({2, 5, 7}, 0, 1, 18) > 0.3;
  const Tensor o = nn::scaled_dot_product_attention(
      heads(query, "query", 4), heads(key, "key", 4), heads(value, "value", 5),
      {.mask = kiln::expand_dims(mask, 1), .scale = 0.5});
  const Tensor merged = kiln::reshape(kiln::transpose(o, {0, 2, 1, 3}), {2, 5, 15});
  const Tensor expected =
      kiln::matmul(merged, kiln::reshape(w("attention_output/kernel"), {15, 8})) +
      w("attention_output/bias");
  CHECK(max_diff(mha.call(query, value, {.key = key, .mask = mask}), expected) < 1e-5);

  // Self-attention, causal: position 0 attends to itself only.
  nn::MultiHeadAttention self(2, 3, {.use_bias = false});
  const Tensor x = normal({1, 4, 6}, 19);
  const Tensor causal = self.call(x, x, {.causal = true});
  CHECK(self.variables().size() == 4);
  CHECK(max_diff(self(x), self.call(x, x)) == 0.0);
  const Tensor prefix = self.call(kiln::slice(x, 1, 0, 2), kiln::slice(x, 1, 0, 2));
  CHECK(max_diff(kiln::slice(causal, 1, 0, 2),
                 self.call(kiln::slice(x, 1, 0, 2), kiln::slice(x, 1, 0, 2), {.causal = true})) <
        1e-6);
  CHECK(max_diff(kiln::slice(causal, 1, 0, 1), kiln::slice(prefix, 1, 0, 1)) > 1e-4);
}

TEST_CASE("MultiHeadAttention's dropout drops attention weights, in training only",
          "[layers_extra]") {
  kiln::clear_session();
  const Tensor x = normal({2, 6, 8}, 31);
  nn::MultiHeadAttention plain(2, 4, {.use_bias = false});
  nn::MultiHeadAttention dropped(2, 4, {.use_bias = false, .dropout = 0.5, .seed = 7});
  REQUIRE(dropped.dropout_layer() != nullptr);
  CHECK(plain.dropout_layer() == nullptr);
  (void)plain(x);
  (void)dropped(x);
  randomize(plain, 400);
  randomize(dropped, 400);
  // Inference: no dropout, and no variable for it.
  CHECK(max_diff(dropped(x), plain(x)) == 0.0);
  CHECK(dropped.variables().size() == 4);

  // Training: the weights of each head pass through nn::Dropout(0.5, seed 7), whose first
  // mask is counter 0's. By hand, with a Dropout of the same seed:
  const auto w = [&](const std::string& p) { return dropped.variable(p).value(); };
  const auto heads = [&](const std::string& name) {
    const Tensor flat = kiln::matmul(x, kiln::reshape(w(name + "/kernel"), {8, 8}));
    return kiln::transpose(kiln::reshape(flat, {2, 6, 2, 4}), {0, 2, 1, 3});
  };
  nn::Dropout same_masks(0.5, 7);
  const Tensor weights = same_masks(nn::attention_weights(heads("query"), heads("key")), true);
  const Tensor o = kiln::matmul(weights, heads("value"));
  const Tensor expected = kiln::matmul(kiln::reshape(kiln::transpose(o, {0, 2, 1, 3}), {2, 6, 8}),
                                       kiln::reshape(w("attention_output/kernel"), {8, 8}));
  nn::LearningPhaseScope training(true);
  const Tensor first = dropped(x);
  CHECK(max_diff(first, expected) < 1e-5);
  CHECK(max_diff(first, plain(x)) > 1e-3);
  CHECK(dropped.variable("dropout/rng_counter").value().item<std::int64_t>() == 1);
  // Traced: every replay draws a new mask, as eager calls do.
  auto step = kiln::function([&](const Tensor& t) { return dropped(t); });
  const Tensor second = step(x), third = step(x);
  CHECK(max_diff(second, third) > 1e-3);
  CHECK(dropped.variable("dropout/rng_counter").value().item<std::int64_t>() == 3);
  CHECK(kiln::all(kiln::isfinite(third)).item<bool>());
}

TEST_CASE("gradients reach every trainable variable of the new layers", "[layers_extra]") {
  kiln::clear_session();
  const Tensor img = normal({2, 6, 6, 3}, 20);
  nn::Conv2D conv(4, {3}, {.padding = kiln::ConvPadding::same});
  check_gradients_flow(conv, img);
  nn::Conv2D conv_first(2, {3}, {.data_format = DataLayout::channels_first});
  check_gradients_flow(conv_first, kiln::transpose(img, {0, 3, 1, 2}));
  nn::Conv1D conv1(3, {2});
  check_gradients_flow(conv1, normal({2, 5, 3}, 21));
  nn::Conv2DTranspose up(2, {3}, {.strides = {2}});
  check_gradients_flow(up, img);
  nn::LayerNormalization ln;
  check_gradients_flow(ln, normal({3, 5}, 22));
  nn::BatchNormalization bn;
  {
    nn::LearningPhaseScope training(true);
    check_gradients_flow(bn, img);
  }
  nn::MultiHeadAttention mha(2, 3);
  check_gradients_flow(mha, normal({2, 4, 5}, 23));
  // A CNN's gradients inside a traced training step.
  nn::Sequential model({nn::Conv2D(3, {3}, {.activation = nn::Activation::relu}),
                        nn::BatchNormalization(), nn::MaxPooling2D(), nn::Flatten(), nn::Dense(1)});
  (void)model(img);
  auto grads = kiln::function(
      [&](const Tensor& x) {
        nn::LearningPhaseScope training(true);
        kiln::GradientTape tape;
        const Tensor loss = kiln::sum(kiln::square(model(x)));
        return tape.gradient(loss, model.trainable_variables());
      },
      signature({TensorSpec({-1, 6, 6, 3})}));
  const std::vector<Tensor> g = grads(img);
  REQUIRE(g.size() == 6);
  for (const Tensor& t : g) CHECK(kiln::max(kiln::abs(t)).item<float>() > 0.0f);
}

TEST_CASE("a Sequential CNN round trips through to_json with the same outputs",
          "[layers_extra][architecture]") {
  kiln::clear_session();
  nn::Sequential model(
      {nn::Conv2D(4, {3}, {.padding = kiln::ConvPadding::same, .activation = nn::Activation::relu}),
       nn::BatchNormalization({.momentum = 0.8}), nn::MaxPooling2D(), nn::Flatten(), nn::Dense(3)});
  const Tensor x = normal({2, 8, 8, 3}, 24);
  {
    nn::LearningPhaseScope training(true);
    (void)model(x);  // moving statistics away from 0 and 1
  }
  const Tensor expected = model(x);
  const std::string json = nn::to_json(model);
  const auto copy = nn::from_json<nn::Sequential>(json);
  CHECK(names_of(copy->variables()) == names_of(model.variables()));
  CHECK(nn::to_json(*copy) == json);
  CHECK(max_diff((*copy)(x), expected) > 1e-3);  // other initial weights
  copy->set_weights(model.get_weights());
  CHECK(max_diff((*copy)(x), expected) == 0.0);
  CHECK(json.find("\"BatchNormalization\"") != std::string::npos);
  CHECK(json.find("\"momentum\": 0.8") != std::string::npos);
}

TEST_CASE("every new layer's settings round trip through its config",
          "[layers_extra][architecture]") {
  kiln::clear_session();
  const auto round_trip = [](const nn::Layer& layer) {
    const std::string json = nn::to_json(layer);
    const auto copy = nn::from_json<nn::Layer>(json);
    CHECK(nn::to_json(*copy) == json);
    return json;
  };
  const std::string conv = round_trip(nn::Conv2D(4, {3, 2},
                                                 {.strides = {2, 1},
                                                  .padding = kiln::ConvPadding::same,
                                                  .groups = 2,
                                                  .activation = nn::Activation::tanh,
                                                  .use_bias = false,
                                                  .data_format = DataLayout::channels_first,
                                                  .name = "c"}));
  CHECK(conv.find("channels_first") != std::string::npos);
  CHECK(conv.find("\"same\"") != std::string::npos);
  round_trip(nn::Conv1D(2, {5}, {.dilation_rate = {2}}));
  round_trip(nn::Conv2DTranspose(3, {3}, {.strides = {2}, .output_padding = {1}}));
  round_trip(nn::MaxPooling1D({3}));
  round_trip(nn::MaxPooling2D({2}, {.strides = {1}}));
  round_trip(nn::AveragePooling1D());
  round_trip(nn::AveragePooling2D({3}, {.padding = kiln::ConvPadding::same}));
  round_trip(nn::GlobalAveragePooling1D());
  round_trip(nn::GlobalAveragePooling2D({.keepdims = true}));
  round_trip(nn::GlobalMaxPooling1D({.data_format = DataLayout::channels_first}));
  round_trip(nn::GlobalMaxPooling2D());
  round_trip(nn::Flatten());
  round_trip(nn::Reshape({2, -1}));
  CHECK(round_trip(nn::ActivationLayer("relu")).find("\"Activation\"") != std::string::npos);
  round_trip(nn::LayerNormalization({.axis = 1, .epsilon = 1e-5, .scale = false}));
  round_trip(nn::BatchNormalization({.momentum = 0.5, .center = false}));
  round_trip(nn::MultiHeadAttention(2, 4, {.value_dim = 3, .use_bias = false}));
  const auto mha = nn::from_json<nn::MultiHeadAttention>(
      nn::to_json(nn::MultiHeadAttention(2, 4, {.value_dim = 3})));
  CHECK(mha->value_dim() == 3);
  CHECK(mha->num_heads() == 2);
  round_trip(nn::MultiHeadAttention(2, 4, {.dropout = 0.25, .seed = 3}));
  const auto dropping = nn::from_json<nn::MultiHeadAttention>(
      nn::to_json(nn::MultiHeadAttention(2, 4, {.dropout = 0.25})));
  CHECK(dropping->options().dropout == 0.25);
  REQUIRE(dropping->dropout_layer() != nullptr);
  CHECK(dropping->options().seed == dropping->dropout_layer()->seed());
}

TEST_CASE("a transformer block traced equals eager", "[layers_extra][function]") {
  kiln::clear_session();
  struct Block : kiln::Module {
    nn::MultiHeadAttention attention{2, 4};
    nn::LayerNormalization norm1, norm2;
    nn::Dense hidden{16, nn::Activation::relu}, out{8};
    Block() : Module("block") {
      add_module("attention", attention);
      add_module("norm1", norm1);
      add_module("norm2", norm2);
      add_module("hidden", hidden);
      add_module("out", out);
    }
    Tensor operator()(const Tensor& x) {
      const Tensor h = norm1(x + attention.call(x, x, {.causal = true}));
      return norm2(h + out(hidden(h)));
    }
  } block;
  const Tensor x = normal({2, 5, 8}, 25);
  const Tensor eager = block(x);
  const std::size_t vars = block.variables().size();
  CHECK(vars == 16);
  randomize(block, 400);
  auto f = kiln::function([&](const Tensor& in) { return block(in); },
                          signature({TensorSpec({-1, 5, 8})}));
  for (const Shape& shape : {Shape{2, 5, 8}, Shape{3, 5, 8}, Shape{1, 5, 8}}) {
    const Tensor xs = normal(shape, 26 + static_cast<std::uint64_t>(shape[0]));
    const Tensor traced = f(xs);
    CHECK(traced.shape() == shape);
    CHECK(max_diff(traced, block(xs)) < 1e-5);
  }
  CHECK(f.tracing_count() == 1);
  // Without the causal mask (which needs a static length) the length may be dynamic too. The
  // traced softmax over a dynamic length is the composite (the primitive needs static rows),
  // which sums in another order: the same values to a few ulps, relative to the outputs' size.
  auto g = kiln::function([&](const Tensor& in) { return block.attention(in); },
                          signature({TensorSpec({-1, -1, 8})}));
  for (const Shape& shape : {Shape{2, 5, 8}, Shape{3, 7, 8}, Shape{4, 2, 8}}) {
    const Tensor xs = normal(shape, 40 + static_cast<std::uint64_t>(shape[1]));
    const Tensor eager_attention = block.attention(xs);
    const double size = kiln::max(kiln::abs(eager_attention)).item<float>();
    CAPTURE(size);
    CHECK(max_diff(g(xs), eager_attention) < 1e-6 * (1 + size));
  }
  CHECK(g.tracing_count() == 1);
  CHECK(block.variables().size() == vars);
  CHECK(block.variable("attention/query/kernel").name() == "block/attention/query/kernel");
  CHECK(max_diff(block(x), eager) > 1e-3);
}

TEST_CASE("train::fit trains a CNN with BatchNormalization and updates its moving statistics",
          "[layers_extra][training]") {
  kiln::clear_session();
  nn::Sequential model(
      {nn::Conv2D(4, {3}, {.padding = kiln::ConvPadding::same, .activation = nn::Activation::relu}),
       nn::BatchNormalization(), nn::GlobalAveragePooling2D(), nn::Dense(1)});
  const Tensor x = normal({16, 6, 6, 2}, 27);
  const Tensor y = kiln::reshape(kiln::mean(x, {1, 2, 3}), {16, 1});
  (void)model(x);
  const Tensor before = model.variable("batch_normalization/moving_mean").value();
  kiln::optim::Adam opt({.learning_rate = 1e-2});
  const kiln::train::History history =
      kiln::train::fit(model, opt, nn::losses::mean_squared_error, x, y,
                       {.epochs = 5, .batch_size = 8, .verbose = 0});
  REQUIRE(history.loss.size() == 5);
  CHECK(std::isfinite(history.loss.back()));
  CHECK(history.loss.back() < history.loss.front());
  // Ten training steps moved the moving mean; inference calls leave it.
  const Tensor after = model.variable("batch_normalization/moving_mean").value();
  CHECK(max_diff(after, before) > 1e-3);
  (void)model(x);
  CHECK(max_diff(model.variable("batch_normalization/moving_mean").value(), after) == 0.0);
}

// Every error message of the convolution, pooling, reshaping, normalization and attention
// layers (test_layers_extra.cpp tests what they compute): each names the layer first.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "layer_test_support.hpp"

using kiln::Tensor;
using kiln::TensorSpec;
namespace nn = kiln::nn;
using Catch::Contains;

namespace {

kiln::FunctionOptions signature(std::vector<TensorSpec> specs) {
  return kiln::test::options_named("layers_extra_errors", std::move(specs));
}

}  // namespace

TEST_CASE("errors of the new layers name the layer", "[layers_extra][errors]") {
  kiln::clear_session();
  using kiln::ConvPadding;
  struct Case {
    std::function<void()> run;
    std::string message;
  };
  const Tensor img = kiln::ones({1, 5, 5, 3});
  const std::vector<Case> cases = {
      // Conv1D / Conv2D
      {[] { nn::Conv2D(0, {3}); }, "[nn.Conv2D] conv2d: filters must be positive, got 0"},
      {[] { nn::Conv2D(2, {}); }, "[nn.Conv2D] conv2d: kernel_size is empty"},
      {[] {
         nn::Conv2D(2, {3, 3, 3});
       },
       "[nn.Conv2D] conv2d: kernel_size needs 1 or 2 values, got [3,3,3]"},
      {[] { nn::Conv1D(2, {0}); }, "[nn.Conv1D] conv1d: kernel_size must be >= 1, got [0]"},
      {[] { nn::Conv2D(2, {3}, {.strides = {0}}); },
       "[nn.Conv2D] conv2d: strides must be >= 1, got [0,0]"},
      {[] { nn::Conv2D(2, {3}, {.padding = ConvPadding::explicit_pads}); },
       "[nn.Conv2D] conv2d: padding must be valid or same"},
      {[] { nn::Conv2D(3, {3}, {.groups = 2}); },
       "[nn.Conv2D] conv2d: groups must be positive and divide filters (3), got 2"},
      {[] { nn::Conv2D(2, {3}, {.strides = {2}, .dilation_rate = {2}}); },
       "[nn.Conv2D] conv2d: strides > 1 and dilation_rate > 1 together are not supported"},
      {[] {
         nn::Conv2D(2, {3})(kiln::ones({5, 5, 3}));
       },
       "[nn.Conv2D] conv2d: needs inputs of rank 4, got f32 [5,5,3]"},
      {[] {
         nn::Conv2D(2, {3})(kiln::ones({1, 5, 5, 3}, kiln::i32));
       },
       "[nn.Conv2D] conv2d: needs f32 or f64 inputs, got i32 [1,5,5,3]"},
      {[] { nn::Conv2D(2, {3})(Tensor()); },
       "[nn.Conv2D] conv2d: the input is an undefined tensor"},
      {[] {
         nn::Conv2D(2, {3}, {.groups = 2})(kiln::ones({1, 5, 5, 3}));
       },
       "[nn.Conv2D] conv2d: the input's 3 channels are not divisible by groups = 2"},
      {[&] {
         nn::Conv2D conv(2, {3});
         (void)conv(img);
         (void)conv(kiln::ones({1, 5, 5, 4}));
       },
       "[nn.Conv2D] conv2d was built for other inputs: variable conv2d/kernel is f32 [3,3,3,2], a "
       "call with f32 [1,5,5,4] needs f32 [3,3,4,2]"},
      {[&] {
         nn::Conv2D conv(2, {3}, {.use_bias = false});
         (void)conv(img);
         (void)conv.bias();
       },
       "[nn.Conv2D] conv2d has no bias (use_bias is false)"},
      {[] { (void)nn::Conv2D(2, {3}).kernel(); }, "conv2d has no variable 'kernel'"},
      {[] {
         auto f = kiln::function([](const Tensor& x) { return nn::Conv2D(2, {3})(x); },
                                 signature({TensorSpec({1, 5, 5, -1})}));
         (void)f(kiln::ones({1, 5, 5, 3}));
       },
       "[nn.Conv2D] conv2d: the channel dim of the input"},
      // Conv2DTranspose
      {[] { nn::Conv2DTranspose(-1, {3}); },
       "[nn.Conv2DTranspose] conv2d_transpose: filters must be positive, got -1"},
      {[] { nn::Conv2DTranspose(1, {}); },
       "[nn.Conv2DTranspose] conv2d_transpose: kernel_size is empty"},
      {[] { nn::Conv2DTranspose(1, {3}, {.output_padding = {1}}); },
       "[nn.Conv2DTranspose] conv2d_transpose: output_padding [1,1] must be below strides [1,1]"},
      {[] { nn::Conv2DTranspose(1, {3}, {.padding = ConvPadding::explicit_pads}); },
       "[nn.Conv2DTranspose] conv2d_transpose: padding must be valid or same"},
      {[] {
         nn::Conv2DTranspose(1, {3})(kiln::ones({2, 3}));
       },
       "[nn.Conv2DTranspose] conv2d_transpose: needs inputs of rank 4, got f32 [2,3]"},
      {[&] {
         nn::Conv2DTranspose up(2, {3}, {.use_bias = false});
         (void)up(img);
         (void)up.bias();
       },
       "[nn.Conv2DTranspose] conv2d_transpose has no bias (use_bias is false)"},
      {[&] {
         nn::Conv2DTranspose up(2, {3});
         (void)up(img);
         (void)up(kiln::ones({1, 5, 5, 2}));
       },
       "[nn.Conv2DTranspose] conv2d_transpose was built for other inputs"},
      // pooling
      {[] { nn::MaxPooling2D(std::vector<std::int64_t>{}); },
       "[nn.MaxPooling2D] max_pooling2d: pool_size is empty"},
      {[] {
         nn::MaxPooling1D({2, 2});
       },
       "[nn.MaxPooling1D] max_pooling1d: pool_size needs 1 or 1 values, got [2,2]"},
      {[] { nn::AveragePooling2D({2}, {.strides = {0}}); },
       "[nn.AveragePooling2D] average_pooling2d: strides must be >= 1, got [0,0]"},
      {[] { nn::AveragePooling1D({2}, {.padding = ConvPadding::explicit_pads}); },
       "[nn.AveragePooling1D] average_pooling1d: padding must be valid or same"},
      {[] {
         nn::MaxPooling2D()(kiln::ones({2, 4, 3}));
       },
       "[nn.MaxPooling2D] max_pooling2d: needs inputs of rank 4, got f32 [2,4,3]"},
      {[] {
         nn::GlobalAveragePooling1D()(kiln::ones({2, 4, 3, 3}));
       },
       "[nn.GlobalAveragePooling1D] global_average_pooling1d: needs inputs of rank 3"},
      {[] {
         nn::GlobalMaxPooling2D()(kiln::ones({2, 4, 3}, kiln::i32));
       },
       "[nn.GlobalMaxPooling2D] global_max_pooling2d: needs f32 or f64 inputs, got i32"},
      // Flatten, Reshape, Activation
      {[] { nn::Flatten()(kiln::ones({})); },
       "[nn.Flatten] flatten: needs an input with a batch dim, got f32 []"},
      {[] { nn::Flatten()(Tensor()); }, "[nn.Flatten] flatten: the input is an undefined tensor"},
      {[] {
         nn::Flatten flatten;
         auto f = kiln::function([&](const Tensor& x) { return flatten(x); },
                                 signature({TensorSpec({2, -1, 3})}));
         (void)f(kiln::ones({2, 2, 3}));
       },
       "has a dynamic dim after the batch dim; Flatten needs them static"},
      {[] {
         nn::Reshape({-1, -1});
       },
       "[nn.Reshape] reshape: target_shape [-1,-1] may hold sizes >= 0 and at most one -1"},
      {[] { nn::Reshape({-2}); }, "[nn.Reshape] reshape: target_shape [-2]"},
      {[] {
         nn::Reshape({4, 4})(kiln::ones({2, 3, 5}));
       },
       "[nn.Reshape] reshape: cannot reshape f32 [2,3,5] to [batch] + [4,4]: 15 elements per item"},
      {[] {
         nn::Reshape({4, -1})(kiln::ones({2, 3, 5}));
       },
       "[nn.Reshape] reshape: cannot reshape f32 [2,3,5] to [batch] + [4,-1]"},
      {[] {
         nn::Reshape reshape({-1});
         auto f = kiln::function([&](const Tensor& x) { return reshape(x); },
                                 signature({TensorSpec({2, -1, 3})}));
         (void)f(kiln::ones({2, 2, 3}));
       },
       "[nn.Reshape] reshape: the input [2,"},
      {[] { nn::Reshape({2})(Tensor()); },
       "[nn.Reshape] reshape: the input is an undefined tensor"},
      {[] { nn::ActivationLayer("gelu"); },
       "[nn.activation] unknown activation 'gelu'; expected none, relu, sigmoid, tanh or softmax"},
      {[] { nn::ActivationLayer(nn::Activation::relu)(kiln::ones({2}, kiln::i32)); },
       "[nn.Activation] activation: needs f32 or f64 inputs, got i32 [2]"},
      {[] { nn::ActivationLayer(nn::Activation::relu)(Tensor()); },
       "[nn.Activation] activation: the input is an undefined tensor"},
      // LayerNormalization
      {[] { nn::LayerNormalization({.epsilon = 0}); },
       "[nn.LayerNormalization] layer_normalization: epsilon must be positive, got 0"},
      {[] {
         nn::LayerNormalization({.axis = 2})(kiln::ones({2, 3}));
       },
       "[nn.LayerNormalization] layer_normalization: axis 2 is out of range for the input f32 "
       "[2,3]"},
      {[] { nn::LayerNormalization()(kiln::ones({})); },
       "[nn.LayerNormalization] layer_normalization: needs inputs of rank >= 1, got f32 []"},
      {[] { nn::LayerNormalization()(Tensor()); },
       "[nn.LayerNormalization] layer_normalization: the input is an undefined tensor"},
      {[] {
         nn::LayerNormalization()(kiln::ones({2, 3}, kiln::i64));
       },
       "[nn.LayerNormalization] layer_normalization: needs f32 or f64 inputs, got i64 [2,3]"},
      {[] {
         nn::LayerNormalization ln;
         (void)ln(kiln::ones({2, 3}));
         (void)ln(kiln::ones({2, 4}));
       },
       "[nn.LayerNormalization] layer_normalization was built for other inputs: variable "
       "layer_normalization/gamma is f32 [3], a call with f32 [2,4] needs f32 [4]"},
      {[] {
         nn::LayerNormalization ln({.scale = false});
         (void)ln(kiln::ones({2, 3}));
         (void)ln.gamma();
       },
       "[nn.LayerNormalization] layer_normalization has no gamma (scale is false)"},
      {[] {
         nn::LayerNormalization ln({.center = false});
         (void)ln(kiln::ones({2, 3}));
         (void)ln.beta();
       },
       "[nn.LayerNormalization] layer_normalization has no beta (center is false)"},
      {[] {
         nn::LayerNormalization ln;
         auto f = kiln::function([&](const Tensor& x) { return ln(x); },
                                 signature({TensorSpec({2, -1})}));
         (void)f(kiln::ones({2, 3}));
       },
       "[nn.LayerNormalization] layer_normalization: the normalized dim of the input"},
      // BatchNormalization
      {[] { nn::BatchNormalization({.momentum = 1.5}); },
       "[nn.BatchNormalization] batch_normalization: momentum must be in [0, 1], got 1.5"},
      {[] { nn::BatchNormalization({.epsilon = -1}); },
       "[nn.BatchNormalization] batch_normalization: epsilon must be positive, got -1"},
      {[] { nn::BatchNormalization()(kiln::ones({3})); },
       "[nn.BatchNormalization] batch_normalization: needs inputs of rank >= 2, got f32 [3]"},
      {[] {
         nn::BatchNormalization({.axis = -3})(kiln::ones({2, 3}));
       },
       "[nn.BatchNormalization] batch_normalization: axis -3 is out of range"},
      {[] {
         nn::BatchNormalization bn;
         (void)bn(kiln::ones({2, 3}));
         (void)bn(kiln::ones({2, 3}, kiln::f64));
       },
       "[nn.BatchNormalization] batch_normalization was built for other inputs: variable "
       "batch_normalization/gamma is f32 [3], a call with f64 [2,3] needs f64 [3]"},
      {[] {
         nn::BatchNormalization bn({.scale = false});
         (void)bn(kiln::ones({2, 3}));
         (void)bn.gamma();
       },
       "[nn.BatchNormalization] batch_normalization has no gamma (scale is false)"},
      {[] {
         nn::BatchNormalization bn({.center = false});
         (void)bn(kiln::ones({2, 3}));
         (void)bn.beta();
       },
       "[nn.BatchNormalization] batch_normalization has no beta (center is false)"},
      // MultiHeadAttention
      {[] { nn::MultiHeadAttention(0, 4); },
       "[nn.MultiHeadAttention] multi_head_attention: num_heads and key_dim must be positive, "
       "got 0 and 4"},
      {[] { nn::MultiHeadAttention(2, 4, {.dropout = 1.0}); },
       "[nn.MultiHeadAttention] multi_head_attention: dropout must be in [0, 1), got 1"},
      {[] { nn::MultiHeadAttention(2, 4, {.value_dim = -1}); },
       "[nn.MultiHeadAttention] multi_head_attention: value_dim must be positive (or 0 for "
       "key_dim), got -1"},
      {[] {
         nn::MultiHeadAttention(2, 4)(kiln::ones({2, 3}));
       },
       "[nn.MultiHeadAttention] multi_head_attention: the query must be a floating [batch, "
       "length, dim], got f32 [2,3]"},
      {[] {
         nn::MultiHeadAttention(2, 4).call(kiln::ones({1, 2, 3}), Tensor());
       },
       "[nn.MultiHeadAttention] multi_head_attention: the value is an undefined tensor"},
      {[] {
         nn::MultiHeadAttention(2, 4).call(kiln::ones({1, 2, 3}), kiln::ones({1, 2, 3}, kiln::f64));
       },
       "[nn.MultiHeadAttention] multi_head_attention: the value is f64 but the query is f32"},
      {[] {
         nn::MultiHeadAttention(2, 4).call(kiln::ones({1, 2, 3}), kiln::ones({1, 4, 3}),
                                           {.key = kiln::ones({1, 3, 3})});
       },
       "[nn.MultiHeadAttention] multi_head_attention: the key [1,3,3] and the value [1,4,3] "
       "differ in length"},
      {[] {
         nn::MultiHeadAttention mha(2, 4);
         (void)mha(kiln::ones({1, 2, 3}));
         (void)mha(kiln::ones({1, 2, 5}));
       },
       "[nn.MultiHeadAttention] multi_head_attention was built for other inputs: variable "
       "multi_head_attention/attention_output/kernel is f32 [2,4,3], a call with f32 [1,2,5] "
       "needs f32 [2,4,5]"},
      {[] {
         nn::MultiHeadAttention mha(2, 4);
         (void)mha(kiln::ones({1, 2, 3}));
         (void)mha.call(kiln::ones({1, 2, 3}), kiln::ones({1, 2, 6}));
       },
       "[nn.MultiHeadAttention] multi_head_attention was built for other inputs: variable "
       "multi_head_attention/key/kernel is f32 [3,2,4], a call with f32 [1,2,6] needs f32 "
       "[6,2,4]"},
      {[] {
         nn::MultiHeadAttention mha(2, 4);
         auto f = kiln::function([&](const Tensor& x) { return mha(x); },
                                 signature({TensorSpec({1, 2, -1})}));
         (void)f(kiln::ones({1, 2, 3}));
       },
       "[nn.MultiHeadAttention] multi_head_attention: the last dim of the query"},
      // architecture files
      {[] {
         nn::from_json(
             R"({"format": "kiln.architecture", "version": 1, "module": {"class_name": "Conv2D", "config": {"filters": 2, "kernel_size": [3], "padding": "full"}}})");
       },
       "[nn.Conv2D] unknown padding 'full'; expected valid or same"},
      {[] {
         nn::from_json(
             R"({"format": "kiln.architecture", "version": 1, "module": {"class_name": "MaxPooling2D", "config": {"pool_size": [2], "data_format": "nhwc"}}})");
       },
       "[nn.MaxPooling2D] unknown data_format 'nhwc'; expected channels_last or channels_first"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << cases[i].message);
    CHECK_THROWS_WITH(cases[i].run(), Contains(cases[i].message));
  }
}

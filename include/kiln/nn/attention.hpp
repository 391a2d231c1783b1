#pragma once
/// @file nn/attention.hpp
/// Keras's MultiHeadAttention over kiln::nn::scaled_dot_product_attention.

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/init.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// Settings of MultiHeadAttention (Keras's names and defaults).
struct MultiHeadAttentionOptions {
  /// The size of each head's value projection; 0: key_dim.
  std::int64_t value_dim = 0;
  bool use_bias = true;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer bias_initializer = init::zeros();
  /// Dropout on the attention weights in training mode (Keras's `dropout`), in [0, 1): a child
  /// nn::Dropout named "dropout", whose mask changes on every call, traced too.
  double dropout = 0.0;
  /// The dropout's seed; none: kiln::random::next_seed().
  std::optional<std::uint64_t> seed = {};
  /// Empty: an automatic name ("multi_head_attention", ...).
  std::string name = {};
};

/// What MultiHeadAttention::call attends with besides the query and the value.
struct MultiHeadAttentionCall {
  /// [batch, S, Dk]; undefined: the value.
  Tensor key = {};
  /// Undefined for none; else a boolean mask (true = may attend) or an additive one, of shape
  /// [batch, T, S] (Keras's attention_mask; a head axis is inserted) or anything that
  /// broadcasts to the scores [batch, heads, T, S].
  Tensor mask = {};
  /// Query position i attends only to key positions j <= i.
  bool causal = false;
};

/// Multi-head attention (Keras's MultiHeadAttention over rank-3 inputs: no attention_axes).
/// With H = num_heads,
/// K = key_dim and V = value_dim, for a query [batch, T, Dq], a value [batch, S, Dv] and a key
/// [batch, S, Dk]:
///   q = query @ query/kernel [Dq, H, K] + query/bias [H, K], per head  -> [batch, H, T, K]
///   k, v likewise with key/kernel [Dk, H, K] and value/kernel [Dv, H, V]
///   o = dropout(attention_weights(q, k, mask, causal)) @ v             (scale 1 / sqrt(K))
///   out = sum over heads of o @ attention_output/kernel [H, V, Dq] + attention_output/bias [Dq]
/// so the output is [batch, T, Dq]. The variables (paths "multi_head_attention/query/kernel",
/// ...; biases only with use_bias) are created on the first call from the inputs' last dims,
/// which must be static; the batch and sequence dims may be dynamic.
class MultiHeadAttention : public Layer {
 public:
  MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                     MultiHeadAttentionOptions options = {});

  /// Self-attention: call(x, x).
  Tensor operator()(const Tensor& x) override;
  /// Attention of `query` over `value` (and the key, mask and causality in `options`).
  Tensor call(const Tensor& query, const Tensor& value, const MultiHeadAttentionCall& options = {});

  std::int64_t num_heads() const { return num_heads_; }
  std::int64_t key_dim() const { return key_dim_; }
  /// value_dim with its default resolved.
  std::int64_t value_dim() const { return options_.value_dim; }
  const MultiHeadAttentionOptions& options() const { return options_; }
  /// The dropout on the attention weights (null without one).
  Dropout* dropout_layer() const { return dropout_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe.
  Config config() const;
  static MultiHeadAttention from_config(const Config& config);

 private:
  Tensor project(const Tensor& x, std::string_view name, std::int64_t size);

  std::int64_t num_heads_, key_dim_;
  MultiHeadAttentionOptions options_;
  Dropout* dropout_ = nullptr;  // owned through Module::add_module; null for dropout 0
};

}  // namespace kiln::nn

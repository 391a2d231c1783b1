#pragma once
/// @file nn/functional.hpp
/// Normalization and attention as functions of tensors (no parameters of their own: pass
/// gamma, beta and statistics in). Each is written with kiln ops, so it is differentiable,
/// traceable and exportable. Every function takes floating tensors only (f32 or f64, all of
/// one dtype) and names itself in its errors: "[layer_norm] ...".

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::nn {

/// The mean and the biased variance (divided by the count, not count - 1) of x over `axes`
/// (tf.nn.moments; torch.var_mean with unbiased=False). keepdims keeps the reduced axes with
/// size 1. Repeated axes are an error; an empty list reduces none (variance 0).
std::pair<Tensor, Tensor> moments(const Tensor& x, const std::vector<std::int64_t>& axes,
                                  bool keepdims = false);

/// Layer normalization over the axes [axis, rank) (ONNX LayerNormalization; torch's
/// layer_norm with normalized_shape = x.shape[axis:]): (x - mean) / sqrt(var + epsilon) * gamma
/// + beta, with the biased variance. gamma and beta broadcast to x.shape[axis:]; either may be
/// an undefined Tensor() for none (gamma 1, beta 0).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t axis = -1,
                  double epsilon = 1e-5);

/// Root-mean-square normalization over the axes [axis, rank) (torch.nn.functional.rms_norm,
/// ONNX RMSNormalization): x / sqrt(mean(x^2) + epsilon) * gamma. gamma broadcasts to
/// x.shape[axis:] and may be an undefined Tensor() for none.
Tensor rms_norm(const Tensor& x, const Tensor& gamma, std::int64_t axis = -1,
                double epsilon = 1e-6);

/// Batch normalization in its inference form (ONNX BatchNormalization with training_mode 0;
/// torch's batch_norm with training=False): (x - mean) / sqrt(variance + epsilon) * gamma +
/// beta, where mean, variance, gamma and beta hold one value per channel (1-D of the size of
/// x's channel axis). channel_axis is 1 for channels-first (N, C, ...) and -1 for channels-last
/// (Keras). gamma and beta may be undefined Tensor()s for none; x needs rank >= 2.
Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& variance, const Tensor& gamma,
                  const Tensor& beta, double epsilon = 1e-5, std::int64_t channel_axis = 1);

/// Instance normalization (ONNX InstanceNormalization; torch's instance_norm without running
/// statistics): x is (N, C, D1, ...) with rank >= 3; each (sample, channel) is normalized over
/// the spatial axes 2.. with its own mean and biased variance, then scaled by gamma[c] and
/// shifted by beta[c] (1-D of size C; either may be an undefined Tensor() for none).
Tensor instance_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     double epsilon = 1e-5);

/// Group normalization (torch.nn.functional.group_norm; ONNX GroupNormalization, opset 21): x is
/// (N, C, ...) with rank >= 2; the C channels are split into `groups` consecutive groups (groups
/// must divide C) and each (sample, group) is normalized over its channels and spatial positions
/// with the biased variance, then scaled by gamma[c] and shifted by beta[c] per channel (1-D of
/// size C; either may be an undefined Tensor() for none).
Tensor group_norm(const Tensor& x, std::int64_t groups, const Tensor& gamma, const Tensor& beta,
                  double epsilon = 1e-5);

/// scaled_dot_product_attention()'s options.
struct AttentionOptions {
  /// Undefined for none; else a boolean mask (true = may attend) or an additive mask of the
  /// inputs' floating dtype (added to the scaled scores; -inf forbids), broadcastable to the
  /// scores' shape [..., Lq, Lk].
  Tensor mask = {};
  /// Query position i may attend only to key positions j <= i (top-left aligned, as PyTorch's
  /// is_causal); combined with `mask` when both are given.
  bool causal = false;
  /// The factor of the scores; 1 / sqrt(E) when not given.
  std::optional<double> scale = {};
};

/// The attention weights softmax(q k^T * scale + mask) [..., Lq, Lk] of q [..., Lq, E] and
/// k [..., Lk, E] (leading dims broadcast), with the options of scaled_dot_product_attention: a
/// query row that may attend to nothing is a row of zeros. scaled_dot_product_attention is
/// matmul(attention_weights(q, k, options), v); this is its first half, for code that changes
/// the weights before they meet v (MultiHeadAttention's dropout) or reads them.
Tensor attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options = {});

/// Attention softmax(q k^T * scale + mask) v (torch.nn.functional.scaled_dot_product_attention
/// without dropout; ONNX Attention's core): q is [..., Lq, E], k [..., Lk, E], v [..., Lk, Ev],
/// the result [..., Lq, Ev]; the leading dims broadcast (as matmul's batch dims). A query row
/// that may attend to nothing (every key masked out, by a false, a -inf or causality) gives a
/// row of zeros (PyTorch gives NaN there).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

}  // namespace kiln::nn

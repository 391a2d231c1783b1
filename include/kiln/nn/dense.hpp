#pragma once
/// @file nn/dense.hpp
/// Fully connected and embedding layers.

#include <cstdint>
#include <string>

#include "kiln/init.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

struct DenseOptions {
  bool use_bias = true;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer bias_initializer = init::zeros();
  /// Empty: an automatic name ("dense", "dense_1", ...).
  std::string name = {};
};

/// activation(x @ kernel + bias), with kernel [in, units] and bias [units], created on the first
/// call with in = x's last dim (Keras's Dense). x may have any rank >= 1: the kernel applies to
/// the last axis ([batch, time, in] -> [batch, time, units]). The variables take x's dtype.
class Dense : public Layer {
 public:
  explicit Dense(std::int64_t units, Activation activation = Activation::none,
                 DenseOptions options = {});

  Tensor operator()(const Tensor& x) override;

  std::int64_t units() const { return units_; }
  Activation activation() const { return activation_; }
  const DenseOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static Dense from_config(const Config& config);

  /// The variables (after the first call; before it, kiln::Error).
  Variable kernel() const;
  Variable bias() const;

 private:
  std::int64_t units_;
  Activation activation_;
  DenseOptions options_;
};

struct EmbeddingOptions {
  /// Keras's default: uniform in [-0.05, 0.05).
  init::Initializer embeddings_initializer = init::random_uniform(-0.05, 0.05);
  std::string name = {};
};

/// A lookup table: integer indices of any shape -> indices.shape + [dim], rows of the variable
/// "embeddings" [vocab, dim] (created on the first call). Floating indices are truncated to
/// integers (as Keras casts them). Indices follow kiln::gather: outside [-vocab, vocab) is an
/// error, negative ones count from the end.
class Embedding : public Layer {
 public:
  Embedding(std::int64_t vocab, std::int64_t dim, EmbeddingOptions options = {});

  Tensor operator()(const Tensor& indices) override;

  std::int64_t vocab() const { return vocab_; }
  std::int64_t dim() const { return dim_; }
  const EmbeddingOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static Embedding from_config(const Config& config);

  Variable embeddings() const;

 private:
  std::int64_t vocab_, dim_;
  EmbeddingOptions options_;
};

}  // namespace kiln::nn

// nn::Dense and nn::Embedding.
#include "kiln/nn/dense.hpp"

#include "core/fail.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

namespace {
constexpr std::string_view dense_op = "nn.Dense";
constexpr std::string_view embedding_op = "nn.Embedding";
}  // namespace

Dense::Dense(std::int64_t units, Activation activation, DenseOptions options)
    : Layer("dense", std::move(options.name)),
      units_(units),
      activation_(activation),
      options_(std::move(options)) {
  if (units <= 0) detail::fail(dense_op, "{}: units must be positive, got {}", path(), units);
}

Tensor Dense::operator()(const Tensor& x) {
  const std::int64_t in = input_size(dense_op, x, 1);
  const Variable kernel =
      input_weight(dense_op, x, "kernel", {in, units_}, options_.kernel_initializer);
  Tensor y = matmul(x, kernel.value());
  if (options_.use_bias)
    y = y + weight("bias", {units_}, options_.bias_initializer, true, x.dtype()).value();
  return activate(activation_, y);
}

Variable Dense::kernel() const { return variable("kernel"); }

Variable Dense::bias() const {
  if (!options_.use_bias) detail::fail(dense_op, "{} has no bias (use_bias is false)", path());
  return variable("bias");
}

Embedding::Embedding(std::int64_t vocab, std::int64_t dim, EmbeddingOptions options)
    : Layer("embedding", std::move(options.name)),
      vocab_(vocab),
      dim_(dim),
      options_(std::move(options)) {
  if (vocab <= 0 || dim <= 0)
    detail::fail(embedding_op, "{}: vocab and dim must be positive, got {} and {}", path(), vocab,
                 dim);
}

Tensor Embedding::operator()(const Tensor& indices) {
  if (!indices.defined())
    detail::fail(embedding_op, "{}: the input is an undefined tensor", path());
  if (indices.dtype() == boolean)
    detail::fail(embedding_op, "{}: indices must be integers, got bool {}", path(),
                 indices.shape());
  const Tensor ids = is_floating(indices.dtype()) ? cast(indices, i64) : indices;
  note_input(indices);
  const Variable table = weight("embeddings", {vocab_, dim_}, options_.embeddings_initializer);
  return gather(table.value(), ids, 0);
}

Variable Embedding::embeddings() const { return variable("embeddings"); }

}  // namespace kiln::nn

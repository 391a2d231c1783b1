// nn::MultiHeadAttention.
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "core/fail.hpp"
#include "kiln/nn/attention.hpp"
#include "kiln/nn/functional.hpp"
#include "kiln/ops.hpp"
#include "nn/layer_options.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view attention_op = "nn.MultiHeadAttention";

}  // namespace

MultiHeadAttention::MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                                       MultiHeadAttentionOptions options)
    : Layer("multi_head_attention", std::move(options.name)),
      num_heads_(num_heads),
      key_dim_(key_dim),
      options_(std::move(options)) {
  if (num_heads <= 0 || key_dim <= 0)
    kiln::detail::fail(attention_op, "{}: num_heads and key_dim must be positive, got {} and {}",
                       path(), num_heads, key_dim);
  if (options_.value_dim < 0)
    kiln::detail::fail(attention_op, "{}: value_dim must be positive (or 0 for key_dim), got {}",
                       path(), options_.value_dim);
  if (options_.value_dim == 0) options_.value_dim = key_dim;
  if (!(options_.dropout >= 0.0 && options_.dropout < 1.0))
    kiln::detail::fail(attention_op, "{}: dropout must be in [0, 1), got {}", path(),
                       options_.dropout);
  if (options_.dropout > 0.0) {
    auto layer = std::make_shared<Dropout>(options_.dropout, options_.seed, "dropout");
    options_.seed = layer->seed();  // drawn when not given: the config keeps it
    dropout_ = &add_module("dropout", std::move(layer));
  }
}

Tensor MultiHeadAttention::operator()(const Tensor& x) { return call(x, x); }

/// x [batch, L, D] -> [batch, H, L, size] with the variables "<name>/kernel" [D, H, size] and
/// "<name>/bias" [H, size]: one matmul with the heads side by side, then split (the batch and
/// length stay whole dims, so they may be dynamic).
Tensor MultiHeadAttention::project(const Tensor& x, std::string_view name, std::int64_t size) {
  const std::int64_t in = x.dim(2);
  const std::string kernel_name = std::string(name) + "/kernel";
  const Shape kernel_shape{in, num_heads_, size};
  detail::check_built(attention_op, *this, kernel_name, kernel_shape, x);
  const Variable kernel =
      weight(kernel_name, kernel_shape, options_.kernel_initializer, true, x.dtype());
  Tensor y = matmul(x, reshape(kernel.value(), {in, num_heads_ * size}));
  if (options_.use_bias) {
    const Variable bias = weight(std::string(name) + "/bias", {num_heads_, size},
                                 options_.bias_initializer, true, x.dtype());
    y = y + reshape(bias.value(), {num_heads_ * size});
  }
  return transpose(reshape(y, {x.dim(0), x.dim(1), num_heads_, size}), {0, 2, 1, 3});
}

Tensor MultiHeadAttention::call(const Tensor& query, const Tensor& value,
                                const MultiHeadAttentionCall& options) {
  const Tensor& key = options.key.defined() ? options.key : value;
  const std::pair<const char*, const Tensor*> inputs[] = {
      {"query", &query}, {"value", &value}, {"key", &key}};
  for (const auto& [what, t] : inputs) {
    if (!t->defined())
      kiln::detail::fail(attention_op, "{}: the {} is an undefined tensor", path(), what);
    if (!is_floating(t->dtype()) || t->ndim() != 3)
      kiln::detail::fail(attention_op,
                         "{}: the {} must be a floating [batch, length, dim], got {} {}", path(),
                         what, dtype_name(t->dtype()), t->shape());
    if (t->dtype() != query.dtype())
      kiln::detail::fail(attention_op, "{}: the {} is {} but the query is {}", path(), what,
                         dtype_name(t->dtype()), dtype_name(query.dtype()));
    if (is_dynamic_dim(t->dim(2)))
      kiln::detail::fail(attention_op,
                         "{}: the last dim of the {} {} is dynamic; it sizes the projections, so "
                         "it must be static",
                         path(), what, t->shape());
  }
  if (key.dim(1) != value.dim(1))
    kiln::detail::fail(attention_op, "{}: the key {} and the value {} differ in length", path(),
                       key.shape(), value.shape());
  const std::int64_t out_dim = query.dim(2);
  const Shape out_kernel_shape{num_heads_, options_.value_dim, out_dim};
  detail::check_built(attention_op, *this, "attention_output/kernel", out_kernel_shape, query);
  note_input(query);

  const Tensor q = project(query, "query", key_dim_);
  const Tensor k = project(key, "key", key_dim_);
  const Tensor v = project(value, "value", options_.value_dim);
  Tensor mask = options.mask;
  if (mask.defined() && mask.ndim() == 3) mask = expand_dims(mask, 1);
  Tensor weights = attention_weights(q, k, {.mask = mask, .causal = options.causal});
  if (dropout_ != nullptr) weights = (*dropout_)(weights);
  const Tensor o = matmul(weights, v);

  const Variable out_kernel = weight("attention_output/kernel", out_kernel_shape,
                                     options_.kernel_initializer, true, query.dtype());
  const Tensor merged = reshape(transpose(o, {0, 2, 1, 3}),
                                {query.dim(0), query.dim(1), num_heads_ * options_.value_dim});
  Tensor y =
      matmul(merged, reshape(out_kernel.value(), {num_heads_ * options_.value_dim, out_dim}));
  if (options_.use_bias)
    y = y +
        weight("attention_output/bias", {out_dim}, options_.bias_initializer, true, query.dtype())
            .value();
  return y;
}

Config MultiHeadAttention::config() const {
  Config config = base_config();
  if (options_.seed) config.set("seed", *options_.seed);
  return config.set("num_heads", num_heads_)
      .set("key_dim", key_dim_)
      .set("value_dim", options_.value_dim)
      .set("use_bias", options_.use_bias)
      .set("kernel_initializer", init::to_config(options_.kernel_initializer))
      .set("bias_initializer", init::to_config(options_.bias_initializer))
      .set("dropout", options_.dropout);
}

MultiHeadAttention MultiHeadAttention::from_config(const Config& config) {
  config.check_keys({"name", "num_heads", "key_dim", "value_dim", "use_bias", "kernel_initializer",
                     "bias_initializer", "dropout", "seed"});
  MultiHeadAttentionOptions o;
  o.name = config.get_string("name", "");
  o.value_dim = config.get_int("value_dim", 0);
  o.use_bias = config.get_bool("use_bias", o.use_bias);
  o.kernel_initializer =
      detail::read_initializer(config, "kernel_initializer", o.kernel_initializer);
  o.bias_initializer = detail::read_initializer(config, "bias_initializer", o.bias_initializer);
  o.dropout = config.get_double("dropout", 0.0);
  o.seed = config.get_optional_uint("seed");
  return MultiHeadAttention(config.get_int("num_heads"), config.get_int("key_dim"), std::move(o));
}

}  // namespace kiln::nn

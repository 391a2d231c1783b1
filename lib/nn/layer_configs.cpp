// config() and from_config() of the built-in layers: what architecture files store of each.
#include <utility>

#include "kiln/nn/architecture.hpp"
#include "kiln/nn/bidirectional.hpp"
#include "kiln/nn/dense.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/fake_quant.hpp"
#include "kiln/nn/masking.hpp"
#include "kiln/nn/recurrent.hpp"
#include "kiln/nn/sequential.hpp"

namespace kiln::nn {

namespace {

Config initializer_config(const init::Initializer& initializer) {
  return init::to_config(initializer);
}

/// The initializer stored under `key`, or `fallback` when the file leaves it out.
init::Initializer read_initializer(const Config& config, std::string_view key,
                                   const init::Initializer& fallback) {
  return config.has(key) ? init::from_config(config.get_config(key)) : fallback;
}

/// The settings the sequence layers (LSTM, GRU, SimpleRNN) share, written and read the same
/// way; absent keys keep the options' defaults.
template <class Options>
void write_sequence_options(Config& config, const Options& options) {
  config.set("return_sequences", options.return_sequences)
      .set("return_state", options.return_state)
      .set("go_backwards", options.go_backwards)
      .set("stateful", options.stateful)
      .set("unroll", options.unroll)
      .set("checkpoint_every", options.checkpoint_every);
  if constexpr (requires { options.fused; }) config.set("fused", options.fused);
  if constexpr (requires { options.unit_forget_bias; })
    config.set("unit_forget_bias", options.unit_forget_bias);
  if constexpr (requires { options.activation; })
    config.set("activation", activation_name(options.activation));
  config.set("kernel_initializer", initializer_config(options.kernel_initializer))
      .set("recurrent_initializer", initializer_config(options.recurrent_initializer))
      .set("bias_initializer", initializer_config(options.bias_initializer));
}

template <class Options>
Options read_sequence_options(const Config& config) {
  Options options;
  options.name = config.get_string("name", "");
  options.return_sequences = config.get_bool("return_sequences", options.return_sequences);
  options.return_state = config.get_bool("return_state", options.return_state);
  options.go_backwards = config.get_bool("go_backwards", options.go_backwards);
  options.stateful = config.get_bool("stateful", options.stateful);
  options.unroll = config.get_bool("unroll", options.unroll);
  options.checkpoint_every = config.get_int("checkpoint_every", options.checkpoint_every);
  if constexpr (requires { options.fused; })
    options.fused = config.get_bool("fused", options.fused);
  if constexpr (requires { options.unit_forget_bias; })
    options.unit_forget_bias = config.get_bool("unit_forget_bias", options.unit_forget_bias);
  if constexpr (requires { options.activation; })
    options.activation =
        activation_named(config.get_string("activation", activation_name(options.activation)));
  options.kernel_initializer =
      read_initializer(config, "kernel_initializer", options.kernel_initializer);
  options.recurrent_initializer =
      read_initializer(config, "recurrent_initializer", options.recurrent_initializer);
  options.bias_initializer = read_initializer(config, "bias_initializer", options.bias_initializer);
  return options;
}

#define KILN_SEQUENCE_KEYS                                                                   \
  "name", "units", "return_sequences", "return_state", "go_backwards", "stateful", "unroll", \
      "checkpoint_every", "kernel_initializer", "recurrent_initializer", "bias_initializer"

}  // namespace

Config Dense::config() const {
  return base_config()
      .set("units", units_)
      .set("activation", activation_name(activation_))
      .set("use_bias", options_.use_bias)
      .set("kernel_initializer", initializer_config(options_.kernel_initializer))
      .set("bias_initializer", initializer_config(options_.bias_initializer));
}

Dense Dense::from_config(const Config& config) {
  config.check_keys(
      {"name", "units", "activation", "use_bias", "kernel_initializer", "bias_initializer"});
  DenseOptions options;
  options.name = config.get_string("name", "");
  options.use_bias = config.get_bool("use_bias", options.use_bias);
  options.kernel_initializer =
      read_initializer(config, "kernel_initializer", options.kernel_initializer);
  options.bias_initializer = read_initializer(config, "bias_initializer", options.bias_initializer);
  return Dense(config.get_int("units"), activation_named(config.get_string("activation", "none")),
               std::move(options));
}

Config Embedding::config() const {
  return base_config()
      .set("vocab", vocab_)
      .set("dim", dim_)
      .set("embeddings_initializer", initializer_config(options_.embeddings_initializer));
}

Embedding Embedding::from_config(const Config& config) {
  config.check_keys({"name", "vocab", "dim", "embeddings_initializer"});
  EmbeddingOptions options;
  options.name = config.get_string("name", "");
  options.embeddings_initializer =
      read_initializer(config, "embeddings_initializer", options.embeddings_initializer);
  return Embedding(config.get_int("vocab"), config.get_int("dim"), std::move(options));
}

Config LSTMCell::config() const {
  return base_config()
      .set("units", units_)
      .set("unit_forget_bias", options_.unit_forget_bias)
      .set("kernel_initializer", initializer_config(options_.kernel_initializer))
      .set("recurrent_initializer", initializer_config(options_.recurrent_initializer))
      .set("bias_initializer", initializer_config(options_.bias_initializer));
}

LSTMCell LSTMCell::from_config(const Config& config) {
  config.check_keys({"name", "units", "unit_forget_bias", "kernel_initializer",
                     "recurrent_initializer", "bias_initializer"});
  LSTMCellOptions options;
  options.name = config.get_string("name", "");
  options.unit_forget_bias = config.get_bool("unit_forget_bias", options.unit_forget_bias);
  options.kernel_initializer =
      read_initializer(config, "kernel_initializer", options.kernel_initializer);
  options.recurrent_initializer =
      read_initializer(config, "recurrent_initializer", options.recurrent_initializer);
  options.bias_initializer = read_initializer(config, "bias_initializer", options.bias_initializer);
  return LSTMCell(config.get_int("units"), std::move(options));
}

Config LSTM::config() const {
  Config config = base_config().set("units", units_);
  write_sequence_options(config, options_);
  return config;
}

LSTM LSTM::from_config(const Config& config) {
  config.check_keys({KILN_SEQUENCE_KEYS, "fused", "unit_forget_bias"});
  return LSTM(config.get_int("units"), read_sequence_options<LSTMOptions>(config));
}

Config GRU::config() const {
  Config config = base_config().set("units", units_);
  write_sequence_options(config, options_);
  return config;
}

GRU GRU::from_config(const Config& config) {
  config.check_keys({KILN_SEQUENCE_KEYS, "fused"});
  return GRU(config.get_int("units"), read_sequence_options<GRUOptions>(config));
}

Config SimpleRNN::config() const {
  Config config = base_config().set("units", units_);
  write_sequence_options(config, options_);
  return config;
}

SimpleRNN SimpleRNN::from_config(const Config& config) {
  config.check_keys({KILN_SEQUENCE_KEYS, "activation"});
  return SimpleRNN(config.get_int("units"), read_sequence_options<SimpleRNNOptions>(config));
}

#undef KILN_SEQUENCE_KEYS

Config Bidirectional::config() const {
  // The wrapped layer is stored as it was given: the forward copy's settings under the name
  // the copies were made from ("forward_" + name).
  Config wrapped = module_config(*forward_);
  Config wrapped_settings = wrapped.get_config("config");
  wrapped_settings.set("name", forward_->name().substr(std::string_view("forward_").size()));
  wrapped.set("config", wrapped_settings);
  return base_config().set("merge_mode", merge_mode_name(merge_mode_)).set("layer", wrapped);
}

Bidirectional Bidirectional::from_config(const Config& config) {
  config.check_keys({"name", "merge_mode", "layer"});
  const std::unique_ptr<Layer> wrapped = layer_from_config(config.get_config("layer"));
  return Bidirectional(*wrapped,
                       {.merge_mode = merge_mode_named(config.get_string("merge_mode", "concat")),
                        .name = config.get_string("name", "")});
}

Config Dropout::config() const { return base_config().set("rate", rate_).set("seed", seed_); }

Dropout Dropout::from_config(const Config& config) {
  config.check_keys({"name", "rate", "seed"});
  return Dropout(config.get_double("rate"), config.get_optional_uint("seed"),
                 config.get_string("name", ""));
}

Config FakeQuant::config() const {
  const FakeQuantLayerOptions& o = options_;
  return base_config()
      .set("num_bits", static_cast<std::int64_t>(o.num_bits))
      .set("narrow_range", o.narrow_range)
      .set("per_channel", o.per_channel)
      .set("ema_decay", o.ema_decay)
      .set("init_min", o.init_min)
      .set("init_max", o.init_max);
}

FakeQuant FakeQuant::from_config(const Config& config) {
  config.check_keys(
      {"name", "num_bits", "narrow_range", "per_channel", "ema_decay", "init_min", "init_max"});
  FakeQuantLayerOptions o;
  o.num_bits = static_cast<int>(config.get_int("num_bits", o.num_bits));
  o.narrow_range = config.get_bool("narrow_range", o.narrow_range);
  o.per_channel = config.get_bool("per_channel", o.per_channel);
  o.ema_decay = config.get_double("ema_decay", o.ema_decay);
  o.init_min = config.get_double("init_min", o.init_min);
  o.init_max = config.get_double("init_max", o.init_max);
  o.name = config.get_string("name", "");
  return FakeQuant(o);
}

Config Masking::config() const { return base_config().set("mask_value", mask_value_); }

Masking Masking::from_config(const Config& config) {
  config.check_keys({"name", "mask_value"});
  return Masking(config.get_double("mask_value", 0.0), config.get_string("name", ""));
}

Config Sequential::config() const {
  std::vector<Config> layers;
  for (const Layer* layer : layers_) layers.push_back(module_config(*layer));
  return base_config().set("layers", layers);
}

Sequential Sequential::from_config(const Config& config) {
  config.check_keys({"name", "layers"});
  Sequential model(config.get_string("name", ""));
  for (const Config& spec : config.get_configs("layers"))
    model.add(std::shared_ptr<Layer>(layer_from_config(spec)));
  return model;
}

}  // namespace kiln::nn

#pragma once
/// @file nn/dropout.hpp
/// Dropout whose random mask changes on every call, eager or inside a cached graph.

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// In training mode, zeroes each element with probability `rate` and scales the others by
/// 1 / (1 - rate); in inference mode, returns x unchanged (Keras's inverted dropout).
///
/// **Randomness in a cached graph.** The mask is kiln::random::stateless_uniform keyed by
/// (seed, counter), where counter is the layer's non-trainable i64 variable "rng_counter"
/// (created on the first training call) and every training call increments it. Inside a
/// kiln::function both the read and the increment are graph nodes, so each replay of the cached
/// graph draws a new mask, exactly as eager calls do: the n-th training call uses counter n
/// either way. The counter is an ordinary variable, so checkpoints and set_weights save and
/// restore the random stream, and a model rebuilt with the same seed repeats its masks.
class Dropout : public Layer {
 public:
  /// `rate` in [0, 1). Without a seed, one is taken from kiln::random::next_seed() (different
  /// per layer; repeatable after kiln::random::set_global_seed or kiln::clear_session).
  explicit Dropout(double rate, std::optional<std::uint64_t> seed = std::nullopt,
                   std::string name = {});

  /// Active when nn::learning_phase() is true.
  Tensor operator()(const Tensor& x) override;
  /// Active when `training` is true.
  Tensor operator()(const Tensor& x, bool training);

  double rate() const { return rate_; }
  std::uint64_t seed() const { return seed_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static Dropout from_config(const Config& config);

 private:
  double rate_;
  std::uint64_t seed_;
};

}  // namespace kiln::nn

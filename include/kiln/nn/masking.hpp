#pragma once
/// @file nn/masking.hpp
/// Masks for padded sequences: nn::sequence_mask from lengths and the nn::Masking layer (Keras's
/// Masking). kiln layers do not propagate masks implicitly: pass the mask to a recurrent layer
/// yourself (see "Padding and masking" in nn/recurrent.hpp):
///
///   nn::Masking masking(0.0);
///   nn::LSTM lstm(32);
///   Tensor h = lstm.call(masking(x), {.mask = masking.mask(x)})[0];

#include <cstdint>
#include <string>

#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// bool [batch, max_time]: entry [b, t] is t < lengths[b]. `lengths` is an i32 or i64 [batch]
/// vector (the batch may be dynamic); max_time >= 0. Like tf.sequence_mask(lengths, maxlen).
Tensor sequence_mask(const Tensor& lengths, std::int64_t max_time);

/// Keras's Masking layer on [batch, time, features] (or any rank >= 2) inputs: the mask of a
/// step is true when any of its features differs from mask_value; the layer returns x with the
/// masked steps zeroed (x * mask). No variables.
class Masking : public Layer {
 public:
  explicit Masking(double mask_value = 0.0, std::string name = {});

  /// x * mask(x) (the mask broadcast over the last axis).
  Tensor operator()(const Tensor& x) override;
  /// bool x.shape[:-1]: any(x != mask_value, axis = -1).
  Tensor mask(const Tensor& x) const;

  double mask_value() const { return mask_value_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static Masking from_config(const Config& config);

 private:
  double mask_value_;
};

}  // namespace kiln::nn

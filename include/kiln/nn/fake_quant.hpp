#pragma once
/// @file nn/fake_quant.hpp
/// nn::FakeQuant: fake quantization with a range learned as moving averages, for
/// quantization-aware training.

#include <string>

#include "kiln/nn/layer.hpp"
#include "kiln/quantization.hpp"

namespace kiln::nn {

struct FakeQuantLayerOptions {
  /// Bits of the integer grid (2 to 16) and whether to leave out its lowest level.
  int num_bits = 8;
  bool narrow_range = false;
  /// One range per channel of the input's last dim (a kernel's output channels) instead of one.
  bool per_channel = false;
  /// Weight of the old range in the moving averages, in [0, 1).
  double ema_decay = 0.999;
  /// The range before the first training call.
  double init_min = -6.0;
  double init_max = 6.0;
  /// Empty: an automatic name ("fake_quant").
  std::string name = {};
};

/// Fake quantization of its input (kiln::fake_quant_with_min_max_vars, or the per-channel form)
/// on a range kept in two non-trainable variables "min" and "max" (TensorFlow's
/// MovingAvgQuantize). In training mode each call first moves the range toward the batch's:
/// min += (min(batch min, 0) - min) (1 - ema_decay), max likewise with max(batch max, 0), then
/// quantizes with the moved range; in inference mode it uses the range as it is. Gradients pass
/// straight through inside the range. Works eagerly and in kiln::function (the updates are
/// ordered assignments, so a cached train step keeps moving the range).
class FakeQuant : public Layer {
 public:
  explicit FakeQuant(FakeQuantLayerOptions options = {});

  /// In training mode when nn::learning_phase() is true.
  Tensor operator()(const Tensor& x) override;
  Tensor operator()(const Tensor& x, bool training);

  const FakeQuantLayerOptions& options() const { return options_; }
  /// The range variables (created on the first call).
  Variable min() const;
  Variable max() const;
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe.
  Config config() const;
  static FakeQuant from_config(const Config& config);

 private:
  FakeQuantLayerOptions options_;
};

}  // namespace kiln::nn

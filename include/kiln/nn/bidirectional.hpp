#pragma once
/// @file nn/bidirectional.hpp
/// nn::Bidirectional: a sequence layer run forwards and backwards over the input, its two
/// outputs merged (Keras's `Bidirectional` wrapper).
///
/// ```cpp
/// kiln::nn::Bidirectional bi(kiln::nn::LSTM(64, {.return_sequences = true}),
///                            {.merge_mode = kiln::nn::MergeMode::sum});
/// kiln::Tensor y = bi(x);  // x [batch, time, features] -> y [batch, time, 64]
/// ```
///
/// **Two copies.** The wrapped layer (an nn::LSTM, nn::GRU or nn::SimpleRNN, not yet called) is
/// a template: Bidirectional builds two new layers from its units and options, registered as
/// its children "forward_<name>" and "backward_<name>" (Keras's names), each with its own
/// variables: "bidirectional/forward_lstm/kernel", "bidirectional/backward_lstm/kernel", ...
/// The backward copy has go_backwards negated. With return_sequences, the backward copy's
/// output sequence (in its processing order) is reversed back to input order before the merge,
/// so step t of the result sees x[0..t] forwards and x[t..T-1] backwards.
///
/// **Outputs** (return_sequences, return_state, stateful and unroll come from the wrapped
/// layer's options). merge(forward_output, backward_output) is their concatenation along the
/// last axis (MergeMode::concat, 2 * units wide), sum, product or mean (ave). call() returns
/// {merged} or, with return_state, {merged, forward states..., backward states...} ({h, c} per
/// direction for an LSTM, {h} otherwise); with MergeMode::none it returns both outputs unmerged,
/// {forward_output, backward_output, states...}, and operator() (which must return one tensor)
/// is an error.
///
/// **Call options** (nn::RecurrentCallOptions). A mask or sequence_lengths goes to both
/// directions: the backward one then skips the padding at the end of each sequence before its
/// first real step, so for padded sequences both directions agree with running each sequence
/// unpadded (the backward output at padded steps is zeros, the forward one repeats its last
/// real output; see "Padding and masking" in nn/recurrent.hpp). initial_state is empty or the
/// forward states followed by the backward ones (4 tensors for an LSTM, 2 otherwise).
///
/// **Stateful.** A stateful wrapped layer gives two stateful copies; reset_states() zeroes both.
/// Like the wrapped layers, Bidirectional works eagerly and inside kiln::function (a dynamic
/// batch and, without unroll, a dynamic time dim), and is differentiable.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/nn/layer.hpp"
#include "kiln/nn/recurrent.hpp"

namespace kiln::nn {

/// How nn::Bidirectional combines its forward and backward outputs.
enum class MergeMode {
  concat,  ///< concatenated along the last axis (Keras's default)
  sum,     ///< forward + backward
  mul,     ///< forward * backward
  ave,     ///< (forward + backward) / 2
  none,    ///< not merged: call() returns both outputs
};

/// "concat", "sum", "mul", "ave" or "none".
std::string_view merge_mode_name(MergeMode mode);
/// The merge mode Keras calls `name` ("concat", "sum", "mul", "ave", or "none" for Keras's
/// None); any other name is a kiln::Error ("[nn.Bidirectional] unknown merge_mode 'max'; ...").
MergeMode merge_mode_named(std::string_view name);

/// Options of nn::Bidirectional.
struct BidirectionalOptions {
  MergeMode merge_mode = MergeMode::concat;
  /// Default: "bidirectional", "bidirectional_1", ...
  std::string name = {};
};

/// A recurrent layer run in both directions over [batch, time, features] inputs (see the file
/// comment).
class Bidirectional : public Layer {
 public:
  /// Wraps a copy of `layer` for each direction. `layer` must be an nn::LSTM, nn::GRU or
  /// nn::SimpleRNN that has not been called yet (only its units and options are used; its
  /// variables, if any, would not be), else a kiln::Error naming nn.Bidirectional.
  explicit Bidirectional(const Layer& layer, BidirectionalOptions options = {});

  /// The merged output: [batch, time, merged units] with return_sequences, else [batch, merged
  /// units] (merged units: 2 * units for concat, units otherwise). An error with
  /// MergeMode::none (two outputs; use call()).
  Tensor operator()(const Tensor& x) override;
  /// {merged} or {forward output, backward output} (MergeMode::none), followed with
  /// return_state by the forward states and then the backward states. `initial_state` is empty
  /// or the forward states followed by the backward states.
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state = {});
  /// As above with any of initial_state, mask and sequence_lengths (the mask goes to both
  /// directions). (`call(x, {})` is ambiguous; write `call(x)`.)
  std::vector<Tensor> call(const Tensor& x, const RecurrentCallOptions& options);

  MergeMode merge_mode() const { return merge_mode_; }
  /// The number of state tensors of one direction (2 for an LSTM, 1 otherwise).
  std::size_t state_size() const { return state_size_; }
  /// The copy that runs in the wrapped layer's direction ("forward_<name>").
  Layer& forward_layer() const { return *forward_; }
  /// The copy with go_backwards negated ("backward_<name>").
  Layer& backward_layer() const { return *backward_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static Bidirectional from_config(const Config& config);

 private:
  MergeMode merge_mode_;
  std::size_t state_size_ = 0;
  bool return_sequences_ = false;
  bool return_state_ = false;
  Layer* forward_ = nullptr;   // owned through Module::add_module
  Layer* backward_ = nullptr;  // owned through Module::add_module
};

}  // namespace kiln::nn

#pragma once
/// @file nn/recurrent.hpp
/// Recurrent layers with Keras's weight layout, so weights map to and from other frameworks.
///
/// LSTM (gate order i, f, c, o; `units` = U, input size F):
///   kernel [F, 4U], recurrent_kernel [U, 4U], bias [4U]
///   z = x_t @ kernel + h @ recurrent_kernel + bias, split into z_i, z_f, z_c, z_o
///   i = sigmoid(z_i), f = sigmoid(z_f), o = sigmoid(z_o)
///   c' = f * c + i * tanh(z_c),  h' = o * tanh(c')
/// GRU (Keras's reset_after = true; gate order z, r, h):
///   kernel [F, 3U], recurrent_kernel [U, 3U], bias [2, 3U] (row 0 input bias, row 1 recurrent)
///   x_z, x_r, x_h = split(x_t @ kernel + bias[0]);  r_z, r_r, r_h = split(h @ recurrent_kernel
///   + bias[1]);  z = sigmoid(x_z + r_z),  r = sigmoid(x_r + r_r),  n = tanh(x_h + r * r_h)
///   h' = z * h + (1 - z) * n
/// SimpleRNN (Keras's SimpleRNN):
///   kernel [F, U], recurrent_kernel [U, U], bias [U]
///   h' = activation(x_t @ kernel + bias + h @ recurrent_kernel)   (activation: tanh)
///
/// Sequence layers take [batch, time, features] inputs. The input projection
/// x @ kernel + bias of every time step is one matmul before the recurrence; per step only
/// h @ recurrent_kernel and the gates run. By default the recurrence is a kiln::scan over the
/// time axis (the input transposed to [time, batch, features]): eagerly a loop, and inside a
/// kiln::function one traced step whose graph does not grow with the sequence length, so the
/// time dim may be dynamic (-1 in the input_signature) as well as the batch. With
/// `unroll = true` the layer instead unrolls one copy of the step per time step (the time dim
/// must then be static; for short fixed sequences, where the unrolled graph can be optimized as
/// a whole and split over the cores: see docs/performance.md). Both forms compute the same
/// values and gradients up to rounding. A static time dim of 0 is an error; a dynamic one that
/// is 0 when the function runs gives the initial state and an empty output sequence.
///
/// **Padding and masking** (Keras's semantics with its default zero_output_for_mask = false).
/// `call(x, {.mask = m})` takes a boolean mask [batch, time] (true = a real step), or
/// `call(x, {.sequence_lengths = n})` an i32/i64 [batch] vector of lengths (step t of sequence b
/// is real when t < n[b]; the same as mask = nn::sequence_mask(n, time), but it also works with
/// a dynamic time dim). At a masked step every state tensor is carried through unchanged
/// (h = where(m, h_new, h_prev), m broadcast over the units), and the step's output is the
/// previous step's output, zeros before the first real step. So padded steps after a
/// sequence's length change neither its final state nor its last output, and (with
/// return_sequences) repeat its last real output. The mask counts by position in the input, so
/// with go_backwards padding at the end is skipped before the first real step (whose output
/// sequence starts with zeros). There is no implicit mask propagation between layers: pass the
/// mask explicitly, e.g. `lstm.call(masking(x), {.mask = masking.mask(x)})` (nn::Masking).

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/init.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// The optional arguments of the sequence layers' call() (see "Padding and masking" in the file
/// comment), e.g. `lstm.call(x, {.initial_state = {h, c}, .mask = m})`.
struct RecurrentCallOptions {
  /// Empty (zeros, or the carried state when stateful) or the layer's state tensors, each
  /// [batch, units] ({h, c} for an LSTM, {h} otherwise).
  std::vector<Tensor> initial_state = {};
  /// Undefined (every step real) or boolean [batch, time]: true where a step is real.
  Tensor mask = {};
  /// Undefined or an i32/i64 [batch] vector: steps t >= sequence_lengths[b] are masked. At
  /// most one of mask and sequence_lengths.
  Tensor sequence_lengths = {};
};

/// Hidden and cell state of an LSTM step, each [batch, units].
struct LSTMState {
  Tensor h;
  Tensor c;
};

/// Options of nn::LSTMCell.
struct LSTMCellOptions {
  /// Initialize the forget gate's bias to 1 (the bias initializer fills the other gates).
  bool unit_forget_bias = true;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer recurrent_initializer = init::orthogonal();
  init::Initializer bias_initializer = init::zeros();
  std::string name = {};
};

/// One LSTM step (variables as in the file comment): [batch, F] input and state -> new state.
class LSTMCell : public Layer {
 public:
  explicit LSTMCell(std::int64_t units, LSTMCellOptions options = {});

  /// One step from `state`.
  LSTMState operator()(const Tensor& x, const LSTMState& state);
  /// One step from the zero state; returns h.
  Tensor operator()(const Tensor& x) override;

  std::int64_t units() const { return units_; }
  const LSTMCellOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static LSTMCell from_config(const Config& config);
  Variable kernel() const;
  Variable recurrent_kernel() const;
  Variable bias() const;

 private:
  std::int64_t units_;
  LSTMCellOptions options_;
};

/// Options of nn::LSTM.
struct LSTMOptions {
  /// Output every step's h ([batch, time, units]) instead of the last one ([batch, units]).
  bool return_sequences = false;
  /// call() also returns the final h and c: {output, h, c}.
  bool return_state = false;
  /// Process the sequence from the last step to the first (the output sequence is then in
  /// processing order, i.e. reversed, as in Keras).
  bool go_backwards = false;
  /// Carry the final state of a call over as the initial state of the next one, in the
  /// non-trainable variables state_h and state_c ([batch, units], created on the first call,
  /// which needs a static batch; later calls must use the same batch). reset_states() zeroes them.
  bool stateful = false;
  /// Unroll the time steps into one step per time step instead of running a kiln::scan (the
  /// time dim must then be static).
  bool unroll = false;
  /// Gradient checkpointing over time: with k > 1 and a static time dim above k, the scan runs
  /// as segments of k steps, each projecting its own inputs (x @ kernel) in one matmul. Under a
  /// gradient tape inside kiln::function only the state entering each segment (and x) is kept
  /// for the backward pass, which recomputes a segment's projection and states: memory for
  /// T / k + k states instead of T states and the [time, batch, 4 units] projection, for about
  /// one more forward pass. Eagerly each segment is a kiln::checkpoint. 1 (the default): one
  /// projection over all steps, every state kept. Not with unroll.
  std::int64_t checkpoint_every = 1;
  /// Run the recurrence as one fused primitive when the call allows it (f32 or f64, scan
  /// form, no mask or sequence_lengths, no checkpointing segments): each step's
  /// recurrent GEMM and gate math in one pass while the GEMM's output is in cache, the units cut
  /// into one part per thread at large sizes (docs/architecture.md, "Fused LSTM"). false: the step
  /// runs as ordinary ops in a kiln::scan (the same results within rounding; needed for
  /// higher-order gradients, which the fused gradient does not have).
  bool fused = true;
  /// Initialize the forget gate's bias to 1 (as LSTMCellOptions::unit_forget_bias).
  bool unit_forget_bias = true;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer recurrent_initializer = init::orthogonal();
  init::Initializer bias_initializer = init::zeros();
  std::string name = {};
};

/// An LSTM over [batch, time, features] sequences (see the file comment).
class LSTM : public Layer {
 public:
  explicit LSTM(std::int64_t units, LSTMOptions options = {});

  /// The output: [batch, units], or [batch, time, units] with return_sequences.
  Tensor operator()(const Tensor& x) override;
  /// {output} or, with return_state, {output, h, c}. `initial_state` is empty (zeros, or the
  /// carried state when stateful) or {h, c}, each [batch, units].
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state = {});
  /// As above with a boolean [batch, time] mask (true = a real step; see the file comment).
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state,
                           const Tensor& mask);
  /// As above with any of initial_state, mask and sequence_lengths. (`call(x, {})` is
  /// ambiguous; write `call(x)`.)
  std::vector<Tensor> call(const Tensor& x, const RecurrentCallOptions& options);
  /// Zeroes the carried state of a stateful layer (nothing to do otherwise or before the first
  /// call).
  void reset_states() override;
  /// Whether the layer was built with `stateful = true`.
  bool stateful() const override { return options_.stateful; }

  std::int64_t units() const { return units_; }
  const LSTMOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static LSTM from_config(const Config& config);

  Variable kernel() const;
  Variable recurrent_kernel() const;
  Variable bias() const;

 private:
  std::int64_t units_;
  LSTMOptions options_;
};

/// Options of nn::GRU (as for LSTMOptions where the names agree).
struct GRUOptions {
  /// Output every step's h ([batch, time, units]) instead of the last one ([batch, units]).
  bool return_sequences = false;
  /// call() also returns the final h: {output, h}.
  bool return_state = false;
  /// Process the sequence from the last step to the first (output in processing order).
  bool go_backwards = false;
  /// As for LSTMOptions::stateful (one state variable, state_h).
  bool stateful = false;
  /// As for LSTMOptions::unroll.
  bool unroll = false;
  /// As for LSTMOptions::checkpoint_every.
  std::int64_t checkpoint_every = 1;
  /// Run the recurrence as one fused primitive when the call allows it, as
  /// LSTMOptions::fused (the same conditions; false: the step as ops in a kiln::scan).
  bool fused = true;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer recurrent_initializer = init::orthogonal();
  init::Initializer bias_initializer = init::zeros();
  std::string name = {};
};

/// A GRU over [batch, time, features] sequences (Keras's reset_after = true variant; see the
/// file comment).
class GRU : public Layer {
 public:
  explicit GRU(std::int64_t units, GRUOptions options = {});

  /// The output: [batch, units], or [batch, time, units] with return_sequences.
  Tensor operator()(const Tensor& x) override;
  /// {output} or, with return_state, {output, h}; `initial_state` is empty or {h}.
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state = {});
  /// As above with a boolean [batch, time] mask (true = a real step; see the file comment).
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state,
                           const Tensor& mask);
  /// As above with any of initial_state, mask and sequence_lengths. (`call(x, {})` is
  /// ambiguous; write `call(x)`.)
  std::vector<Tensor> call(const Tensor& x, const RecurrentCallOptions& options);
  /// Zeroes the carried state of a stateful layer.
  void reset_states() override;
  /// Whether the layer was built with `stateful = true`.
  bool stateful() const override { return options_.stateful; }

  std::int64_t units() const { return units_; }
  const GRUOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static GRU from_config(const Config& config);

  Variable kernel() const;
  Variable recurrent_kernel() const;
  Variable bias() const;

 private:
  std::int64_t units_;
  GRUOptions options_;
};

/// Options of nn::SimpleRNN (as for LSTMOptions where the names agree).
struct SimpleRNNOptions {
  /// Applied to the pre-activation of every step (Keras's default, tanh).
  Activation activation = Activation::tanh;
  /// Output every step's h ([batch, time, units]) instead of the last one ([batch, units]).
  bool return_sequences = false;
  /// call() also returns the final h: {output, h}.
  bool return_state = false;
  /// Process the sequence from the last step to the first (output in processing order).
  bool go_backwards = false;
  /// As for LSTMOptions::stateful (one state variable, state_h).
  bool stateful = false;
  /// As for LSTMOptions::unroll.
  bool unroll = false;
  /// As for LSTMOptions::checkpoint_every.
  std::int64_t checkpoint_every = 1;
  init::Initializer kernel_initializer = init::glorot_uniform();
  init::Initializer recurrent_initializer = init::orthogonal();
  init::Initializer bias_initializer = init::zeros();
  std::string name = {};
};

/// A fully connected recurrent layer over [batch, time, features] sequences (Keras's SimpleRNN;
/// see the file comment): h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel + bias).
/// Default name "simple_rnn"; variables kernel [F, U], recurrent_kernel [U, U], bias [U], and
/// state_h [batch, U] when stateful.
class SimpleRNN : public Layer {
 public:
  explicit SimpleRNN(std::int64_t units, SimpleRNNOptions options = {});

  /// The output: [batch, units], or [batch, time, units] with return_sequences.
  Tensor operator()(const Tensor& x) override;
  /// {output} or, with return_state, {output, h}; `initial_state` is empty or {h}.
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state = {});
  /// As above with a boolean [batch, time] mask (true = a real step; see the file comment).
  std::vector<Tensor> call(const Tensor& x, const std::vector<Tensor>& initial_state,
                           const Tensor& mask);
  /// As above with any of initial_state, mask and sequence_lengths. (`call(x, {})` is
  /// ambiguous; write `call(x)`.)
  std::vector<Tensor> call(const Tensor& x, const RecurrentCallOptions& options);
  /// Zeroes the carried state of a stateful layer.
  void reset_states() override;
  /// Whether the layer was built with `stateful = true`.
  bool stateful() const override { return options_.stateful; }

  std::int64_t units() const { return units_; }
  const SimpleRNNOptions& options() const { return options_; }
  /// Its settings for architecture files (kiln::nn::to_json), and the layer they describe
  /// (a misspelt key, a value of the wrong type or out of range is a kiln::Error).
  Config config() const;
  static SimpleRNN from_config(const Config& config);

  Variable kernel() const;
  Variable recurrent_kernel() const;
  Variable bias() const;

 private:
  std::int64_t units_;
  SimpleRNNOptions options_;
};

}  // namespace kiln::nn

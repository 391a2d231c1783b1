#pragma once
// Fused recurrences: a whole LSTM over time as one primitive (what nn::LSTM runs when it can),
// with its gradient. Internal: the layers call these; users call nn::LSTM.

#include "kiln/tensor.hpp"

namespace kiln::detail {

/// The LSTM recurrence over every time step in one call (Prim::lstm_sequence, kernel in
/// lib/kernels/recurrent.cpp). xp [T, B, 4U]: each step's input projection x_t W, gates in
/// Keras's order i, f, c, o; h0, c0 [B, U]: the initial state; w [U, 4U]: the recurrent
/// kernel; b [4U]: the bias (added in the kernel, where the projection's output is in cache). f32
/// or f64; T and B may be dynamic, U must be static. Returns y [T, B, S U]: per step h_t then c_t
/// (S = 2), and with `save_gates` (S = 6, what the gradient needs) the gate activations i, f, g, o
/// after them. Differentiable in xp, h0, c0, w and b (through lstm_sequence_grad; the gate columns
/// of y have no gradient of their own and must not be differentiated). Steps: z = xp_t + h_{t-1} w
/// + b; i, f, o = sigmoid; g = tanh; c_t = f c_{t-1} + i g; h_t = o tanh(c_t).
Tensor lstm_sequence(const Tensor& xp, const Tensor& h0, const Tensor& c0, const Tensor& w,
                     const Tensor& b, bool save_gates);

/// lstm_sequence with the input projection inside the recurrence: x [T, B, F] (time-major
/// inputs; with `batch_major` [B, T, F], read in place, no transpose) and the input kernel w_x
/// [F, 4U] in place of xp = x w_x, which is never formed (each step's x_t w_x is summed in the
/// step's own product, ahead of h_{t-1} w). y is [T, B, S U] either way. The primitive's inputs
/// are {x, h0, c0, w, b, w_x}, its attrs.ints {1} when batch-major; differentiable in all six.
Tensor lstm_sequence_from_inputs(const Tensor& x, const Tensor& w_x, const Tensor& h0,
                                 const Tensor& c0, const Tensor& w, const Tensor& b,
                                 bool save_gates, bool batch_major = false);

/// The backward recurrence of lstm_sequence: g [T, B, 2U] (the gradient of its output y's h and
/// c columns), y [T, B, 6U] (saved gates), h0, c0, w -> r [T, B, 7U]: per step the pre-activation
/// gradient dz_t (4U), h_{t-1} (U), and 2U columns that hold the gradients of h0 and c0 at t = 0
/// and zeros at every later step (the kernel's carries, cleared once read, so the sum over time
/// gives them where T is dynamic). Its gradient is an error (no second order).
Tensor lstm_sequence_grad(const Tensor& g, const Tensor& y, const Tensor& h0, const Tensor& c0,
                          const Tensor& w);

/// The GRU recurrence (Keras's GRU with reset_after) over every time step in one call
/// (Prim::gru_sequence). xp [T, B, 3U]: each step's x_t W_in, gates z, r, n; h0 [B, U];
/// w [U, 3U]: the recurrent kernel; b_in, b_rec [3U]: the input and recurrent biases. Returns
/// y [T, B, S U]: h_t (S = 1) and with `save_gates` (S = 5) z, r, n and q_n after it. Steps:
/// x = xp_t + b_in; q = h_{t-1} w + b_rec;
/// z = sigmoid(x_z + q_z); r = sigmoid(x_r + q_r); n = tanh(x_n + r q_n);
/// h_t = z h_{t-1} + (1 - z) n. Differentiable in xp, h0, w, b_in and b_rec (through
/// gru_sequence_grad; the saved columns have no gradient of their own).
Tensor gru_sequence(const Tensor& xp, const Tensor& h0, const Tensor& w, const Tensor& b_in,
                    const Tensor& b_rec, bool save_gates);

/// gru_sequence with the input projection inside the recurrence, as lstm_sequence_from_inputs:
/// x [T, B, F] (with `batch_major` [B, T, F], read in place) and the input kernel w_in [F, 3U]
/// in place of xp = x w_in (each step's x_t w_in + b_in is formed per part in gate panels of
/// w_in, apart from h w, which the candidate gate needs first). The primitive's inputs are
/// {x, h0, w, b_in, b_rec, w_in}, its attrs.ints {1} when batch-major; differentiable in all six.
Tensor gru_sequence_from_inputs(const Tensor& x, const Tensor& w_in, const Tensor& h0,
                                const Tensor& w, const Tensor& b_in, const Tensor& b_rec,
                                bool save_gates, bool batch_major = false);

/// The backward recurrence of gru_sequence: g [T, B, U] (the gradient of its h columns), y [T,
/// B, 5U] (saved), h0, w -> r [T, B, 8U]: per step the pre-activation gradients of x's
/// projection (3U) and of q (3U), h_{t-1} (U), and U columns that hold h0's gradient at t = 0 and
/// zeros after it (as lstm_sequence_grad's). Its gradient is an error (no second order).
Tensor gru_sequence_grad(const Tensor& g, const Tensor& y, const Tensor& h0, const Tensor& w);

/// A fused recurrence's recurrent-kernel gradient from its backward output r [T, B, row]: the
/// sum over t and b of r's h_{t-1} columns [h_column, h_column + U) transposed times its
/// gate-gradient columns [gate_column, gate_column + gates U): [U, gates U]. Its gradient is an
/// error (no second order). (LSTM: gates 4, columns 4U and 0 of 7U; GRU: gates 3, columns 6U and 3U
/// of 8U.)
Tensor recurrent_weight_grad(const Tensor& r, std::int64_t units, std::int64_t gates,
                             std::int64_t h_column, std::int64_t gate_column);

}  // namespace kiln::detail

#pragma once
// Fused recurrences: a whole LSTM over time as one primitive (what nn::LSTM runs when it can),
// with its gradient. Internal: the layers call these; users call nn::LSTM.

#include "kiln/tensor.hpp"

namespace kiln::detail {

/// The LSTM recurrence over every time step in one call (Prim::lstm_sequence, kernel in
/// lib/kernels/recurrent.cpp). xp [T, B, 4U]: each step's input projection x_t W + b, gates in
/// Keras's order i, f, c, o; h0, c0 [B, U]: the initial state; w [U, 4U]: the recurrent
/// kernel. f32 or f64; T and B may be dynamic, U must be static. Returns y [T, B, S U]: per
/// step h_t then c_t (S = 2), and with `save_gates` (S = 6, what the gradient needs) the gate
/// activations i, f, g, o after them. Differentiable in xp, h0, c0 and w (through
/// lstm_sequence_grad; the gate columns of y have no gradient of their own and must not be
/// differentiated). Steps: z = xp_t + h_{t-1} w; i, f, o = sigmoid; g = tanh; c_t = f c_{t-1} +
/// i g; h_t = o tanh(c_t).
Tensor lstm_sequence(const Tensor& xp, const Tensor& h0, const Tensor& c0, const Tensor& w,
                     bool save_gates);

/// The backward recurrence of lstm_sequence: g [T, B, 2U] (the gradient of its output y's h and
/// c columns), y [T, B, 6U] (saved gates), h0, c0, w -> r [T, B, 7U]: per step the pre-activation gradient dz_t (4U), h_{t-1}
/// (U), and the gradients of h_{t-1} and c_{t-1} (U each; at t = 0 those of h0 and c0).
/// Not differentiable.
Tensor lstm_sequence_grad(const Tensor& g, const Tensor& y, const Tensor& h0, const Tensor& c0,
                          const Tensor& w);

/// The recurrent kernel's gradient from lstm_sequence_grad's r: sum over t and b of
/// h_{t-1}^T dz_t, [U, 4U]. Not differentiable.
Tensor lstm_weight_grad(const Tensor& r);

}  // namespace kiln::detail

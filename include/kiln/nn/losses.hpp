#pragma once
/// @file nn/losses.hpp
/// Loss functions: loss(y_true, y_pred) -> scalar tensor, the mean over the batch (Keras's
/// default "sum over batch size" reduction). Every one is built from kiln ops, so it is
/// differentiable and traceable (dynamic batch dims included).
///
/// Shapes: y_true has y_pred's shape, or (for the elementwise losses) y_pred's shape without a
/// trailing dim of 1 ([batch] against [batch, 1]). Labels of another dtype (integers, bool) are
/// cast to y_pred's dtype. Errors name the loss: "[losses.binary_crossentropy] ...".

#include "kiln/tensor.hpp"

namespace kiln::nn::losses {

/// The epsilon probabilities are clipped with (Keras's backend epsilon).
inline constexpr double epsilon = 1e-7;

/// mean((y_pred - y_true)^2).
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);
/// mean(|y_pred - y_true|).
Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred);

/// Binary cross-entropy of probabilities y_pred against labels in [0, 1]: with p clipped to
/// [epsilon, 1 - epsilon], mean(-(y log(p + epsilon) + (1 - y) log(1 - p + epsilon))), as Keras.
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred);
/// Binary cross-entropy of sigmoid(logits), computed stably from the logits
/// (kiln::sigmoid_cross_entropy: softplus(x) - x y, exact for large |x|).
Tensor binary_crossentropy_from_logits(const Tensor& y_true, const Tensor& logits);

/// Categorical cross-entropy of probabilities [..., classes] against one-hot (or soft) labels
/// of the same shape: p is renormalized to sum to 1 along the last axis and clipped to
/// [epsilon, 1 - epsilon]; the loss is mean over samples of -sum(y log p), as Keras.
Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred);
/// The same from logits, via log_softmax (stable for any logits).
Tensor categorical_crossentropy_from_logits(const Tensor& y_true, const Tensor& logits);

/// Categorical cross-entropy with integer class labels (shape y_pred.shape[:-1], or with a
/// trailing 1) against probabilities (clipped as above). Labels are not range-checked (that
/// would need their values while tracing): a label outside [0, classes) contributes 0.
Tensor sparse_categorical_crossentropy(const Tensor& labels, const Tensor& y_pred);
/// The same from logits: mean(-log_softmax(logits)[label]), the stable form.
Tensor sparse_categorical_crossentropy_from_logits(const Tensor& labels, const Tensor& logits);

}  // namespace kiln::nn::losses

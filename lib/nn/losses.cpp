// kiln::nn::losses: Keras's loss definitions written with kiln ops.
#include "kiln/nn/losses.hpp"

#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn::losses {

namespace {

void check_pred(std::string_view op, const Tensor& y_true, const Tensor& y_pred) {
  if (!y_true.defined()) detail::fail(op, "y_true is an undefined tensor");
  if (!y_pred.defined()) detail::fail(op, "y_pred is an undefined tensor");
  if (!is_floating(y_pred.dtype()))
    detail::fail(op, "y_pred must be f32 or f64, got {} {}", dtype_name(y_pred.dtype()),
                 y_pred.shape());
}

/// y_true cast to y_pred's dtype and shaped like it: equal shapes, or y_pred with an extra
/// trailing dim of 1.
Tensor labels_like(std::string_view op, const Tensor& y_true, const Tensor& y_pred) {
  check_pred(op, y_true, y_pred);
  Tensor y = y_true.dtype() == y_pred.dtype() ? y_true : cast(y_true, y_pred.dtype());
  if (y.shape() == y_pred.shape()) return y;
  if (y_pred.ndim() == y.ndim() + 1 && y_pred.dim(-1) == 1) {
    Shape expected = y_pred.shape();
    expected.erase(expected.size() - 1);
    if (y.shape() == expected) return expand_dims(y, -1);
  }
  detail::fail(op, "y_true {} and y_pred {} have different shapes", y_true.shape(), y_pred.shape());
}

/// Integer labels for a [..., classes] prediction: shape y_pred.shape[:-1] (a trailing 1 is
/// dropped); floating labels are truncated to integers.
Tensor class_labels(std::string_view op, const Tensor& labels, const Tensor& y_pred) {
  check_pred(op, labels, y_pred);
  if (y_pred.ndim() < 1) detail::fail(op, "y_pred must have a class axis, got shape []");
  Tensor l = labels;
  if (l.dtype() == boolean) detail::fail(op, "labels must be integers, got bool");
  if (is_floating(l.dtype())) l = cast(l, i64);
  Shape expected = y_pred.shape();
  expected.erase(expected.size() - 1);
  if (l.ndim() == y_pred.ndim() && l.dim(-1) == 1) l = squeeze(l, {-1});
  if (l.shape() != expected)
    detail::fail(op, "labels {} do not match y_pred {} (expected labels of shape {})",
                 labels.shape(), y_pred.shape(), expected);
  return l;
}

/// The classes axis of a categorical prediction, as one-hot labels of y_pred's dtype.
Tensor one_hot_labels(const Tensor& labels, const Tensor& y_pred) {
  return one_hot(labels, y_pred.dim(-1), y_pred.dtype());
}

Tensor clipped(const Tensor& p) { return clip(p, epsilon, 1.0 - epsilon); }

}  // namespace

Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred) {
  const Tensor y = labels_like("losses.mean_squared_error", y_true, y_pred);
  return mean(square(y_pred - y));
}

Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred) {
  const Tensor y = labels_like("losses.mean_absolute_error", y_true, y_pred);
  return mean(abs(y_pred - y));
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred) {
  const Tensor y = labels_like("losses.binary_crossentropy", y_true, y_pred);
  const Tensor p = clipped(y_pred);
  return -mean(y * log(p + epsilon) + (1.0 - y) * log(1.0 - p + epsilon));
}

Tensor binary_crossentropy_from_logits(const Tensor& y_true, const Tensor& logits) {
  const Tensor y = labels_like("losses.binary_crossentropy_from_logits", y_true, logits);
  return mean(sigmoid_cross_entropy(logits, y));
}

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred) {
  constexpr std::string_view op = "losses.categorical_crossentropy";
  const Tensor y = labels_like(op, y_true, y_pred);
  if (y_true.shape() != y_pred.shape() || y_pred.ndim() < 1)
    detail::fail(op, "y_true {} and y_pred {} must have the same [..., classes] shape",
                 y_true.shape(), y_pred.shape());
  const Tensor p = clipped(y_pred / sum(y_pred, {-1}, /*keepdims*/ true));
  return mean(-sum(y * log(p), {-1}));
}

Tensor categorical_crossentropy_from_logits(const Tensor& y_true, const Tensor& logits) {
  constexpr std::string_view op = "losses.categorical_crossentropy_from_logits";
  const Tensor y = labels_like(op, y_true, logits);
  if (y_true.shape() != logits.shape() || logits.ndim() < 1)
    detail::fail(op, "y_true {} and logits {} must have the same [..., classes] shape",
                 y_true.shape(), logits.shape());
  return mean(-sum(y * log_softmax(logits, -1), {-1}));
}

Tensor sparse_categorical_crossentropy(const Tensor& labels, const Tensor& y_pred) {
  const Tensor l = class_labels("losses.sparse_categorical_crossentropy", labels, y_pred);
  const Tensor p = clipped(y_pred / sum(y_pred, {-1}, /*keepdims*/ true));
  return mean(-sum(one_hot_labels(l, y_pred) * log(p), {-1}));
}

Tensor sparse_categorical_crossentropy_from_logits(const Tensor& labels, const Tensor& logits) {
  const Tensor l =
      class_labels("losses.sparse_categorical_crossentropy_from_logits", labels, logits);
  return mean(-sum(one_hot_labels(l, logits) * log_softmax(logits, -1), {-1}));
}

}  // namespace kiln::nn::losses

// train::metrics: accuracies as per-batch means.
#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "kiln/train.hpp"

namespace kiln::train::metrics {

namespace {

void check_inputs(std::string_view op, const Tensor& y_true, const Tensor& y_pred) {
  if (!y_true.defined() || !y_pred.defined())
    kiln::detail::fail(op, "y_true and y_pred must be defined tensors");
  if (!is_floating(y_pred.dtype()))
    kiln::detail::fail(op, "y_pred must be f32 or f64, got {}", dtype_name(y_pred.dtype()));
}

/// Integer class labels for a [..., classes] prediction (a trailing 1 is dropped).
Tensor class_labels(const Tensor& labels, const Tensor& y_pred) {
  Tensor l = is_floating(labels.dtype()) || labels.dtype() == boolean ? cast(labels, i64) : labels;
  if (l.ndim() == y_pred.ndim() && l.ndim() > 0 && l.dim(-1) == 1) l = squeeze(l, {-1});
  return cast(l, i64);
}

}  // namespace

Metric binary_accuracy(double threshold) {
  return {"binary_accuracy", [threshold](const Tensor& y_true, const Tensor& y_pred) {
            check_inputs("metrics.binary_accuracy", y_true, y_pred);
            Tensor y = cast(y_true, y_pred.dtype());
            if (y.ndim() + 1 == y_pred.ndim() && y_pred.dim(-1) == 1) y = expand_dims(y, -1);
            return mean(cast(equal(y_pred > threshold, y > 0.5), y_pred.dtype()));
          }};
}

Metric categorical_accuracy() {
  return {"categorical_accuracy", [](const Tensor& y_true, const Tensor& y_pred) {
            check_inputs("metrics.categorical_accuracy", y_true, y_pred);
            return mean(cast(equal(argmax(y_pred, -1), argmax(y_true, -1)), y_pred.dtype()));
          }};
}

Metric sparse_categorical_accuracy() {
  return {
      "sparse_categorical_accuracy", [](const Tensor& y_true, const Tensor& y_pred) {
        check_inputs("metrics.sparse_categorical_accuracy", y_true, y_pred);
        return mean(cast(equal(argmax(y_pred, -1), class_labels(y_true, y_pred)), y_pred.dtype()));
      }};
}

}  // namespace kiln::train::metrics

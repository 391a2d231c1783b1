// Loss building blocks that need a numerically stable form.
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

Tensor sigmoid_cross_entropy(const Tensor& logits, const Tensor& labels) {
  constexpr const char* op = "sigmoid_cross_entropy";
  detail::check_defined(logits, op, 0);
  detail::check_defined(labels, op, 1);
  detail::check_same_dtype(logits, labels, op);
  if (!is_floating(logits.dtype()))
    detail::fail(op, "needs f32 or f64 logits, got {}", dtype_name(logits.dtype()));
  detail::broadcast_shapes(logits.shape(), labels.shape(), op);
  // -z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x)) = softplus(x) - x z. softplus is computed
  // as max(x, 0) + log1p(exp(-|x|)) by its kernel (no overflow, no log of 0), and its gradient
  // sigmoid(x) makes the gradient exactly sigmoid(x) - z, also at x = 0.
  return softplus(logits) - logits * labels;
}

}  // namespace kiln

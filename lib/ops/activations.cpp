// Activation functions as composites of kiln's elementwise ops: each checks its argument (so its
// errors name it) and is then written with public ops, which give it eager and traced forms,
// fusion and gradients.
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

/// x, after "[op] argument 0 is an undefined tensor" and "[op] needs a floating-point dtype".
const Tensor& floating_argument(const Tensor& x, std::string_view op) {
  detail::check_defined(x, op);
  detail::check_accepts(x.dtype(), detail::Accepts::floating, op);
  return x;
}

/// ELU of a checked x. expm1 takes min(x, 0): the branch where() drops never overflows, so its
/// gradient (zero there) never meets an infinity.
Tensor elu_of(const Tensor& x, double alpha) {
  return where(x > 0.0, x, expm1(minimum(x, detail::scalar_like(0.0, x))) * alpha);
}

}  // namespace

Tensor gelu(const Tensor& x, bool approximate) {
  floating_argument(x, "gelu");
  if (!approximate) return x * (erf(x * 0.70710678118654752440) + 1.0) * 0.5;  // 1 / sqrt(2)
  const Tensor inner = (x + x * x * x * 0.044715) * 0.79788456080286535588;    // sqrt(2 / pi)
  return x * (tanh(inner) + 1.0) * 0.5;
}

Tensor silu(const Tensor& x) {
  floating_argument(x, "silu");
  return x * sigmoid(x);
}

Tensor elu(const Tensor& x, double alpha) { return elu_of(floating_argument(x, "elu"), alpha); }

Tensor selu(const Tensor& x) {
  constexpr double alpha = 1.6732632423543772, scale = 1.0507009873554805;
  return elu_of(floating_argument(x, "selu"), alpha) * scale;
}

Tensor leaky_relu(const Tensor& x, double alpha) {
  floating_argument(x, "leaky_relu");
  return where(x > 0.0, x, x * alpha);
}

Tensor hard_sigmoid(const Tensor& x, double alpha, double beta) {
  floating_argument(x, "hard_sigmoid");
  return clip(x * alpha + beta, 0.0, 1.0);
}

Tensor softsign(const Tensor& x) {
  floating_argument(x, "softsign");
  return x / (abs(x) + 1.0);
}

Tensor mish(const Tensor& x) {
  floating_argument(x, "mish");
  return x * tanh(softplus(x));
}

}  // namespace kiln

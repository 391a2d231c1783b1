// Vector-Jacobian rules of the windowed primitives (convolution and pooling). A convolution is
// linear in each input, so its three primitives are each other's gradients: conv's are
// conv_input_grad and conv_kernel_grad, and theirs are conv and each other, with the same
// geometry (so second derivatives work too).

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "ops/dispatch.hpp"

namespace kiln::detail {

std::vector<Tensor> window_vjp(const TapeEntry& e, const Tensor& g, const WantedInputs& wanted) {
  const auto& in = e.inputs;
  const Attrs& attrs = e.attrs;
  // The gradient of input i (its dtype and shape) as primitive p of a and b, when it is wanted.
  const auto run = [&](std::size_t i, Prim p, const Tensor& a, const Tensor& b) {
    if (!is_wanted(wanted, i)) return Tensor();
    return apply(p, {a, b}, attrs, in[i].dtype(), in[i].shape());
  };
  switch (e.prim) {
    case Prim::conv:  // in: x, kernel
      return {run(0, Prim::conv_input_grad, g, in[1]), run(1, Prim::conv_kernel_grad, in[0], g)};
    case Prim::conv_input_grad:  // in: dy, kernel; out: dx
      return {run(0, Prim::conv, g, in[1]), run(1, Prim::conv_kernel_grad, g, in[0])};
    case Prim::conv_kernel_grad:  // in: x, dy; out: dkernel
      return {run(0, Prim::conv_input_grad, in[1], g), run(1, Prim::conv, in[0], g)};
    case Prim::max_pool:
      return {run(0, Prim::max_pool_grad, in[0], g)};
    case Prim::avg_pool:
      return {apply(Prim::avg_pool_grad, {g}, attrs, in[0].dtype(), in[0].shape())};
    case Prim::avg_pool_grad:  // linear in dy
      return {apply(Prim::avg_pool, {g}, attrs, in[0].dtype(), in[0].shape())};
    case Prim::max_pool_grad:
      fail("max_pool", "has no second derivative in kiln (its gradient is not differentiated)");
    default:
      fail(name(e.prim), "has no windowed gradient rule");
  }
}

}  // namespace kiln::detail

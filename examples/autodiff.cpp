// docs/autodiff.md walks through this program: a tape, the functional form, and a second
// derivative.
#include <kiln/kiln.hpp>

int main() {
  // Fit y = w * x + b on three points: one gradient step by hand with a tape.
  kiln::Tensor x = kiln::tensor({1.f, 2.f, 3.f});
  kiln::Tensor y = kiln::tensor({3.f, 5.f, 7.f});
  kiln::Tensor w = kiln::scalar(0.5f), b = kiln::scalar(0.f);

  kiln::GradientTape tape;
  tape.watch(w);
  tape.watch(b);
  kiln::Tensor loss = kiln::mean(kiln::square(w * x + b - y));
  std::vector<kiln::Tensor> g = tape.gradient(loss, {w, b});
  fmt::print("loss {} dloss/dw {} dloss/db {}\n", loss.item<float>(), g[0].item<float>(),
             g[1].item<float>());

  // The same with the functional form: f takes tensors, value_and_grad(f) returns value and grads.
  auto loss_fn = [&](const kiln::Tensor& w_, const kiln::Tensor& b_) {
    return kiln::mean(kiln::square(w_ * x + b_ - y));
  };
  auto [value, grads] = kiln::value_and_grad(loss_fn)(w, b);
  fmt::print("value_and_grad: {} {} {}\n", value.item<float>(), grads[0].item<float>(),
             grads[1].item<float>());

  // Nested tapes: d2/dt2 of t^3 at t = 2 is 12.
  kiln::Tensor t = kiln::scalar(2.0);
  kiln::GradientTape outer;
  outer.watch(t);
  kiln::Tensor dt;
  {
    kiln::GradientTape inner;
    inner.watch(t);
    dt = inner.gradient(t * t * t, t);  // 3 t^2 = 12
  }
  fmt::print("d/dt t^3 = {}, d2/dt2 t^3 = {}\n", dt.item<double>(),
             outer.gradient(dt, t).item<double>());
}

// docs/guide/tensors.md: creating tensors, dtypes, broadcasting, reductions, shape ops, errors.
#include <kiln/kiln.hpp>

int main() {
  const kiln::Tensor x = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const kiln::Tensor r = kiln::random::normal({3, 2}, 0.0, 1.0, /*seed*/ 42);
  fmt::print("x: {} {}, {} elements\n{}\n", x.dtype(), x.shape(), x.size(), x);
  fmt::print("tanh(x @ r + 1) = {}\n", kiln::tanh(kiln::matmul(x, r) + 1.f));

  // dtypes follow the C++ element type; casts are explicit.
  const kiln::Tensor counts = kiln::tensor({1, 2, 3});
  fmt::print("int data gives {}; cast to f64: {}\n", counts.dtype(), kiln::cast(counts, kiln::f64));

  // Broadcasting and reductions.
  const kiln::Tensor row = kiln::tensor({10.f, 20.f, 30.f});
  fmt::print("x + row = {}\n", x + row);
  fmt::print("sum over axis 1 = {}, mean of all = {}\n", kiln::sum(x, {1}),
             kiln::mean(x).item<float>());

  // Shape ops return new tensors (views where possible).
  fmt::print("transpose: {}, reshape: {}, stack: {}\n", kiln::transpose(x).shape(),
             kiln::reshape(x, {3, 2}).shape(), kiln::stack({x, x}).shape());

  // Errors name the op first.
  try {
    kiln::matmul(x, x);
  } catch (const kiln::Error& e) {
    fmt::print("error: {}\n", e.what());
  }
  return 0;
}

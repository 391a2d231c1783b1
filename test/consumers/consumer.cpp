// A tiny program that uses kiln as an installed library.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor x = kiln::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  kiln::Tensor y = kiln::matmul(x, x) + 1.f;
  const auto v = y.to_vector<float>();
  fmt::print("{}\n", y);
  // [[1,2],[3,4]]^2 + 1 = [[8,11],[16,23]]
  return v == std::vector<float>{8.f, 11.f, 16.f, 23.f} ? 0 : 1;
}

// The README demo: eager tensors and a few op results.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor x = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  kiln::Tensor w = kiln::random::normal({3, 2}, 0.0, 1.0, /*seed*/ 42);
  fmt::print("x = {}\n\n", x);
  fmt::print("w = random::normal([3,2], seed 42) = {}\n\n", w);
  fmt::print("tanh(x @ w + 1) = {}\n\n", kiln::tanh(kiln::matmul(x, w) + 1.f));
  fmt::print("sum(x, axis 1) = {}\n", kiln::sum(x, {1}));
  fmt::print("softmax(x) = {}\n", kiln::softmax(x));
  fmt::print("transpose(x) = {}\n", kiln::transpose(x));
  fmt::print("x > 2 = {}\n", x > 2.f);
  fmt::print("argmax(x, axis 1) = {}\n\n", kiln::argmax(x, 1));
  try {
    kiln::matmul(x, x);
  } catch (const kiln::Error& e) {
    fmt::print("bad input is a kiln::Error: {}\n", e.what());
  }
  const auto m = kiln::memory_stats();
  fmt::print("\nmemory_stats: {} live tensors, {} live bytes, peak {} bytes\n", m.live_tensors,
             m.live_bytes, m.peak_bytes);
}

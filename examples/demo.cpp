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
  // Trace once, replay the cached graph: an unrolled 5-step RNN whose weights are variables.
  kiln::Variable w_in(kiln::random::normal({10, 20}, 0.0, 0.3, 1), "rnn/w_in");
  kiln::Variable w_h(kiln::random::normal({20, 20}, 0.0, 0.3, 2), "rnn/w_h");
  auto rnn = kiln::function([&](const kiln::Tensor& xs) {
    kiln::Tensor h = kiln::zeros({32, 20});
    for (const kiln::Tensor& x_t : kiln::unstack(xs, 1))
      h = kiln::tanh(kiln::matmul(x_t, w_in.value()) + kiln::matmul(h, w_h.value()));
    return h;
  });
  kiln::Tensor xs = kiln::random::normal({32, 5, 10}, 0.0, 1.0, 3);
  rnn(xs);
  const auto before = kiln::memory_stats();
  for (int i = 0; i < 1000; ++i) rnn(xs);
  const auto after = kiln::memory_stats();
  fmt::print("\nrnn called 1001 times: tracing_count {}, graph nodes {}, live bytes {} -> {}\n",
             rnn.tracing_count(), rnn.get_concrete_function(xs).graph().num_nodes(),
             before.live_bytes, after.live_bytes);

  const auto m = kiln::memory_stats();
  fmt::print("\nmemory_stats: {} live tensors, {} live bytes, peak {} bytes\n", m.live_tensors,
             m.live_bytes, m.peak_bytes);
}

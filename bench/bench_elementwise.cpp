// Elementwise timings through the public API: the per-op overhead of a tiny add and the
// bandwidth of large adds and transcendental ops. Run: ./build/bench/bench_elementwise
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <kiln/kiln.hpp>

namespace {

/// Seconds per call of fn, best of five rounds of `iterations` calls.
template <class F>
double seconds_per_call(std::int64_t iterations, F&& fn) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < iterations; ++i) fn();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count() / static_cast<double>(iterations));
  }
  return best;
}

}  // namespace

int main() {
  const auto a4 = kiln::tensor<float>({1, 2, 3, 4});
  const auto b4 = kiln::tensor<float>({5, 6, 7, 8});
  fmt::print("add f32[4]            {:8.3f} us\n",
             1e6 * seconds_per_call(200000, [&] { (void)kiln::add(a4, b4); }));
  fmt::print("add f32[4] + 1.f      {:8.3f} us\n",
             1e6 * seconds_per_call(200000, [&] { (void)(a4 + 1.F); }));

  for (std::int64_t n : {std::int64_t{1} << 12, std::int64_t{1} << 20, std::int64_t{1} << 24}) {
    const auto a = kiln::full({n}, 1.5);
    const auto b = kiln::full({n}, 2.5);
    const std::int64_t iterations = std::max<std::int64_t>(3, (std::int64_t{1} << 26) / n);
    const double add = seconds_per_call(iterations, [&] { (void)kiln::add(a, b); });
    const double exp = seconds_per_call(iterations, [&] { (void)kiln::exp(a); });
    const double bytes = 12.0 * static_cast<double>(n);
    fmt::print("add f32[{:>8}]      {:8.1f} us  {:6.1f} GB/s\n", n, 1e6 * add, bytes / add / 1e9);
    fmt::print("exp f32[{:>8}]      {:8.1f} us  {:6.2f} Gelem/s\n", n, 1e6 * exp,
               static_cast<double>(n) / exp / 1e9);
  }
  const auto m = kiln::full({2048, 2048}, 1.5);
  const auto t = kiln::transpose(m);
  fmt::print("add f32[2048,2048]^T  {:8.1f} us\n",
             1e6 * seconds_per_call(10, [&] { (void)kiln::add(t, m); }));
  return 0;
}

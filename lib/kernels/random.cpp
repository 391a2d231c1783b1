// Kernel of the random family: counter-based draws, so a compiled graph produces new values
// whenever its key input changes and the same values for the same key.
#include <cstring>

#include "core/fail.hpp"
#include "kernels/kernel.hpp"
#include "kernels/parallel.hpp"
#include "kernels/philox.hpp"

namespace kiln::detail {

namespace {

constexpr std::int64_t elements_per_chunk = 1 << 14;

/// Philox block of element `index` for a key (seed, counter): the element index fills the
/// first two counter words and `counter` the last two, so counter 0 gives the same values as
/// kiln::random::uniform(shape, 0, 1, seed).
PhiloxCounter block(std::uint64_t seed, std::uint64_t counter, std::uint64_t index) {
  const PhiloxKey key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  return philox4x32_10(
      {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
       static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32)},
      key);
}

template <class T>
void fill_uniform(T* out, std::int64_t n, std::uint64_t seed, std::uint64_t counter) {
  parallel_for(n, elements_per_chunk, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const PhiloxCounter b = block(seed, counter, static_cast<std::uint64_t>(i));
      if constexpr (std::is_same_v<T, float>) {
        out[i] = static_cast<float>(b[0] >> 8) * 0x1p-24f;  // top 24 bits: exact in float
      } else {
        const std::uint64_t bits = (std::uint64_t{b[0]} << 32) | b[1];
        out[i] = static_cast<double>(bits >> 11) * 0x1p-53;  // top 53 bits: exact in double
      }
    }
  });
}

}  // namespace

// random_uniform: inputs {key i64 [2] = (seed, counter)}; out f32 or f64, any shape.
void run_random(const KernelCall& call) {
  if (call.prim != Prim::random_uniform) fail(name(call.prim), "no random kernel");
  std::int64_t key[2];
  std::memcpy(key, call.inputs[0].data, sizeof(key));
  const auto seed = static_cast<std::uint64_t>(key[0]);
  const auto counter = static_cast<std::uint64_t>(key[1]);
  const std::int64_t n = call.out.numel();
  if (call.out.dtype == DType::f32)
    fill_uniform(call.out.ptr<float>(), n, seed, counter);
  else
    fill_uniform(call.out.ptr<double>(), n, seed, counter);
}

}  // namespace kiln::detail

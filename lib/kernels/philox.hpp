#pragma once
// Philox-4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3" (SC 2011). Output depends only on (key, counter), so any element of
// a random tensor can be computed on its own.

#include <array>
#include <cstdint>

namespace kiln::detail {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

/// The 128 random bits for `counter` under `key` (ten rounds).
constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  constexpr std::uint32_t multiplier0 = 0xD2511F53u;
  constexpr std::uint32_t multiplier1 = 0xCD9E8D57u;
  constexpr std::uint32_t weyl0 = 0x9E3779B9u;
  constexpr std::uint32_t weyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t product0 = std::uint64_t{multiplier0} * counter[0];
    const std::uint64_t product1 = std::uint64_t{multiplier1} * counter[2];
    const auto hi0 = static_cast<std::uint32_t>(product0 >> 32);
    const auto lo0 = static_cast<std::uint32_t>(product0);
    const auto hi1 = static_cast<std::uint32_t>(product1 >> 32);
    const auto lo1 = static_cast<std::uint32_t>(product1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += weyl0;
    key[1] += weyl1;
  }
  return counter;
}

}  // namespace kiln::detail

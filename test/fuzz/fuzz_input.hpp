#pragma once
// Shared by the libFuzzer targets: run one reader on the input bytes. kiln::Error is the one
// acceptable outcome for bad input; any other exception escapes and libFuzzer reports it,
// as it does crashes, leaks and sanitizer findings.

#include <cstddef>
#include <cstdint>
#include <span>

#include <kiln/kiln.hpp>

namespace kiln_fuzz {

inline std::span<const std::byte> bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

/// Reads every element of `t`, so that sanitizers see any bad byte the reader produced.
inline std::uint64_t touch(const kiln::Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data());
  std::uint64_t sum = 0;
  const auto n = static_cast<std::size_t>(t.size()) * kiln::dtype_size(t.dtype());
  for (std::size_t i = 0; i < n; ++i) sum += p[i];
  if (t.dtype() == kiln::boolean)
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] > 1) __builtin_trap();  // booleans must be 0 or 1
  return sum;
}

}  // namespace kiln_fuzz

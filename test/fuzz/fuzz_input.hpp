#pragma once
// Shared by the libFuzzer targets: run one reader on the input bytes. kiln::Error is the one
// acceptable outcome for bad input; any other exception escapes and libFuzzer reports it,
// as it does crashes, leaks and sanitizer findings.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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

/// The properties every error message must have, whatever the input: it names the operation
/// and the source, holds no control byte but line breaks (bytes from the input are escaped, so
/// a NUL cannot cut it short), and stays short (quotes are bounded excerpts).
inline void check_message(const kiln::Error& error, std::string_view op) {
  const std::string_view message = error.what();
  const std::string prefix = "[" + std::string(op) + "] fuzz input";
  if (message.substr(0, prefix.size()) != prefix) __builtin_trap();
  if (message.size() > 4096) __builtin_trap();
  for (char c : message)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') __builtin_trap();
}

}  // namespace kiln_fuzz

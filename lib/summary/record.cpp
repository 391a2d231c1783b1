#include "summary/record.hpp"

#include <isa-l/crc.h>

#include <limits>

namespace kiln::detail {

namespace {
void append_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
}  // namespace

std::uint32_t crc32c(std::string_view data) {
  // ISA-L's iSCSI CRC leaves the initial and final inversion of the standard CRC-32C to the
  // caller. It takes an int length, so longer data goes in pieces (the CRC chains).
  unsigned int crc = 0xFFFFFFFFu;
  auto* bytes = reinterpret_cast<unsigned char*>(const_cast<char*>(data.data()));
  std::size_t left = data.size();
  constexpr auto piece = static_cast<std::size_t>(std::numeric_limits<int>::max() / 2);
  while (left > 0) {
    const std::size_t n = left < piece ? left : piece;
    crc = crc32_iscsi(bytes, static_cast<int>(n), crc);
    bytes += n;
    left -= n;
  }
  return crc ^ 0xFFFFFFFFu;
}

std::uint32_t mask_crc(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tf_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  const auto length = static_cast<std::uint64_t>(data.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xFF));
  append_u32(out, mask_crc(crc32c(std::string_view(out.data(), 8))));
  out.append(data);
  append_u32(out, mask_crc(crc32c(data)));
  return out;
}

}  // namespace kiln::detail

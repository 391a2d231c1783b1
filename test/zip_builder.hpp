#pragma once
// A minimal zip writer for tests: lets a test craft archives libzip would refuse to write
// (bad CRCs, unsafe names, odd methods).

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "io_test_support.hpp"

namespace io_test {

struct ZipMember {
  std::string name;
  std::vector<std::uint8_t> data;  // uncompressed
  bool deflate = false;
  bool corrupt_crc = false;  // store a CRC that does not match
  std::uint16_t flags = 0;   // general purpose flags (bit 0: encrypted)
  int method = -1;           // overrides the method number written
  bool descriptor = false;   // CRC and sizes in a data descriptor after the data (flag bit 3;
                             // zeros in the local header), as streaming writers do
};

inline std::vector<std::uint8_t> deflate_raw(const std::vector<std::uint8_t>& in) {
  z_stream s{};
  if (deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::vector<std::uint8_t> out(deflateBound(&s, in.size()));
  s.next_in = const_cast<Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

inline std::vector<std::uint8_t> make_zip(const std::vector<ZipMember>& members) {
  std::vector<std::uint8_t> out, central;
  for (const auto& m : members) {
    const auto stored = m.deflate ? deflate_raw(m.data) : m.data;
    std::uint32_t crc =
        static_cast<std::uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    if (m.corrupt_crc) crc ^= 0x1234u;
    const int method = m.method >= 0 ? m.method : (m.deflate ? 8 : 0);
    const auto offset = out.size();
    const std::uint16_t flags = m.descriptor ? static_cast<std::uint16_t>(m.flags | 8) : m.flags;
    auto fields = [&](std::vector<std::uint8_t>& v, bool local) {
      const bool zeros = local && m.descriptor;
      append_le(v, 20, 2);  // version needed
      append_le(v, flags, 2);
      append_le(v, static_cast<std::uint64_t>(method), 2);
      append_le(v, 0, 2);     // time
      append_le(v, 0x21, 2);  // date: 1980-01-01
      append_le(v, zeros ? 0 : crc, 4);
      append_le(v, zeros ? 0 : stored.size(), 4);
      append_le(v, zeros ? 0 : m.data.size(), 4);
      append_le(v, m.name.size(), 2);
      append_le(v, 0, 2);  // extra length
    };
    append_le(out, 0x04034b50, 4);
    fields(out, true);
    append(out, m.name);
    out.insert(out.end(), stored.begin(), stored.end());
    if (m.descriptor) {
      append_le(out, 0x08074b50, 4);
      append_le(out, crc, 4);
      append_le(out, stored.size(), 4);
      append_le(out, m.data.size(), 4);
    }

    append_le(central, 0x02014b50, 4);
    append_le(central, 20, 2);  // version made by
    fields(central, false);
    append_le(central, 0, 2);  // comment length
    append_le(central, 0, 2);  // disk
    append_le(central, 0, 2);  // internal attributes
    append_le(central, 0, 4);  // external attributes
    append_le(central, offset, 4);
    append(central, m.name);
  }
  const auto central_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  append_le(out, 0x06054b50, 4);
  append_le(out, 0, 2);
  append_le(out, 0, 2);
  append_le(out, members.size(), 2);
  append_le(out, members.size(), 2);
  append_le(out, central.size(), 4);
  append_le(out, central_offset, 4);
  append_le(out, 0, 2);
  return out;
}

/// Two stored members whose data overlaps: "a.npy"'s data quotes "b.npy"'s local header and
/// data (the overlapping-file zip bomb, with no compression).
inline std::vector<std::uint8_t> make_overlapping_zip(const std::vector<std::uint8_t>& inner) {
  auto local = [](const std::string& name, const std::vector<std::uint8_t>& data) {
    std::vector<std::uint8_t> v;
    append_le(v, 0x04034b50, 4);
    for (std::uint64_t field : {20, 0, 0, 0, 0x21}) append_le(v, field, 2);
    append_le(v, crc32(0, data.data(), static_cast<uInt>(data.size())), 4);
    append_le(v, data.size(), 4);
    append_le(v, data.size(), 4);
    append_le(v, name.size(), 2);
    append_le(v, 0, 2);
    append(v, name);
    return v;
  };
  auto central = [](const std::string& name, const std::vector<std::uint8_t>& data,
                    std::uint64_t offset) {
    std::vector<std::uint8_t> v;
    append_le(v, 0x02014b50, 4);
    for (std::uint64_t field : {20, 20, 0, 0, 0, 0x21}) append_le(v, field, 2);
    append_le(v, crc32(0, data.data(), static_cast<uInt>(data.size())), 4);
    append_le(v, data.size(), 4);
    append_le(v, data.size(), 4);
    append_le(v, name.size(), 2);
    for (int i = 0; i < 4; ++i) append_le(v, 0, 2);
    append_le(v, 0, 4);
    append_le(v, offset, 4);
    append(v, name);
    return v;
  };
  std::vector<std::uint8_t> outer = local("b.npy", inner);
  outer.insert(outer.end(), inner.begin(), inner.end());
  std::vector<std::uint8_t> out = local("a.npy", outer);
  const std::uint64_t inner_offset = out.size();
  out.insert(out.end(), outer.begin(), outer.end());
  const std::uint64_t central_offset = out.size();
  auto directory = central("a.npy", outer, 0);
  const auto second = central("b.npy", inner, inner_offset);
  directory.insert(directory.end(), second.begin(), second.end());
  out.insert(out.end(), directory.begin(), directory.end());
  append_le(out, 0x06054b50, 4);
  for (std::uint64_t field : {0, 0, 2, 2}) append_le(out, field, 2);
  append_le(out, directory.size(), 4);
  append_le(out, central_offset, 4);
  append_le(out, 0, 2);
  return out;
}

}  // namespace io_test

#include "summary/wire.hpp"

#include <bit>
#include <cstring>

namespace kiln::detail::proto {

namespace {
constexpr int wire_varint = 0, wire_fixed64 = 1, wire_length = 2, wire_fixed32 = 5;

template <class U>
void append_little_endian(std::string& out, U bits) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}
}  // namespace

void Message::raw_varint(std::uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void Message::tag(int field, int wire_type) {
  raw_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}

Message& Message::varint(int field, std::int64_t value) {
  tag(field, wire_varint);
  raw_varint(static_cast<std::uint64_t>(value));
  return *this;
}

Message& Message::float64(int field, double value) {
  tag(field, wire_fixed64);
  append_little_endian(out_, std::bit_cast<std::uint64_t>(value));
  return *this;
}

Message& Message::float32(int field, float value) {
  tag(field, wire_fixed32);
  append_little_endian(out_, std::bit_cast<std::uint32_t>(value));
  return *this;
}

Message& Message::bytes(int field, std::string_view value) {
  tag(field, wire_length);
  raw_varint(value.size());
  out_.append(value);
  return *this;
}

Message& Message::packed_float64(int field, std::span<const double> values) {
  if (values.empty()) return *this;
  tag(field, wire_length);
  raw_varint(values.size() * 8);
  for (const double v : values) append_little_endian(out_, std::bit_cast<std::uint64_t>(v));
  return *this;
}

Message& Message::packed_varint(int field, std::span<const std::int64_t> values) {
  if (values.empty()) return *this;
  Message body;
  for (const std::int64_t v : values) body.raw_varint(static_cast<std::uint64_t>(v));
  return bytes(field, body.data());
}

}  // namespace kiln::detail::proto

#pragma once
// Protocol-buffer wire format, written by hand for the few messages TensorBoard reads (Event,
// Summary, HistogramProto, TensorProto, GraphDef and their parts): see docs/architecture.md on
// why kiln encodes these itself instead of generating classes with protoc.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::detail::proto {

/// One message being encoded: fields are appended in the order they are added (any order is
/// valid protobuf; parsers take the last value of a repeated-once field).
class Message {
 public:
  /// An int32/int64/uint64/bool/enum field (varint; a negative int is ten bytes, as protobuf
  /// encodes it).
  Message& varint(int field, std::int64_t value);
  Message& boolean(int field, bool value) { return varint(field, value ? 1 : 0); }
  /// A double field (64-bit, little-endian).
  Message& float64(int field, double value);
  /// A float field (32-bit, little-endian).
  Message& float32(int field, float value);
  /// A string or bytes field.
  Message& bytes(int field, std::string_view value);
  /// An embedded message.
  Message& message(int field, const Message& value) { return bytes(field, value.data()); }
  /// A packed repeated double field (written even when empty only if `values` is not).
  Message& packed_float64(int field, std::span<const double> values);
  /// A packed repeated int64 field.
  Message& packed_varint(int field, std::span<const std::int64_t> values);

  const std::string& data() const { return out_; }
  std::string release() { return std::move(out_); }

 private:
  void tag(int field, int wire_type);
  void raw_varint(std::uint64_t value);
  std::string out_;
};

}  // namespace kiln::detail::proto

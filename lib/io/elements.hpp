#pragma once
// Element types as files store them, their conversion into kiln tensors, and the checked
// arithmetic that validates sizes read from untrusted headers.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln::io::detail {

/// The element types kiln reads and writes: one per dtype that some file format names.
enum class StoredKind : std::uint8_t {
  boolean,
  f16,
  bf16,
  f32,
  f64,
  i32,
  i64,
  i8,
  u8,
  i16,
  u16,
  u32,
  u64,
  f8e4m3fn,
  f8e5m2
};

/// One element type as a file stores it.
struct StoredType {
  StoredKind kind = StoredKind::f32;
  bool big_endian = false;
};

std::size_t stored_size(StoredKind kind);
/// The dtype a stored element loads as.
DType loaded_dtype(StoredKind kind);
/// The stored kind that writes `dtype` unchanged, if a file format has one.
std::optional<StoredKind> stored_kind_of(DType dtype);

/// Converts `count` elements stored as `type` at `src` (any alignment) into kiln's layout
/// for loaded_dtype(type.kind) at `dst`. Booleans become 0 or 1 (any non-zero byte is true).
/// For kinds whose stored size equals the loaded size, src may equal dst.
void decode_elements(StoredType type, const std::byte* src, std::size_t count, void* dst);

/// A new tensor of `shape` from elements stored as `type`. `fortran_order` means the bytes
/// hold the array in column-major order; the result is always row-major. `raw` must hold
/// exactly shape.numel() * stored_size(type.kind) bytes (checked by the callers' parsers).
Tensor decode_tensor(StoredType type, const Shape& shape, bool fortran_order,
                     std::span<const std::byte> raw);

/// The shape whose row-major layout is the memory order of the data: `shape` reversed for
/// Fortran order.
Shape layout_shape(const Shape& shape, bool fortran_order);

/// Turns a contiguous tensor of layout_shape() filled with raw stored bytes (same size per element
/// as the loaded dtype) into its final value: decodes in place and reorders Fortran-order data.
Tensor finish_tensor_in_place(Tensor raw, StoredType type, bool fortran_order);

/// The shape of a tensor read from a file: each dim must fit kiln (rank at most
/// Shape::max_rank); the element count times `element_bytes` must not overflow 64 bits.
/// Returns the byte size, or an error text in `error` (then the result is meaningless).
struct CheckedShape {
  Shape shape;
  std::uint64_t bytes = 0;
  std::string error;  // empty when valid
};
CheckedShape check_shape(std::span<const std::uint64_t> dims, std::size_t element_bytes);

inline std::uint16_t load_le16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) |
                                    (std::to_integer<unsigned>(p[1]) << 8));
}
inline std::uint32_t load_le32(const std::byte* p) {
  return static_cast<std::uint32_t>(load_le16(p)) |
         (static_cast<std::uint32_t>(load_le16(p + 2)) << 16);
}
inline std::uint64_t load_le64(const std::byte* p) {
  return static_cast<std::uint64_t>(load_le32(p)) |
         (static_cast<std::uint64_t>(load_le32(p + 4)) << 32);
}
inline void append_le(std::vector<std::byte>& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
}

/// True when `text` is valid UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool is_valid_utf8(std::string_view text);

/// The longest excerpt printable() quotes by default, in bytes of the original text.
inline constexpr std::size_t printable_limit = 200;

/// `text` (read from a file: a name, a dtype, a header excerpt) made safe to quote in an
/// error message: ASCII control bytes, DEL and bytes that are not valid UTF-8 become `\xNN`;
/// C1 controls, line separators and bidirectional-formatting characters become `\uNNNN`;
/// other UTF-8 text is kept. Text longer than `limit` bytes is cut there (at a character
/// boundary) and ends with `... (N bytes)`. A NUL byte therefore never cuts a message short,
/// and a hostile file never makes a message longer than a few hundred bytes per quote.
std::string printable(std::string_view text, std::size_t limit = printable_limit);

}  // namespace kiln::io::detail

#include "io/elements.hpp"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/ops.hpp"

namespace kiln::io::detail {

static_assert(std::endian::native == std::endian::little,
              "kiln's file readers assume a little-endian host");

std::size_t stored_size(StoredKind kind) { return dtype_size(loaded_dtype(kind)); }

DType loaded_dtype(StoredKind kind) {
  switch (kind) {
    case StoredKind::boolean:
      return DType::boolean;
    case StoredKind::f16:
      return DType::f16;
    case StoredKind::bf16:
      return DType::bf16;
    case StoredKind::f32:
      return DType::f32;
    case StoredKind::f64:
      return DType::f64;
    case StoredKind::i32:
      return DType::i32;
    case StoredKind::i64:
      return DType::i64;
    case StoredKind::i8:
      return DType::i8;
    case StoredKind::u8:
      return DType::u8;
    case StoredKind::i16:
      return DType::i16;
    case StoredKind::u16:
      return DType::u16;
    case StoredKind::u32:
      return DType::u32;
    case StoredKind::u64:
      return DType::u64;
    case StoredKind::f8e4m3fn:
      return DType::f8e4m3fn;
    case StoredKind::f8e5m2:
      return DType::f8e5m2;
  }
  return DType::f32;
}

std::optional<StoredKind> stored_kind_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return StoredKind::f32;
    case DType::f64:
      return StoredKind::f64;
    case DType::i32:
      return StoredKind::i32;
    case DType::i64:
      return StoredKind::i64;
    case DType::boolean:
      return StoredKind::boolean;
    case DType::i8:
      return StoredKind::i8;
    case DType::u8:
      return StoredKind::u8;
    case DType::f16:
      return StoredKind::f16;
    case DType::bf16:
      return StoredKind::bf16;
    case DType::i16:
      return StoredKind::i16;
    case DType::u16:
      return StoredKind::u16;
    case DType::u32:
      return StoredKind::u32;
    case DType::u64:
      return StoredKind::u64;
    case DType::f8e4m3fn:
      return StoredKind::f8e4m3fn;
    case DType::f8e5m2:
      return StoredKind::f8e5m2;
    case DType::f8e4m3fnuz:
    case DType::f8e5m2fnuz:
    case DType::f4e2m1fn:
    case DType::i4:
    case DType::u4:
    case DType::i2:
    case DType::u2:
      return std::nullopt;
  }
  return std::nullopt;
}

namespace {

template <class Word>
Word load_word(const std::byte* p, bool big_endian) {
  Word w;
  std::memcpy(&w, p, sizeof(Word));
  if (big_endian) {
    if constexpr (sizeof(Word) == 2) w = __builtin_bswap16(w);
    if constexpr (sizeof(Word) == 4) w = __builtin_bswap32(w);
    if constexpr (sizeof(Word) == 8) w = __builtin_bswap64(w);
  }
  return w;
}

template <class Word>
void copy_words(const std::byte* src, std::size_t count, void* dst, bool big_endian) {
  auto* out = static_cast<std::byte*>(dst);
  if (!big_endian) {
    if (src != out) std::memmove(out, src, count * sizeof(Word));
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const Word w = load_word<Word>(src + i * sizeof(Word), true);
    std::memcpy(out + i * sizeof(Word), &w, sizeof(Word));
  }
}

}  // namespace

void decode_elements(StoredType type, const std::byte* src, std::size_t count, void* dst) {
  auto* out = static_cast<std::byte*>(dst);
  switch (type.kind) {
    case StoredKind::boolean:
      for (std::size_t i = 0; i < count; ++i)
        out[i] = src[i] != std::byte{0} ? std::byte{1} : std::byte{0};
      return;
    case StoredKind::i8:
    case StoredKind::u8:
    case StoredKind::f8e4m3fn:
    case StoredKind::f8e5m2:
      if (out != src) std::memcpy(out, src, count);
      return;
    case StoredKind::f16:
    case StoredKind::bf16:
    case StoredKind::i16:
    case StoredKind::u16:
      copy_words<std::uint16_t>(src, count, dst, type.big_endian);
      return;
    case StoredKind::f32:
    case StoredKind::i32:
    case StoredKind::u32:
      copy_words<std::uint32_t>(src, count, dst, type.big_endian);
      return;
    case StoredKind::f64:
    case StoredKind::i64:
    case StoredKind::u64:
      copy_words<std::uint64_t>(src, count, dst, type.big_endian);
      return;
  }
}

Shape layout_shape(const Shape& shape, bool fortran_order) {
  if (!fortran_order) return shape;
  Shape reversed = shape;
  std::reverse(reversed.begin(), reversed.end());
  return reversed;
}

Tensor finish_tensor_in_place(Tensor raw, StoredType type, bool fortran_order) {
  const auto count = static_cast<std::size_t>(raw.size());
  auto* data = raw.impl()->data();
  decode_elements(type, reinterpret_cast<const std::byte*>(data), count, data);
  if (!fortran_order || raw.ndim() < 2) return raw;
  return kiln::transpose(raw).contiguous();
}

Tensor decode_tensor(StoredType type, const Shape& shape, bool fortran_order,
                     std::span<const std::byte> raw) {
  Tensor t = kiln::detail::empty(layout_shape(shape, fortran_order), loaded_dtype(type.kind));
  decode_elements(type, raw.data(), static_cast<std::size_t>(t.size()), t.impl()->data());
  if (!fortran_order || t.ndim() < 2) return t;
  return kiln::transpose(t).contiguous();
}

CheckedShape check_shape(std::span<const std::uint64_t> dims, std::size_t element_bytes) {
  CheckedShape result;
  if (dims.size() > Shape::max_rank) {
    result.error =
        fmt::format("rank {} exceeds kiln's maximum rank {}", dims.size(), Shape::max_rank);
    return result;
  }
  // The product of the non-zero dims bounds every stride, so it must fit in int64 even when a
  // zero dim makes the tensor empty.
  constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t span = 1;
  bool has_zero = false;
  for (auto d : dims) {
    if (d > int64_max) {
      result.error = fmt::format("dimension {} is too large", d);
      return result;
    }
    if (d == 0)
      has_zero = true;
    else if (__builtin_mul_overflow(span, d, &span) || span > int64_max) {
      result.error = "the element count overflows 64 bits";
      return result;
    }
    result.shape.push_back(static_cast<std::int64_t>(d));
  }
  const std::uint64_t count = has_zero ? 0 : span;
  if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(element_bytes), &result.bytes))
    result.error = "the byte size overflows 64 bits";
  return result;
}

namespace {

/// The length of the UTF-8 sequence at text[i] (1 to 4) and its code point, or 0 when the
/// bytes there are not valid UTF-8 (bad lead or continuation byte, truncated sequence,
/// overlong form, surrogate, past U+10FFFF).
std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t& code) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) {
    code = c;
    return 1;
  }
  std::size_t length = 0;
  if ((c & 0xe0) == 0xc0) {
    length = 2;
    code = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    length = 3;
    code = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    length = 4;
    code = c & 0x07;
  } else {
    return 0;
  }
  if (length > text.size() - i) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xc0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3f);
  }
  const std::uint32_t smallest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
  if (code < smallest || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

/// Code points that are valid but would garble a message: C1 controls, line and paragraph
/// separators, bidirectional marks, embeddings, overrides and isolates, the byte-order mark.
bool hidden_code_point(std::uint32_t code) {
  return (code >= 0x80 && code < 0xa0) || code == 0x200e || code == 0x200f ||
         (code >= 0x2028 && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069) || code == 0xfeff;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  std::uint32_t code = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence(text, i, code);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  std::uint32_t code = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (i >= limit) {
      out += fmt::format("... ({} bytes)", text.size());
      break;
    }
    const std::size_t length = utf8_sequence(text, i, code);
    if (length == 0 || code < 0x20 || code == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (hidden_code_point(code))
      out += fmt::format("\\u{:04x}", code);
    else
      out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace kiln::io::detail

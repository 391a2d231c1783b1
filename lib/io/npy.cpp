#include "io/npy.hpp"

#include <cstring>
#include <optional>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "io/atomic_file.hpp"
#include "io/mapped_file.hpp"

namespace kiln::io {

namespace detail {

namespace {

using kiln::detail::fail;

constexpr char npy_magic[] = "\x93NUMPY";
constexpr std::size_t npy_magic_bytes = 6;

/// A strict parser for the header dict: a Python literal such as
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`. It accepts exactly what
/// such a dict needs: quoted strings without escapes, True/False, and tuples of non-negative
/// decimal integers (an optional Python 2 'L' suffix is allowed).
class HeaderDictParser {
 public:
  HeaderDictParser(std::string_view text, const std::string& op, const std::string& source)
      : text_(text), op_(op), source_(source) {}

  NpyHeader parse() {
    NpyHeader header;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    expect('{');
    skip_space();
    while (peek() != '}') {
      const std::string key = parse_string("a key");
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        once(seen_descr, key);
        if (peek() == '[') error("'descr' is a list: structured dtypes are not supported");
        header.descr = parse_string("the value of 'descr'");
      } else if (key == "fortran_order") {
        once(seen_fortran, key);
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        once(seen_shape, key);
        header.shape = parse_shape();
      } else {
        error(fmt::format("unexpected key '{}' (expected 'descr', 'fortran_order', 'shape')",
                          printable(key)));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        error("expected ',' or '}' after a value");
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the closing '}'");
    if (!seen_descr || !seen_fortran || !seen_shape)
      error("the header must have the keys 'descr', 'fortran_order' and 'shape'");
    return header;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(op_, "{}: bad .npy header at byte {}: {}", source_, pos_, what);
  }
  char peek() const {
    if (pos_ >= text_.size()) error("the header ends too early");
    return text_[pos_];
  }
  void expect(char c) {
    if (peek() != c) error(fmt::format("expected '{}'", c));
    ++pos_;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  void once(bool& seen, const std::string& key) {
    if (seen) error(fmt::format("the key '{}' appears twice", key));
    seen = true;
  }
  std::string parse_string(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') error(fmt::format("expected a quoted string as {}", what));
    const std::size_t start = ++pos_;
    while (peek() != quote) {
      const char c = text_[pos_];
      if (c == '\\') error("escape sequences are not supported in header strings");
      if (c == '\n' || c == '\r') error("unterminated string");
      ++pos_;
    }
    std::string value(text_.substr(start, pos_ - start));
    ++pos_;
    return value;
  }
  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    error("'fortran_order' must be True or False");
  }
  std::uint64_t parse_dim() {
    if (peek() == '-') error("negative dimension in 'shape'");
    if (peek() < '0' || peek() > '9') error("expected a dimension (a non-negative integer)");
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9')
      error("dimension with a leading zero");
    std::uint64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (__builtin_mul_overflow(value, std::uint64_t{10}, &value) ||
          __builtin_add_overflow(value, digit, &value))
        error("dimension too large");
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;
    return value;
  }
  Shape parse_shape() {
    expect('(');
    skip_space();
    std::vector<std::uint64_t> dims;
    bool comma = false;
    while (peek() != ')') {
      dims.push_back(parse_dim());
      if (dims.size() > Shape::max_rank)
        error(fmt::format("'shape' has more than kiln's maximum rank {}", Shape::max_rank));
      skip_space();
      if (peek() == ',') {
        comma = true;
        ++pos_;
        skip_space();
      } else if (peek() != ')') {
        error("expected ',' or ')' in 'shape'");
      }
    }
    ++pos_;
    if (dims.size() == 1 && !comma)
      error("'shape' is not a tuple (a one-element tuple needs a trailing comma)");
    CheckedShape checked = check_shape(dims, 1);
    if (!checked.error.empty()) error("'shape': " + checked.error);
    return checked.shape;
  }

  std::string_view text_;
  const std::string& op_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

/// Maps a NumPy type string ('<f4', '|b1', '>i8', ...) to a stored type.
std::optional<StoredType> parse_descr(std::string_view descr, std::string& problem) {
  if (descr.size() < 3) {
    problem = "is not a NumPy type string like '<f4'";
    return std::nullopt;
  }
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    problem = "has no byte-order mark ('<', '>', '|' or '=')";
    return std::nullopt;
  }
  const std::string_view code = descr.substr(1);
  StoredKind kind;
  if (code == "f2") {
    kind = StoredKind::f16;
  } else if (code == "f4") {
    kind = StoredKind::f32;
  } else if (code == "f8") {
    kind = StoredKind::f64;
  } else if (code == "i4") {
    kind = StoredKind::i32;
  } else if (code == "i8") {
    kind = StoredKind::i64;
  } else if (code == "b1") {
    kind = StoredKind::boolean;
  } else if (code == "i1") {
    kind = StoredKind::i8;
  } else if (code == "u1") {
    kind = StoredKind::u8;
  } else if (code == "i2") {
    kind = StoredKind::i16;
  } else if (code == "u2") {
    kind = StoredKind::u16;
  } else if (code == "u4") {
    kind = StoredKind::u32;
  } else if (code == "u8") {
    kind = StoredKind::u64;
  } else if (code == "V2") {
    kind = StoredKind::bf16;  // NumPy has no bfloat16: ml_dtypes saves it as 2-byte void
  } else {
    problem =
        "is not supported (kiln reads f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8, b1, and V2 as "
        "bfloat16)";
    return std::nullopt;
  }
  const bool void_bytes = code == "V2";  // no byte order of its own: stored little-endian
  if (order == '|' && stored_size(kind) != 1 && !void_bytes) {
    problem = "uses '|' (no byte order) for a multi-byte type";
    return std::nullopt;
  }
  return StoredType{kind, order == '>' && stored_size(kind) > 1 && !void_bytes};
}

std::string shape_repr(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ',';
  out += ')';
  return out;
}

const char* descr_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "<f4";
    case DType::f64:
      return "<f8";
    case DType::i32:
      return "<i4";
    case DType::i64:
      return "<i8";
    case DType::boolean:
      return "|b1";
    case DType::i8:
      return "|i1";
    case DType::u8:
      return "|u1";
    case DType::f16:
      return "<f2";
    case DType::bf16:
      return "<V2";  // as NumPy with ml_dtypes writes bfloat16
    case DType::i16:
      return "<i2";
    case DType::u16:
      return "<u2";
    case DType::u32:
      return "<u4";
    case DType::u64:
      return "<u8";
    case DType::f8e4m3fn:
    case DType::f8e4m3fnuz:
    case DType::f8e5m2:
    case DType::f8e5m2fnuz:
    case DType::f4e2m1fn:
    case DType::i4:
    case DType::u4:
    case DType::i2:
    case DType::u2:
      // ml_dtypes saves all of them as 1-byte void, '|V1', which does not say which it is.
      return nullptr;
  }
  return nullptr;
}

}  // namespace

std::uint64_t npy_header_size(std::span<const std::byte> prefix, const std::string& op,
                              const std::string& source) {
  if (prefix.size() < npy_magic_bytes + 2 ||
      std::memcmp(prefix.data(), npy_magic, npy_magic_bytes) != 0) {
    if (prefix.size() >= npy_magic_bytes &&
        std::memcmp(prefix.data(), npy_magic, npy_magic_bytes) == 0)
      fail(op, "{}: truncated .npy file ({} bytes)", source, prefix.size());
    if (prefix.empty()) fail(op, "{}: not a .npy file (0 bytes)", source);
    fail(op, "{}: not a .npy file (no \\x93NUMPY magic string)", source);
  }
  const auto major = std::to_integer<int>(prefix[6]);
  const auto minor = std::to_integer<int>(prefix[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(op, "{}: unsupported .npy format version {}.{} (kiln reads 1.0, 2.0 and 3.0)", source,
         major, minor);
  const std::size_t field = major == 1 ? 2 : 4;
  if (prefix.size() < npy_magic_bytes + 2 + field)
    fail(op, "{}: truncated .npy file ({} bytes)", source, prefix.size());
  const std::uint64_t length =
      major == 1 ? load_le16(prefix.data() + 8) : load_le32(prefix.data() + 8);
  if (length > max_npy_header)
    fail(op, "{}: .npy header length {} exceeds the limit of {} bytes", source, length,
         max_npy_header);
  return npy_magic_bytes + 2 + field + length;
}

NpyHeader parse_npy_header(std::span<const std::byte> bytes, const std::string& op,
                           const std::string& source) {
  const std::uint64_t total = npy_header_size(bytes, op, source);
  if (total > bytes.size())
    fail(op, "{}: .npy header of {} bytes runs past the end of the data ({} bytes)", source, total,
         bytes.size());
  const auto major = std::to_integer<int>(bytes[6]);
  const std::size_t start = major == 1 ? 10 : 12;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + start, total - start);
  if (major == 3 && !is_valid_utf8(text))
    fail(op, "{}: .npy 3.0 header is not valid UTF-8", source);
  NpyHeader header = HeaderDictParser(text, op, source).parse();
  header.major_version = major;
  header.header_bytes = total;
  std::string problem;
  const auto stored = parse_descr(header.descr, problem);
  if (!stored) fail(op, "{}: .npy dtype '{}' {}", source, printable(header.descr), problem);
  header.stored = *stored;
  std::uint64_t count = static_cast<std::uint64_t>(header.shape.numel());
  if (__builtin_mul_overflow(count, stored_size(stored->kind), &header.data_bytes))
    fail(op, "{}: .npy shape {} is too large", source, header.shape);
  return header;
}

Tensor read_npy(std::span<const std::byte> file, const std::string& op, const std::string& source) {
  const NpyHeader header = parse_npy_header(file, op, source);
  const std::uint64_t available = file.size() - header.header_bytes;
  if (available != header.data_bytes)
    fail(op, "{}: .npy data is {} bytes, but '{}' {} needs {} bytes{}", source, available,
         printable(header.descr), shape_repr(header.shape), header.data_bytes,
         available < header.data_bytes ? " (truncated file)" : "");
  return decode_tensor(header.stored, header.shape, header.fortran_order,
                       file.subspan(header.header_bytes));
}

TensorInfo npy_tensor_info(const NpyHeader& header, std::string name) {
  TensorInfo info;
  info.name = std::move(name);
  info.dtype = loaded_dtype(header.stored.kind);
  info.stored_dtype = header.descr;
  info.shape = header.shape;
  info.size_bytes = header.data_bytes;
  return info;
}

std::vector<std::byte> encode_npy_header(DType dtype, const Shape& shape, const std::string& op,
                                         const std::string& source) {
  if (descr_of(dtype) == nullptr)
    kiln::detail::fail(op,
                       "{}: .npy has no type for {} (NumPy with ml_dtypes saves every 8-, 4- and "
                       "2-bit type as 1-byte void, which does not say which): kiln::cast it to a "
                       "wider dtype, kiln::bitcast an 8-bit float to u8, or use safetensors",
                       source, dtype_name(dtype));
  const std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                       descr_of(dtype), shape_repr(shape));
  // Version 1.0 has a 2-byte length field; 2.0 (4 bytes) only when the header needs it.
  const auto padded_length = [&](std::size_t prefix) {
    return dict.size() + 1 + (64 - (prefix + dict.size() + 1) % 64) % 64;
  };
  const int major = padded_length(10) > 65535 ? 2 : 1;
  const std::size_t prefix = major == 1 ? 10 : 12;
  const std::size_t length = padded_length(prefix);
  const std::size_t padding = length - dict.size() - 1;
  std::vector<std::byte> out;
  out.reserve(prefix + length);
  for (std::size_t i = 0; i < npy_magic_bytes; ++i)
    out.push_back(static_cast<std::byte>(npy_magic[i]));
  out.push_back(static_cast<std::byte>(major));
  out.push_back(std::byte{0});
  append_le(out, length, major == 1 ? 2 : 4);
  for (char c : dict) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), padding, std::byte{' '});
  out.push_back(std::byte{'\n'});
  return out;
}

}  // namespace detail

Tensor load_npy(const std::filesystem::path& path) {
  const std::string op = "load_npy";
  detail::MappedFile file(path, op);
  return detail::read_npy(file.bytes(), op, path.string());
}

void save_npy(const std::filesystem::path& path, const Tensor& tensor) {
  const std::string op = "save_npy";
  if (!tensor.defined()) kiln::detail::fail(op, "{}: the tensor is undefined", path.string());
  kiln::detail::check_concrete(*tensor.impl(), op.c_str());
  const Tensor data = tensor.contiguous();
  const auto header = detail::encode_npy_header(data.dtype(), data.shape(), op, path.string());
  detail::AtomicFile file(path, op);
  file.write(header);
  file.write(data.data(), static_cast<std::size_t>(data.size()) * dtype_size(data.dtype()));
  file.commit();
}

}  // namespace kiln::io

#include "kiln/format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_impl.hpp"

namespace kiln {

namespace {

// NumPy's defaults: summarize above 1000 elements, keeping 3 entries at each end of every
// axis longer than 6; wrap rows at 75 columns.
constexpr std::int64_t summary_threshold = 1000;
constexpr std::int64_t edge_items = 3;
constexpr std::size_t line_width = 75;
constexpr std::string_view prefix = "tensor(";
constexpr std::string_view ellipsis = "...";

template <class T>
std::string float_text(T value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  const std::string text = fmt::format("{}", value);
  if (text.find('.') != std::string::npos) return text;
  // Integral values keep a decimal point, before the exponent if there is one: "1.", "1.e+20".
  const std::string_view digits(text);
  const std::size_t point = std::min(digits.find('e'), digits.size());
  return fmt::format("{}.{}", digits.substr(0, point), digits.substr(point));
}

/// The shortest decimal text that reads back as the same 16-bit float (as numpy prints them).
/// The 8- and 4-bit floats print their exact value instead, as ml_dtypes does: the shortest
/// text of a 3-bit mantissa would show 448 as "450.".
template <class Half>
std::string half_text(Half value) {
  const auto f = static_cast<float>(value);
  if (std::isnan(f) || std::isinf(f)) return float_text(f);
  for (int digits = 1; digits < 9; ++digits) {
    const std::string text = fmt::format("{:.{}g}", f, digits);
    if (Half(std::stof(text)).bits == value.bits) return float_text(std::stof(text));
  }
  return float_text(f);
}

std::string element_text(const char* element, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return float_text(*reinterpret_cast<const float*>(element));
    case DType::f64:
      return float_text(*reinterpret_cast<const double*>(element));
    case DType::i32:
      return fmt::format("{}", *reinterpret_cast<const std::int32_t*>(element));
    case DType::i64:
      return fmt::format("{}", *reinterpret_cast<const std::int64_t*>(element));
    case DType::boolean:
      return *reinterpret_cast<const std::uint8_t*>(element) != 0 ? "true" : "false";
    case DType::i8:
      return fmt::format("{}", static_cast<int>(*reinterpret_cast<const std::int8_t*>(element)));
    case DType::u8:
      return fmt::format("{}", static_cast<int>(*reinterpret_cast<const std::uint8_t*>(element)));
    case DType::f16:
      return half_text(*reinterpret_cast<const float16*>(element));
    case DType::bf16:
      return half_text(*reinterpret_cast<const bfloat16*>(element));
    case DType::i16:
      return fmt::format("{}", *reinterpret_cast<const std::int16_t*>(element));
    case DType::u16:
      return fmt::format("{}", *reinterpret_cast<const std::uint16_t*>(element));
    case DType::u32:
      return fmt::format("{}", *reinterpret_cast<const std::uint32_t*>(element));
    case DType::u64:
      return fmt::format("{}", *reinterpret_cast<const std::uint64_t*>(element));
    case DType::f8e4m3fn:
      return float_text(static_cast<float>(*reinterpret_cast<const float8_e4m3fn*>(element)));
    case DType::f8e4m3fnuz:
      return float_text(static_cast<float>(*reinterpret_cast<const float8_e4m3fnuz*>(element)));
    case DType::f8e5m2:
      return float_text(static_cast<float>(*reinterpret_cast<const float8_e5m2*>(element)));
    case DType::f8e5m2fnuz:
      return float_text(static_cast<float>(*reinterpret_cast<const float8_e5m2fnuz*>(element)));
    case DType::f4e2m1fn:
      return float_text(static_cast<float>(*reinterpret_cast<const float4_e2m1fn*>(element)));
    case DType::i4:
    case DType::i2:
      return fmt::format("{}", static_cast<int>(*reinterpret_cast<const std::int8_t*>(element)));
    case DType::u4:
    case DType::u2:
      return fmt::format("{}", static_cast<int>(*reinterpret_cast<const std::uint8_t*>(element)));
  }
  return "?";
}

void rstrip(std::string& text) {
  while (!text.empty() && text.back() == ' ') text.pop_back();
}

// Lays out a nonempty tensor of rank >= 1 like numpy's _formatArray: elements
// right-aligned to one width, rows wrapped, nested blocks separated by newlines.
class TensorLayout {
 public:
  explicit TensorLayout(const detail::TensorImpl& impl)
      : impl_(impl),
        base_(impl.data()),
        item_bytes_(static_cast<std::int64_t>(dtype_size(impl.dtype))),
        summarize_(impl.shape.numel() > summary_threshold) {
    collect_texts(0, 0);
    for (const auto& text : texts_) width_ = std::max(width_, text.size());
  }

  std::string text() {
    const std::string hanging_indent(prefix.size() + 1, ' ');
    // The text after the data starts with ",", which the last line must leave room for.
    return block(0, 0, hanging_indent, line_width - 1);
  }

 private:
  bool elided(std::size_t axis) const { return summarize_ && impl_.shape[axis] > 2 * edge_items; }

  // Indices shown along `axis`, in order; -1 marks the "..." between the two ends.
  std::vector<std::int64_t> shown_indices(std::size_t axis) const {
    const std::int64_t length = impl_.shape[axis];
    std::vector<std::int64_t> indices;
    if (!elided(axis)) {
      for (std::int64_t i = 0; i < length; ++i) indices.push_back(i);
      return indices;
    }
    for (std::int64_t i = 0; i < edge_items; ++i) indices.push_back(i);
    indices.push_back(-1);
    for (std::int64_t i = length - edge_items; i < length; ++i) indices.push_back(i);
    return indices;
  }

  void collect_texts(std::size_t axis, std::int64_t offset) {
    if (axis == impl_.shape.size()) {
      texts_.push_back(element_text(base_ + offset * item_bytes_, impl_.dtype));
      return;
    }
    for (auto index : shown_indices(axis))
      if (index >= 0) collect_texts(axis + 1, offset + index * impl_.strides[axis]);
  }

  std::string next_word() {
    const std::string& text = texts_[next_text_++];
    return std::string(width_ - text.size(), ' ') + text;
  }

  // Appends word to line, first moving line into out when word would pass `width`.
  static void extend_line(std::string& out, std::string& line, const std::string& word,
                          std::size_t width, const std::string& hanging_indent) {
    if (line.size() + word.size() > width && line.size() > hanging_indent.size()) {
      rstrip(line);
      out += line + "\n";
      line = hanging_indent;
    }
    line += word;
  }

  std::string block(std::size_t axis, std::int64_t offset, const std::string& hanging_indent,
                    std::size_t width) {
    if (axis == impl_.shape.size()) return next_word();
    const std::string nested_indent = hanging_indent + " ";
    const std::size_t nested_width = width - 1;
    const auto indices = shown_indices(axis);
    const bool innermost = axis + 1 == impl_.shape.size();
    std::string separator = ",";
    separator.append(innermost ? std::string(" ")
                               : std::string(impl_.shape.size() - axis - 1, '\n'));
    std::string out;
    std::string line = hanging_indent;
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::string word = indices[k] < 0
                                   ? std::string(ellipsis)
                                   : block(axis + 1, offset + indices[k] * impl_.strides[axis],
                                           nested_indent, nested_width);
      const bool last = k + 1 == indices.size();
      if (innermost) {
        extend_line(out, line, word, width - 1, hanging_indent);
        if (!last) line += separator;
      } else {
        out += hanging_indent + word + (last ? "" : separator);
      }
    }
    if (innermost) out += line;
    return fmt::format("[{}]", std::string_view(out).substr(hanging_indent.size()));
  }

  const detail::TensorImpl& impl_;
  const char* base_;
  std::int64_t item_bytes_;
  bool summarize_;
  std::vector<std::string> texts_;
  std::size_t width_ = 0;
  std::size_t next_text_ = 0;
};

}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  const detail::TensorImpl& impl = *t.impl();
  if (impl.is_slices()) {
    const detail::RowSlices& parts = *impl.slices;
    return fmt::format("IndexedSlices(indices={}, values={}, dense_shape={})",
                       to_string(parts.indices), to_string(parts.values), impl.shape.to_string());
  }
  if (impl.is_symbolic())
    return fmt::format("tensor(symbolic, dtype={}, shape={})", dtype_name(impl.dtype),
                       impl.shape.to_string());
  std::string data;
  if (impl.shape.empty()) {
    data = element_text(impl.data(), impl.dtype);
  } else if (impl.shape.numel() == 0) {
    data = "[]";
  } else {
    data = TensorLayout(impl).text();
  }
  return fmt::format("{}{}, dtype={}, shape={})", prefix, data, dtype_name(impl.dtype),
                     impl.shape.to_string());
}

}  // namespace kiln

#include "io/safetensors.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"

namespace kiln::io {

namespace detail {

namespace {

using kiln::detail::fail;

/// One safetensors dtype. `rank` is its position in the reference implementation's Dtype
/// enum, which orders dtypes by alignment; writers sort tensors by descending rank.
struct SafetensorsDType {
  const char* name;
  unsigned bits;
  int rank;
  std::optional<StoredKind> kind;
};

constexpr SafetensorsDType safetensors_dtypes[] = {
    {"BOOL", 8, 0, StoredKind::boolean},   {"F4", 4, 1, std::nullopt},
    {"F6_E2M3", 6, 2, std::nullopt},       {"F6_E3M2", 6, 3, std::nullopt},
    {"U8", 8, 4, StoredKind::u8},          {"I8", 8, 5, StoredKind::i8},
    {"F8_E5M2", 8, 6, StoredKind::f8e5m2}, {"F8_E4M3", 8, 7, StoredKind::f8e4m3fn},
    {"F8_E8M0", 8, 8, std::nullopt},       {"I16", 16, 9, StoredKind::i16},
    {"U16", 16, 10, StoredKind::u16},      {"F16", 16, 11, StoredKind::f16},
    {"BF16", 16, 12, StoredKind::bf16},    {"I32", 32, 13, StoredKind::i32},
    {"U32", 32, 14, StoredKind::u32},      {"F32", 32, 15, StoredKind::f32},
    {"C64", 64, 16, std::nullopt},         {"F64", 64, 17, StoredKind::f64},
    {"I64", 64, 18, StoredKind::i64},      {"U64", 64, 19, StoredKind::u64},
};

const SafetensorsDType* find_dtype(std::string_view name) {
  for (const auto& d : safetensors_dtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const SafetensorsDType& dtype_entry(DType dtype, const std::string& op, const std::string& source,
                                    const std::string& name) {
  const std::optional<StoredKind> kind = stored_kind_of(dtype);
  for (const auto& d : safetensors_dtypes)
    if (kind && d.kind == kind) return d;
  kiln::detail::fail(op,
                     "{}: tensor '{}' is {}, which safetensors has no dtype for (it has F8_E4M3 "
                     "and F8_E5M2 of the 8-bit floats, and no 4- or 2-bit integers): kiln::cast "
                     "it to a wider dtype",
                     source, printable(name), dtype_name(dtype));
}

std::string describe_dims(const nlohmann::json& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(shape[i].get<std::uint64_t>());
  }
  out += ']';
  return out;
}

/// Validates one tensor entry of the header and appends it to `header`.
void add_tensor_entry(SafetensorsHeader& header, const std::string& name,
                      const nlohmann::json& entry, const std::string& op,
                      const std::string& source) {
  const std::string shown = printable(name);
  if (!entry.is_object())
    fail(op, "{}: header entry '{}' is not an object with dtype, shape and data_offsets", source,
         shown);
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || shape_it == entry.end() || offsets_it == entry.end())
    fail(op, "{}: tensor '{}' needs the fields dtype, shape and data_offsets", source, shown);
  if (!dtype_it->is_string()) fail(op, "{}: tensor '{}' has a non-string dtype", source, shown);
  const auto& dtype_name = dtype_it->get_ref<const std::string&>();
  const SafetensorsDType* dtype = find_dtype(dtype_name);
  if (dtype == nullptr)
    fail(op, "{}: tensor '{}' has unknown dtype '{}'", source, shown, printable(dtype_name));

  if (!shape_it->is_array())
    fail(op, "{}: tensor '{}' has a shape that is not a list of integers", source, shown);
  std::vector<std::uint64_t> dims;
  for (const auto& d : *shape_it) {
    if (!d.is_number_unsigned())
      fail(op, "{}: tensor '{}' has shape {} with a dimension that is not a non-negative integer",
           source, shown, excerpt(*shape_it));
    dims.push_back(d.get<std::uint64_t>());
    if (dims.size() > Shape::max_rank)
      fail(op, "{}: tensor '{}' has rank {}, more than kiln's maximum rank {}", source, shown,
           shape_it->size(), Shape::max_rank);
  }
  CheckedShape checked = check_shape(dims, 1);
  std::uint64_t size = 0;
  if (checked.error.empty()) {
    // Sizes of sub-byte dtypes (F4, F6) are counted in bits and must fill whole bytes.
    const bool whole_bytes = dtype->bits % 8 == 0;
    std::uint64_t total = 0;
    if (__builtin_mul_overflow(checked.bytes, whole_bytes ? dtype->bits / 8 : dtype->bits, &total))
      checked.error = "the byte size overflows 64 bits";
    else if (!whole_bytes && total % 8 != 0)
      checked.error = fmt::format("{} values of {} do not fill a whole number of bytes",
                                  checked.bytes, dtype_name);
    size = whole_bytes ? total : total / 8;
  }
  if (!checked.error.empty())
    fail(op, "{}: tensor '{}' has shape {}: {}", source, shown, describe_dims(*shape_it),
         checked.error);

  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
    fail(op, "{}: tensor '{}' has data_offsets {}, expected [begin, end] non-negative integers",
         source, shown, excerpt(*offsets_it));
  SafetensorsLocation location;
  location.begin = (*offsets_it)[0].get<std::uint64_t>();
  location.end = (*offsets_it)[1].get<std::uint64_t>();
  if (location.end < location.begin)
    fail(op, "{}: tensor '{}' has data_offsets [{},{}] that end before they begin", source, shown,
         location.begin, location.end);
  if (location.end - location.begin != size)
    fail(op, "{}: tensor '{}' has data_offsets [{},{}] ({} bytes) but {} {} needs {} bytes", source,
         shown, location.begin, location.end, location.end - location.begin, dtype_name,
         describe_dims(*shape_it), size);
  if (dtype->kind) location.stored = StoredType{*dtype->kind, false};

  TensorInfo info;
  info.name = name;
  if (dtype->kind) info.dtype = loaded_dtype(*dtype->kind);
  info.stored_dtype = dtype_name;
  info.shape = checked.shape;
  info.size_bytes = size;
  header.tensors.push_back(std::move(info));
  header.locations.push_back(location);
}

void read_metadata(SafetensorsHeader& header, const nlohmann::json& value, const std::string& op,
                   const std::string& source) {
  if (value.is_null()) return;
  if (!value.is_object()) fail(op, "{}: __metadata__ is not an object", source);
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail(op, "{}: __metadata__ value of '{}' is not a string ({})", source, printable(key),
           v.type_name());
    header.metadata[key] = v.get<std::string>();
  }
}

/// Orders the tensors by data offset and checks that they tile the data section exactly.
void check_layout(SafetensorsHeader& header, std::uint64_t data_bytes, const std::string& op,
                  const std::string& source) {
  const std::size_t n = header.tensors.size();
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& la = header.locations[a];
    const auto& lb = header.locations[b];
    return la.begin != lb.begin ? la.begin < lb.begin : la.end < lb.end;
  });
  std::uint64_t position = 0;
  std::string previous;
  for (std::size_t i : order) {
    const auto& location = header.locations[i];
    const std::string name = printable(header.tensors[i].name);
    if (location.end > data_bytes)
      fail(op,
           "{}: tensor '{}' has data_offsets [{},{}] past the end of the data ({} bytes): the file "
           "is truncated or the offsets are wrong",
           source, name, location.begin, location.end, data_bytes);
    if (location.begin < position)
      fail(op, "{}: tensor '{}' (data_offsets [{},{}]) overlaps tensor '{}', which ends at {}",
           source, name, location.begin, location.end, previous, position);
    if (location.begin > position)
      fail(op, "{}: tensor '{}' starts at {}, leaving a gap after byte {} of the data", source,
           name, location.begin, position);
    position = location.end;
    previous = name;
  }
  if (position != data_bytes)
    fail(op, "{}: the tensors cover {} bytes of data, but the file holds {} bytes after the header",
         source, position, data_bytes);

  SafetensorsHeader sorted;
  sorted.metadata = std::move(header.metadata);
  sorted.data_start = header.data_start;
  for (std::size_t i : order) {
    sorted.index.emplace(header.tensors[i].name, sorted.tensors.size());
    sorted.tensors.push_back(std::move(header.tensors[i]));
    sorted.locations.push_back(header.locations[i]);
  }
  header = std::move(sorted);
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& op,
                                    const std::string& source) {
  if (file.size() < 8)
    fail(op, "{}: file has {} bytes, too few for a safetensors header length (8 bytes)", source,
         file.size());
  const std::uint64_t length = load_le64(file.data());
  if (length > max_safetensors_header)
    fail(op, "{}: header length {} exceeds the limit of {} bytes (not a safetensors file?)", source,
         length, max_safetensors_header);
  if (length > file.size() - 8)
    fail(op, "{}: header length {} runs past the end of the file ({} bytes)", source, length,
         file.size());
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), length);
  if (text.empty() || text.front() != '{')
    fail(op, "{}: header does not start with '{{' (not a safetensors file?)", source);
  const nlohmann::json json =
      parse_json_strictly(text, max_safetensors_nesting, op, source, "header");
  if (!json.is_object()) fail(op, "{}: header is not a JSON object", source);

  SafetensorsHeader header;
  header.data_start = 8 + length;
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__")
      read_metadata(header, value, op, source);
    else
      add_tensor_entry(header, key, value, op, source);
  }
  check_layout(header, file.size() - header.data_start, op, source);
  return header;
}

Tensor read_safetensors_tensor(const SafetensorsHeader& header, std::size_t i,
                               std::span<const std::byte> file, const std::string& op,
                               const std::string& source) {
  const auto& info = header.tensors[i];
  const auto& location = header.locations[i];
  if (!location.stored)
    fail(op,
         "{}: tensor '{}' has dtype {}, which kiln cannot load (it reads F32, F64, I32, I64, BOOL, "
         "and F16/BF16 as f32)",
         source, printable(info.name), info.stored_dtype);
  const auto raw = file.subspan(header.data_start + location.begin, info.size_bytes);
  return decode_tensor(*location.stored, info.shape, false, raw);
}

std::map<std::string, Tensor> read_safetensors(std::span<const std::byte> file,
                                               const std::string& op, const std::string& source) {
  const SafetensorsHeader header = parse_safetensors(file, op, source);
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < header.tensors.size(); ++i)
    if (header.locations[i].stored)
      out.emplace(header.tensors[i].name, read_safetensors_tensor(header, i, file, op, source));
  return out;
}

std::map<std::string, Tensor> read_selected(const MappedFile& file, const SafetensorsHeader& header,
                                            const std::vector<std::size_t>& selected,
                                            const std::string& op, const std::string& source) {
  for (std::size_t i : selected)
    if (!header.locations[i].stored)
      fail(op,
           "{}: tensor '{}' has dtype {}, which kiln cannot load (it reads F32, F64, I32, I64, "
           "BOOL, and F16/BF16 as f32)",
           source, printable(header.tensors[i].name), header.tensors[i].stored_dtype);
  std::map<std::string, Tensor> out;
  for (std::size_t i : selected) {
    const auto& location = header.locations[i];
    file.will_need(header.data_start + location.begin, location.end - location.begin);
    out.emplace(header.tensors[i].name,
                read_safetensors_tensor(header, i, file.bytes(), op, source));
  }
  return out;
}

}  // namespace detail

// ------------------------------------------------------------------------- SafetensorsFile

struct SafetensorsFile::State {
  State(const std::filesystem::path& p, const std::string& op)
      : file(p, op), header(detail::parse_safetensors(file.bytes(), op, p.string())) {}
  detail::MappedFile file;
  detail::SafetensorsHeader header;
};

namespace {
const std::string load_op = "load_safetensors";

std::size_t checked_index(const detail::SafetensorsHeader& header, const std::string& name,
                          const std::filesystem::path& path) {
  const auto it = header.index.find(name);
  if (it == header.index.end())
    kiln::detail::fail(load_op, "{}: no tensor named '{}' (the file has {} tensors)", path.string(),
                       detail::printable(name), header.tensors.size());
  return it->second;
}
}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : state_(std::make_unique<State>(path, load_op)) {}
SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

const std::filesystem::path& SafetensorsFile::path() const { return state_->file.path(); }
const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return state_->header.tensors; }
const Metadata& SafetensorsFile::metadata() const { return state_->header.metadata; }
bool SafetensorsFile::contains(const std::string& name) const {
  return state_->header.index.count(name) != 0;
}
const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  return state_->header.tensors[checked_index(state_->header, name, path())];
}

Tensor SafetensorsFile::load(const std::string& name) const {
  return load(std::vector<std::string>{name}).begin()->second;
}

std::map<std::string, Tensor> SafetensorsFile::load(const std::vector<std::string>& names) const {
  const auto& header = state_->header;
  std::vector<std::string> missing;
  std::vector<std::size_t> selected;
  for (const auto& name : names) {
    const auto it = header.index.find(name);
    if (it == header.index.end())
      missing.push_back(fmt::format("'{}'", detail::printable(name)));
    else
      selected.push_back(it->second);
  }
  if (!missing.empty())
    kiln::detail::fail(load_op, "{}: no tensor named {} (the file has {} tensors)", path().string(),
                       fmt::join(missing, ", "), header.tensors.size());
  return detail::read_selected(state_->file, header, selected, load_op, path().string());
}

std::map<std::string, Tensor> SafetensorsFile::load_all() const {
  std::vector<std::string> names;
  for (const auto& info : state_->header.tensors) names.push_back(info.name);
  return load(names);
}

// ------------------------------------------------------------------------- free functions

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path) {
  return SafetensorsFile(path).load_all();
}

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path,
                                               const std::vector<std::string>& names) {
  return SafetensorsFile(path).load(names);
}

Metadata load_safetensors_metadata(const std::filesystem::path& path) {
  const std::string op = "load_safetensors_metadata";
  // Only the header is read: map the file whatever its size.
  detail::MappedFile file(path, op, 0);
  return detail::parse_safetensors(file.bytes(), op, path.string()).metadata;
}

void save_safetensors(const std::filesystem::path& path,
                      const std::map<std::string, Tensor>& tensors, const Metadata& metadata) {
  const std::string op = "save_safetensors";
  const std::string source = path.string();
  for (const auto& [key, value] : metadata)
    if (!detail::is_valid_utf8(key) || !detail::is_valid_utf8(value))
      kiln::detail::fail(op, "{}: metadata entries must be valid UTF-8", source);

  struct Item {
    const std::string* name;
    Tensor tensor;
    const detail::SafetensorsDType* dtype;
  };
  std::vector<Item> items;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__")
      kiln::detail::fail(op, "{}: '{}' cannot be a tensor name", source, detail::printable(name));
    if (!detail::is_valid_utf8(name))
      kiln::detail::fail(op, "{}: tensor name is not valid UTF-8", source);
    if (!tensor.defined())
      kiln::detail::fail(op, "{}: tensor '{}' is undefined", source, detail::printable(name));
    kiln::detail::check_concrete(*tensor.impl(), op.c_str());
    items.push_back(
        {&name, tensor.contiguous(), &detail::dtype_entry(tensor.dtype(), op, source, name)});
  }
  // The reference layout: descending dtype alignment, then name.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.dtype->rank != b.dtype->rank) return a.dtype->rank > b.dtype->rank;
    return *a.name < *b.name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& item : items) {
    const auto bytes =
        static_cast<std::uint64_t>(item.tensor.size()) * dtype_size(item.tensor.dtype());
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = item.dtype->name;
    entry["shape"] = item.tensor.shape().to_vector();
    entry["data_offsets"] = {offset, offset + bytes};
    header[*item.name] = std::move(entry);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  detail::AtomicFile file(path, op);
  std::vector<std::byte> length;
  detail::append_le(length, text.size(), 8);
  file.write(length);
  file.write(text.data(), text.size());
  for (const auto& item : items)
    file.write(item.tensor.data(),
               static_cast<std::size_t>(item.tensor.size()) * dtype_size(item.tensor.dtype()));
  file.commit();
}

}  // namespace kiln::io

#include "io/npz.hpp"

#include <zip.h>

#include <cstring>
#include <memory>
#include <set>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "io/atomic_file.hpp"
#include "io/mapped_file.hpp"
#include "io/npy.hpp"
#include "io/zip_layout.hpp"

namespace kiln::io {

namespace detail {

namespace {

using kiln::detail::fail;

struct ArchiveCloser {
  void operator()(zip_t* archive) const { zip_discard(archive); }
};
struct MemberCloser {
  void operator()(zip_file_t* member) const { zip_fclose(member); }
};
struct SourceCloser {
  void operator()(zip_source_t* source) const { zip_source_free(source); }
};
using Archive = std::unique_ptr<zip_t, ArchiveCloser>;
using MemberFile = std::unique_ptr<zip_file_t, MemberCloser>;
using Source = std::unique_ptr<zip_source_t, SourceCloser>;

/// libzip's message for `error`, which is then released.
std::string take_message(zip_error_t& error) {
  std::string message = zip_error_strerror(&error);
  zip_error_fini(&error);
  return message;
}

constexpr std::string_view npy_suffix = ".npy";
// Deflate cannot expand data by more than about 1032:1; a member that claims more is hostile.
constexpr std::uint64_t max_deflate_ratio = 1032;

/// One array member of an archive, validated from the central directory.
struct Member {
  zip_uint64_t index = 0;
  std::string member_name;  // "w.npy"
  std::string name;         // "w"
  std::uint64_t size = 0;   // uncompressed
};

std::string member_source(const std::string& source, const std::string& member_name) {
  return fmt::format("{} (member '{}')", source, printable(member_name));
}

Archive open_archive(std::span<const std::byte> file, const std::string& op,
                     const std::string& source) {
  // Defects libzip would not name (or not see) get their own message first; the file is
  // then at least an end-of-central-directory record, so never empty.
  check_zip_layout(file, op, source);
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(file.data(), file.size(), 0, &error);
  if (buffer == nullptr) fail(op, "{}: {}", source, take_message(error));
  zip_t* archive = zip_open_from_source(buffer, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (archive == nullptr) {
    zip_source_free(buffer);
    if (zip_error_code_zip(&error) == ZIP_ER_EXISTS) {
      zip_error_fini(&error);
      fail(op, "{}: the archive has two members with the same name", source);
    }
    fail(op, "{}: not a valid .npz (zip) archive: {}", source, take_message(error));
  }
  zip_error_fini(&error);
  return Archive(archive);
}

std::vector<Member> list_members(zip_t* archive, std::uint64_t file_size, const std::string& op,
                                 const std::string& source) {
  const zip_int64_t count = zip_get_num_entries(archive, 0);
  if (count < 0) fail(op, "{}: cannot list the archive: {}", source, zip_strerror(archive));
  std::vector<Member> members;
  std::set<std::string> names;
  std::uint64_t compressed_total = 0;
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(i), 0, &st) != 0)
      fail(op, "{}: cannot read archive entry {}: {}", source, i, zip_strerror(archive));
    constexpr zip_uint64_t needed = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE |
                                    ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
    if ((st.valid & needed) != needed)
      fail(op, "{}: archive entry {} lacks its name, sizes or methods", source, i);
    Member member;
    member.index = static_cast<zip_uint64_t>(i);
    member.member_name = st.name;
    member.size = st.size;
    const std::string m = printable(member.member_name);
    if (!is_safe_member_name(member.member_name))
      fail(op, "{}: unsafe member name '{}' (absolute path, '..', '\\' or empty part)", source, m);
    const auto& raw = member.member_name;
    if (raw.size() <= npy_suffix.size() || !raw.ends_with(npy_suffix))
      fail(op, "{}: member '{}' is not a .npy file", source, m);
    member.name = raw.substr(0, raw.size() - npy_suffix.size());
    if (!names.insert(member.name).second)
      fail(op, "{}: the archive has two members named '{}'", source, m);
    if (st.encryption_method != ZIP_EM_NONE) fail(op, "{}: member '{}' is encrypted", source, m);
    if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
      fail(op,
           "{}: member '{}' uses compression method {} (kiln reads stored and deflated members)",
           source, m, st.comp_method);
    if (st.comp_size > file_size)
      fail(op, "{}: member '{}' claims {} compressed bytes, more than the archive's {}", source, m,
           st.comp_size, file_size);
    std::uint64_t limit = st.comp_size;
    if (st.comp_method == ZIP_CM_DEFLATE &&
        (__builtin_mul_overflow(st.comp_size, max_deflate_ratio, &limit) ||
         __builtin_add_overflow(limit, std::uint64_t{1024}, &limit)))
      limit = ~std::uint64_t{0};
    if (st.comp_method == ZIP_CM_STORE ? st.size != st.comp_size : st.size > limit)
      fail(op, "{}: member '{}' claims {} bytes from {} stored bytes, which its method cannot do",
           source, m, st.size, st.comp_size);
    // Members whose data overlaps (a known zip bomb) would claim more bytes than the archive
    // holds; without overlap, all the decompressed data is bounded by the deflate ratio.
    compressed_total += st.comp_size;
    if (compressed_total > file_size)
      fail(op,
           "{}: the members' compressed data adds up to more than the archive's {} bytes "
           "(overlapping members)",
           source, file_size);
    members.push_back(std::move(member));
  }
  return members;
}

/// Reads exactly `bytes` bytes of an open member, failing on a short read or a libzip error.
void read_exact(zip_file_t* file, void* out, std::uint64_t bytes, const std::string& op,
                const std::string& source) {
  auto* p = static_cast<std::byte*>(out);
  while (bytes > 0) {
    const std::uint64_t chunk = std::min<std::uint64_t>(bytes, std::uint64_t{1} << 30);
    const zip_int64_t n = zip_fread(file, p, chunk);
    if (n < 0) fail(op, "{}: cannot read the member: {}", source, zip_file_strerror(file));
    if (n == 0) fail(op, "{}: the member ends early (truncated or corrupt)", source);
    p += n;
    bytes -= static_cast<std::uint64_t>(n);
  }
}

/// Reads to the end of the member, which is where libzip verifies the CRC.
void check_end(zip_file_t* file, const std::string& op, const std::string& source) {
  std::byte extra;
  const zip_int64_t n = zip_fread(file, &extra, 1);
  if (n < 0) fail(op, "{}: the member is corrupt: {}", source, zip_file_strerror(file));
  if (n > 0) fail(op, "{}: the member has more data than its .npy header declares", source);
}

/// Opens a member and parses its .npy header; the member is left positioned at the data.
std::pair<MemberFile, NpyHeader> open_member(zip_t* archive, const Member& member,
                                             const std::string& op, const std::string& source) {
  MemberFile file(zip_fopen_index(archive, member.index, 0));
  if (!file) fail(op, "{}: cannot open the member: {}", source, zip_strerror(archive));
  // Magic and version first: they say how wide the length field is (2 or 4 bytes), so that
  // nothing past the header is read here.
  std::vector<std::byte> header(std::min<std::uint64_t>(8, member.size));
  read_exact(file.get(), header.data(), header.size(), op, source);
  if (header.size() == 8) {
    const std::uint64_t field = std::to_integer<int>(header[6]) == 1 ? 2 : 4;
    header.resize(8 + std::min<std::uint64_t>(field, member.size - 8));
    read_exact(file.get(), header.data() + 8, header.size() - 8, op, source);
  }
  const std::uint64_t header_size = npy_header_size(header, op, source);
  if (header_size < header.size()) fail(op, "{}: .npy header length field is inconsistent", source);
  if (header_size > member.size)
    fail(op, "{}: .npy header of {} bytes is longer than the member ({} bytes)", source,
         header_size, member.size);
  const std::size_t prefix = header.size();
  header.resize(header_size);
  read_exact(file.get(), header.data() + prefix, header_size - prefix, op, source);
  NpyHeader parsed = parse_npy_header(header, op, source);
  if (parsed.header_bytes + parsed.data_bytes != member.size)
    fail(op, "{}: the member has {} bytes of data, but '{}' {} needs {}", source,
         member.size - parsed.header_bytes, printable(parsed.descr), parsed.shape,
         parsed.data_bytes);
  return {std::move(file), std::move(parsed)};
}

Tensor read_member(zip_t* archive, const Member& member, const std::string& op,
                   const std::string& source) {
  auto [file, header] = open_member(archive, member, op, source);
  const DType dtype = loaded_dtype(header.stored.kind);
  Tensor result;
  if (stored_size(header.stored.kind) == dtype_size(dtype)) {
    // Read straight into the tensor's buffer, then decode in place.
    Tensor raw = kiln::detail::empty(layout_shape(header.shape, header.fortran_order), dtype);
    read_exact(file.get(), raw.impl()->data(), header.data_bytes, op, source);
    check_end(file.get(), op, source);
    result = finish_tensor_in_place(raw, header.stored, header.fortran_order);
  } else {
    std::vector<std::byte> raw(header.data_bytes);
    read_exact(file.get(), raw.data(), raw.size(), op, source);
    check_end(file.get(), op, source);
    result = decode_tensor(header.stored, header.shape, header.fortran_order, raw);
  }
  return result;
}

}  // namespace

bool is_safe_member_name(std::string_view name) {
  if (name.empty() || name.front() == '/') return false;
  if (name.find('\\') != std::string_view::npos || name.find('\0') != std::string_view::npos)
    return false;
  if (name.size() >= 2 && name[1] == ':') return false;  // "C:..."
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::map<std::string, Tensor> read_npz(std::span<const std::byte> file,
                                       const std::vector<std::string>* names, const std::string& op,
                                       const std::string& source) {
  Archive archive = open_archive(file, op, source);
  const std::vector<Member> members = list_members(archive.get(), file.size(), op, source);
  std::vector<const Member*> selected;
  if (names == nullptr) {
    for (const auto& m : members) selected.push_back(&m);
  } else {
    std::vector<std::string> missing;
    for (const auto& name : *names) {
      const Member* found = nullptr;
      for (const auto& m : members)
        if (m.name == name) found = &m;
      if (found == nullptr)
        missing.push_back(fmt::format("'{}'", printable(name)));
      else
        selected.push_back(found);
    }
    if (!missing.empty())
      fail(op, "{}: no array named {} (the archive has {} arrays)", source,
           fmt::join(missing, ", "), members.size());
  }
  std::map<std::string, Tensor> out;
  for (const Member* m : selected)
    out.emplace(m->name, read_member(archive.get(), *m, op, member_source(source, m->member_name)));
  return out;
}

std::vector<TensorInfo> inspect_npz(std::span<const std::byte> file, const std::string& op,
                                    const std::string& source) {
  Archive archive = open_archive(file, op, source);
  std::vector<TensorInfo> out;
  for (const auto& m : list_members(archive.get(), file.size(), op, source)) {
    auto parsed = open_member(archive.get(), m, op, member_source(source, m.member_name));
    out.push_back(npy_tensor_info(parsed.second, m.name));
  }
  return out;
}

}  // namespace detail

std::map<std::string, Tensor> load_npz(const std::filesystem::path& path) {
  const std::string op = "load_npz";
  detail::MappedFile file(path, op);
  return detail::read_npz(file.bytes(), nullptr, op, path.string());
}

std::map<std::string, Tensor> load_npz(const std::filesystem::path& path,
                                       const std::vector<std::string>& names) {
  const std::string op = "load_npz";
  detail::MappedFile file(path, op);
  return detail::read_npz(file.bytes(), &names, op, path.string());
}

void save_npz(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
              bool compressed) {
  using kiln::detail::fail;
  const std::string op = "save_npz";
  const std::string source = path.string();
  struct Entry {
    std::string member_name;
    Tensor data;
    std::vector<std::byte> header;
  };
  std::vector<Entry> entries;
  for (const auto& [name, tensor] : tensors) {
    if (!detail::is_safe_member_name(name))
      fail(op, "{}: '{}' cannot be an archive member name (empty, absolute, '.', '..' or '\\')",
           source, detail::printable(name));
    if (!tensor.defined())
      fail(op, "{}: tensor '{}' is undefined", source, detail::printable(name));
    kiln::detail::check_concrete(*tensor.impl(), op.c_str());
    Tensor data = tensor.contiguous();
    entries.push_back({name + ".npy", data,
                       detail::encode_npy_header(data.dtype(), data.shape(), op,
                                                 source + ": '" + detail::printable(name) + "'")});
  }

  if (entries.empty()) {
    // libzip writes nothing for an empty archive; NumPy writes the end-of-directory record.
    std::vector<std::byte> empty_archive(22, std::byte{0});
    const char signature[] = "PK\x05\x06";
    std::memcpy(empty_archive.data(), signature, 4);
    detail::write_file_atomically(path, op, empty_archive);
    return;
  }

  // The archive is built in memory (the members' data is referenced, not copied), then
  // written atomically.
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* raw_buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (raw_buffer == nullptr) fail(op, "{}: {}", source, detail::take_message(error));
  zip_t* raw_archive = zip_open_from_source(raw_buffer, ZIP_TRUNCATE, &error);
  if (raw_archive == nullptr) {
    zip_source_free(raw_buffer);
    fail(op, "{}: cannot create the archive: {}", source, detail::take_message(error));
  }
  zip_error_fini(&error);
  zip_source_keep(raw_buffer);  // one reference for us, one for the archive
  detail::Source buffer(raw_buffer);
  detail::Archive archive(raw_archive);

  for (const auto& entry : entries) {
    std::vector<zip_buffer_fragment_t> fragments;
    fragments.push_back(
        {reinterpret_cast<zip_uint8_t*>(const_cast<std::byte*>(entry.header.data())),
         entry.header.size()});
    const auto bytes =
        static_cast<zip_uint64_t>(entry.data.size()) * dtype_size(entry.data.dtype());
    if (bytes > 0)
      fragments.push_back({static_cast<zip_uint8_t*>(const_cast<void*>(entry.data.data())), bytes});
    zip_error_init(&error);
    zip_source_t* member =
        zip_source_buffer_fragment_create(fragments.data(), fragments.size(), 0, &error);
    if (member == nullptr) fail(op, "{}: {}", source, detail::take_message(error));
    zip_error_fini(&error);
    const zip_int64_t index =
        zip_file_add(archive.get(), entry.member_name.c_str(), member, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(member);
      fail(op, "{}: cannot add '{}': {}", source, detail::printable(entry.member_name),
           zip_strerror(archive.get()));
    }
    const auto i = static_cast<zip_uint64_t>(index);
    // A fixed time stamp (1980-01-02) makes equal inputs give equal archives.
    if (zip_set_file_compression(archive.get(), i, compressed ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) !=
            0 ||
        zip_file_set_mtime(archive.get(), i, 315619200, 0) != 0)
      fail(op, "{}: cannot set up '{}': {}", source, detail::printable(entry.member_name),
           zip_strerror(archive.get()));
  }
  if (zip_close(archive.get()) != 0)
    fail(op, "{}: cannot build the archive: {}", source, zip_strerror(archive.get()));
  archive.release();  // zip_close freed it

  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_source_stat(buffer.get(), &st) != 0 || (st.valid & ZIP_STAT_SIZE) == 0 ||
      zip_source_open(buffer.get()) != 0)
    fail(op, "{}: cannot read back the archive built in memory", source);
  detail::AtomicFile out(path, op);
  std::vector<std::byte> chunk(std::size_t{1} << 20);
  std::uint64_t total = 0;
  for (;;) {
    const zip_int64_t n = zip_source_read(buffer.get(), chunk.data(), chunk.size());
    if (n < 0) {
      zip_source_close(buffer.get());
      fail(op, "{}: cannot read back the archive built in memory", source);
    }
    if (n == 0) break;
    out.write(chunk.data(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
  }
  zip_source_close(buffer.get());
  if (total != st.size) fail(op, "{}: the archive built in memory is incomplete", source);
  out.commit();
}

}  // namespace kiln::io

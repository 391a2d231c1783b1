#include "io/zip_layout.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/fail.hpp"
#include "io/elements.hpp"

namespace kiln::io::detail {

namespace {

using kiln::detail::fail;

constexpr std::uint32_t local_signature = 0x04034b50;
constexpr std::uint32_t central_signature = 0x02014b50;
constexpr std::uint32_t end_signature = 0x06054b50;
constexpr std::uint32_t end64_signature = 0x06064b50;
constexpr std::uint32_t locator_signature = 0x07064b50;
constexpr std::uint32_t descriptor_signature = 0x08074b50;
constexpr std::uint64_t end_bytes = 22, locator_bytes = 20, end64_bytes = 56;
constexpr std::uint64_t central_bytes = 46, local_bytes = 30;
constexpr std::uint64_t max_comment = 0xffff;
constexpr std::uint16_t utf8_flag = 0x800, descriptor_flag = 0x8;
constexpr std::uint16_t zip64_extra = 0x0001;
constexpr std::uint32_t max32 = 0xffffffff;

/// One member as the central directory and its local header describe it.
struct Entry {
  std::string name;  // the raw bytes of the central directory's name
  std::uint16_t version_needed = 0, flags = 0, method = 0, time = 0, date = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, size = 0, offset = 0;
  std::uint64_t end = 0;  // one past its last byte (local header, data, descriptor)
};

/// Bounds-checked little-endian reads of the archive's bytes.
class Bytes {
 public:
  explicit Bytes(std::span<const std::byte> file) : file_(file) {}
  std::uint64_t size() const { return file_.size(); }
  bool has(std::uint64_t at, std::uint64_t n) const {
    return at <= file_.size() && n <= file_.size() - at;
  }
  std::uint16_t u16(std::uint64_t at) const { return load_le16(file_.data() + at); }
  std::uint32_t u32(std::uint64_t at) const { return load_le32(file_.data() + at); }
  std::uint64_t u64(std::uint64_t at) const { return load_le64(file_.data() + at); }
  std::string_view text(std::uint64_t at, std::uint64_t n) const {
    return {reinterpret_cast<const char*>(file_.data() + at), static_cast<std::size_t>(n)};
  }

 private:
  std::span<const std::byte> file_;
};

/// Where the end-of-central-directory record starts: the last one whose comment runs exactly
/// to the end of the file, else the last signature found (libzip decides about that one).
std::optional<std::uint64_t> find_end_record(const Bytes& bytes) {
  const std::uint64_t last = bytes.size() - end_bytes;
  const std::uint64_t lowest = last > max_comment ? last - max_comment : 0;
  std::optional<std::uint64_t> any;
  for (std::uint64_t at = last + 1; at-- > lowest;) {
    if (bytes.u32(at) != end_signature) continue;
    if (at + end_bytes + bytes.u16(at + 20) == bytes.size()) return at;
    if (!any) any = at;
  }
  return any;
}

/// The zip64 extra field among `extra`, or nullopt when there is none; throws on a malformed
/// extra field list.
std::optional<std::string_view> zip64_field(std::string_view extra, const std::string& member,
                                            const char* where, const std::string& op,
                                            const std::string& source) {
  std::optional<std::string_view> found;
  const Bytes bytes(std::as_bytes(std::span(extra.data(), extra.size())));
  std::uint64_t at = 0;
  while (at < extra.size()) {
    if (!bytes.has(at, 4) || !bytes.has(at + 4, bytes.u16(at + 2)))
      fail(op, "{}: member '{}' has a malformed extra field in its {}", source, member, where);
    const std::uint16_t id = bytes.u16(at), length = bytes.u16(at + 2);
    if (id == zip64_extra && !found) found = extra.substr(at + 4, length);
    at += 4 + length;
  }
  return found;
}

/// Replaces the 32-bit fields that say "see the zip64 field" (all ones) by its 64-bit values,
/// which it holds in this order. A local header's zip64 field holds both sizes, even one whose
/// 32-bit field is valid (that one is skipped, as libzip does).
void apply_zip64(std::string_view field, bool local, std::uint64_t& size, std::uint64_t& compressed,
                 std::uint64_t* offset, const std::string& member, const char* where,
                 const std::string& op, const std::string& source) {
  const Bytes bytes(std::as_bytes(std::span(field.data(), field.size())));
  std::uint64_t at = 0;
  const auto take = [&](std::uint64_t& value) {
    if (!bytes.has(at, 8))
      fail(op, "{}: member '{}' lacks the zip64 sizes or offset its {} calls for", source, member,
           where);
    value = bytes.u64(at);
    at += 8;
  };
  if (size == max32)
    take(size);
  else if (local && bytes.has(at, 8))
    at += 8;
  if (compressed == max32) take(compressed);
  if (offset != nullptr && *offset == max32) take(*offset);
}

class LayoutCheck {
 public:
  LayoutCheck(std::span<const std::byte> file, const std::string& op, const std::string& source)
      : bytes_(file), op_(op), source_(source) {}

  void run() {
    if (bytes_.size() == 0) fail(op_, "{}: not a zip archive (0 bytes)", source_);
    if (bytes_.size() < end_bytes)
      fail(op_, "{}: not a zip archive ({} bytes, fewer than an end-of-central-directory record)",
           source_, bytes_.size());
    const auto end = find_end_record(bytes_);
    if (!end) fail(op_, "{}: not a zip archive (no end-of-central-directory record)", source_);
    const std::uint64_t comment = bytes_.u16(*end + 20), after = bytes_.size() - *end - end_bytes;
    if (comment != after)
      fail(op_,
           "{}: the end record's comment is {} bytes, but {} bytes follow the record (data after "
           "the archive, or a cut comment)",
           source_, comment, after);
    if (!read_end_record(*end)) return;
    read_central_directory();
    read_local_headers();
    check_overlaps();
    for (const Entry& entry : entries_) compare_local_header(entry);
  }

 private:
  /// Reads the directory's place and size from the end record (and the zip64 end record when
  /// there is one); false for multi-disk archives, which libzip refuses itself.
  bool read_end_record(std::uint64_t end) {
    std::uint64_t disk = bytes_.u16(end + 4), directory_disk = bytes_.u16(end + 6);
    std::uint64_t here = bytes_.u16(end + 8), total = bytes_.u16(end + 10);
    directory_size_ = bytes_.u32(end + 12);
    directory_ = bytes_.u32(end + 16);
    directory_limit_ = end;
    if (end >= locator_bytes && bytes_.u32(end - locator_bytes) == locator_signature) {
      const std::uint64_t at = bytes_.u64(end - locator_bytes + 8);
      if (at > end - locator_bytes || !bytes_.has(at, end64_bytes) ||
          bytes_.u32(at) != end64_signature)
        fail(op_,
             "{}: the zip64 end record locator points to byte {}, where there is no zip64 end "
             "record",
             source_, at);
      disk = bytes_.u32(at + 16);
      directory_disk = bytes_.u32(at + 20);
      here = bytes_.u64(at + 24);
      total = bytes_.u64(at + 32);
      directory_size_ = bytes_.u64(at + 40);
      directory_ = bytes_.u64(at + 48);
      directory_limit_ = at;
    }
    if (disk != 0 || directory_disk != 0) return false;
    if (here != total)
      fail(op_, "{}: the end record counts {} members on this disk but {} in all", source_, here,
           total);
    if (directory_ > directory_limit_ || directory_size_ > directory_limit_ - directory_)
      fail(op_,
           "{}: the central directory ({} bytes at byte {}) runs past the end record at byte {}",
           source_, directory_size_, directory_, directory_limit_);
    if (directory_ + directory_size_ != directory_limit_)
      fail(op_,
           "{}: the central directory ends at byte {}, but the end record starts at byte {} (bytes "
           "between them, or wrong offsets)",
           source_, directory_ + directory_size_, directory_limit_);
    if (total > directory_size_ / central_bytes)
      fail(op_,
           "{}: the end record counts {} members, more than a central directory of {} bytes "
           "can hold",
           source_, total, directory_size_);
    count_ = total;
    return true;
  }

  void read_central_directory() {
    const std::uint64_t limit = directory_ + directory_size_;
    std::uint64_t at = directory_;
    for (std::uint64_t i = 0; i < count_; ++i) {
      if (limit - at < central_bytes)
        fail(op_, "{}: central directory entry {} (at byte {}) is cut short", source_, i, at);
      if (bytes_.u32(at) != central_signature)
        fail(op_, "{}: central directory entry {} (at byte {}) has no entry signature", source_, i,
             at);
      Entry e;
      e.version_needed = bytes_.u16(at + 6);
      e.flags = bytes_.u16(at + 8);
      e.method = bytes_.u16(at + 10);
      e.time = bytes_.u16(at + 12);
      e.date = bytes_.u16(at + 14);
      e.crc = bytes_.u32(at + 16);
      e.compressed = bytes_.u32(at + 20);
      e.size = bytes_.u32(at + 24);
      const std::uint64_t name_length = bytes_.u16(at + 28), extra_length = bytes_.u16(at + 30),
                          comment_length = bytes_.u16(at + 32);
      e.offset = bytes_.u32(at + 42);
      if (limit - at - central_bytes < name_length + extra_length + comment_length)
        fail(op_, "{}: central directory entry {} (at byte {}) is cut short", source_, i, at);
      e.name = std::string(bytes_.text(at + central_bytes, name_length));
      const std::string shown = printable(e.name);
      if (e.name.find('\0') != std::string::npos)
        fail(op_, "{}: member name '{}' contains a NUL byte", source_, shown);
      if ((e.flags & utf8_flag) != 0 && !is_valid_utf8(e.name))
        fail(op_, "{}: member name '{}' is marked as UTF-8 but is not valid UTF-8", source_, shown);
      // libzip takes a name with control bytes for CP437, which a UTF-8 flag contradicts.
      if ((e.flags & utf8_flag) != 0 && std::any_of(e.name.begin(), e.name.end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r';
          }))
        fail(op_, "{}: member name '{}' is marked as UTF-8 but has control characters", source_,
             shown);
      const char* where = "central directory entry";
      const auto zip64 = zip64_field(bytes_.text(at + central_bytes + name_length, extra_length),
                                     shown, where, op_, source_);
      const bool wide = e.size == max32 || e.compressed == max32 || e.offset == max32;
      if (wide && !zip64)
        fail(op_, "{}: member '{}' lacks the zip64 sizes or offset its {} calls for", source_,
             shown, where);
      if (zip64)
        apply_zip64(*zip64, false, e.size, e.compressed, &e.offset, shown, where, op_, source_);
      entries_.push_back(std::move(e));
      at += central_bytes + name_length + extra_length + comment_length;
    }
    if (at != limit)
      fail(op_,
           "{}: the central directory's {} entries take {} bytes, but the end record says {} bytes",
           source_, count_, at - directory_, directory_size_);
  }

  /// Finds where each member's bytes end, from its local header.
  void read_local_headers() {
    for (Entry& e : entries_) {
      const std::string shown = printable(e.name);
      if (e.offset > directory_ || directory_ - e.offset < local_bytes)
        fail(op_,
             "{}: member '{}' has its local header at byte {}, past the member data (which "
             "ends at byte {})",
             source_, shown, e.offset, directory_);
      if (bytes_.u32(e.offset) != local_signature)
        fail(op_, "{}: member '{}' has no local header at byte {} (bad signature)", source_, shown,
             e.offset);
      const std::uint64_t name_length = bytes_.u16(e.offset + 26),
                          extra_length = bytes_.u16(e.offset + 28);
      const std::uint64_t data = e.offset + local_bytes + name_length + extra_length;
      if (data > directory_)
        fail(op_, "{}: member '{}' has a local header that runs into the central directory",
             source_, shown);
      if (e.compressed > directory_ - data)
        fail(op_,
             "{}: member '{}' has {} bytes of data from byte {}, running into the central "
             "directory at byte {}",
             source_, shown, e.compressed, data, directory_);
      e.end = data + e.compressed;
      if ((e.flags & descriptor_flag) != 0) {
        const bool zip64 = e.size > max32 || e.compressed > max32;
        const bool signed_descriptor =
            directory_ - e.end >= 4 && bytes_.u32(e.end) == descriptor_signature;
        const std::uint64_t descriptor = (signed_descriptor ? 4 : 0) + (zip64 ? 20 : 12);
        if (descriptor > directory_ - e.end)
          fail(op_, "{}: member '{}' has a data descriptor that runs into the central directory",
               source_, shown);
        e.end += descriptor;
      }
    }
  }

  void check_overlaps() const {
    std::vector<const Entry*> order;
    for (const Entry& e : entries_) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(),
                     [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < order.size(); ++i) {
      const Entry& a = *order[i - 1];
      const Entry& b = *order[i];
      if (b.offset < a.end)
        fail(op_, "{}: members '{}' (bytes {} to {}) and '{}' (bytes {} to {}) overlap", source_,
             printable(a.name), a.offset, a.end, printable(b.name), b.offset, b.end);
    }
  }

  void compare_local_header(const Entry& e) const {
    const std::uint64_t at = e.offset;
    const std::string shown = printable(e.name);
    const auto differ = [&](const char* what, const std::string& local,
                            const std::string& central) {
      fail(op_,
           "{}: member '{}': its local header and the central directory disagree on the {} ({} in "
           "the local header, {} in the central directory)",
           source_, shown, what, local, central);
    };
    const std::string_view name = bytes_.text(at + local_bytes, bytes_.u16(at + 26));
    if (name != e.name)
      differ("name", fmt::format("'{}'", printable(name)), fmt::format("'{}'", shown));
    const std::uint16_t version_needed = bytes_.u16(at + 4);
    if (version_needed > e.version_needed)
      differ("zip version needed", std::to_string(version_needed),
             std::to_string(e.version_needed));
    if (bytes_.u16(at + 8) != e.method)
      differ("compression method", std::to_string(bytes_.u16(at + 8)), std::to_string(e.method));
    if (bytes_.u16(at + 10) != e.time || bytes_.u16(at + 12) != e.date)
      differ("modification time",
             fmt::format("{:#06x} {:#06x}", bytes_.u16(at + 12), bytes_.u16(at + 10)),
             fmt::format("{:#06x} {:#06x}", e.date, e.time));
    const std::uint16_t flags = bytes_.u16(at + 6);
    const std::uint32_t crc = bytes_.u32(at + 14);
    std::uint64_t compressed = bytes_.u32(at + 18), size = bytes_.u32(at + 22);
    // Sizes and CRC may be zeros when a data descriptor follows the data.
    if ((flags & descriptor_flag) != 0 && crc == 0 && compressed == 0 && size == 0) return;
    const std::uint64_t name_length = bytes_.u16(at + 26);
    const char* where = "local header";
    const auto zip64 = zip64_field(bytes_.text(at + local_bytes + name_length, bytes_.u16(at + 28)),
                                   shown, where, op_, source_);
    if (zip64) apply_zip64(*zip64, true, size, compressed, nullptr, shown, where, op_, source_);
    if (crc != e.crc) differ("CRC", fmt::format("{:#010x}", crc), fmt::format("{:#010x}", e.crc));
    if (compressed != e.compressed)
      differ("compressed size", std::to_string(compressed), std::to_string(e.compressed));
    if (size != e.size) differ("size", std::to_string(size), std::to_string(e.size));
  }

  Bytes bytes_;
  const std::string& op_;
  const std::string& source_;
  std::uint64_t directory_ = 0, directory_size_ = 0, directory_limit_ = 0, count_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace

void check_zip_layout(std::span<const std::byte> file, const std::string& op,
                      const std::string& source) {
  LayoutCheck(file, op, source).run();
}

}  // namespace kiln::io::detail

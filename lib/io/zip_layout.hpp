#pragma once
// The structure of a zip archive, checked from its bytes before libzip opens it.

#include <cstddef>
#include <span>
#include <string>

namespace kiln::io::detail {

/// Checks the layout of the zip archive held in `file` and throws kiln::Error
/// "[op] source: ..." naming the defect, where libzip would report several different ones
/// as "Zip archive inconsistent" (or accept them):
/// - not a zip archive at all: empty, shorter than an end-of-central-directory record, or
///   without one; bytes after the record other than its comment;
/// - a central directory that runs past, or does not end at, the end record; entry counts
///   that disagree with it; entries cut short or with a bad signature, malformed extra
///   fields, missing zip64 fields;
/// - member names with a NUL byte, or marked UTF-8 (flag bit 11) but not valid UTF-8 or
///   with control characters other than tab, line feed and carriage return;
/// - members whose local header is missing or whose bytes (local header, data, data
///   descriptor) overlap another member's or run into the central directory;
/// - a local header that disagrees with the central directory (name, method, time, CRC,
///   sizes, version needed), as libzip compares them.
/// Archives spanning several disks are left for libzip to refuse.
void check_zip_layout(std::span<const std::byte> file, const std::string& op,
                      const std::string& source);

}  // namespace kiln::io::detail

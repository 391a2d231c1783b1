#pragma once
// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
// (little-endian), where mask(c) = rotate_right(c, 15) + 0xa282ead8.

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::detail {

/// CRC-32C (Castagnoli) of `data`, as iSCSI and TFRecord define it (ISA-L computes it).
std::uint32_t crc32c(std::string_view data);
/// TFRecord's masked form of a CRC, so that a CRC over data holding CRCs stays informative.
std::uint32_t mask_crc(std::uint32_t crc);
/// `data` framed as one TFRecord.
std::string tf_record(std::string_view data);

}  // namespace kiln::detail

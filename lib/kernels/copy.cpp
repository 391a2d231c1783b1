#include <algorithm>
#include <cstring>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/kernel.hpp"
#include "kernels/strided_loop.hpp"

namespace kiln::detail {

namespace {
template <class T>
void copy_rows(const ArrayRef& src, const ArrayRef& dst) {
  const auto c = coalesce<2>(src.shape, {&src.strides, &dst.strides});
  const std::int64_t ss = c.strides[0][c.rank - 1];
  const std::int64_t ds = c.strides[1][c.rank - 1];
  const T* s = src.ptr<const T>();
  T* d = dst.ptr<T>();
  if (c.rank == 2 && ds == 1 && c.strides[1][0] == c.shape[1] && c.strides[0][0] == 1 &&
      ss >= c.shape[0]) {
    // A transpose into a contiguous matrix.
    transpose_matrix(d, s, sizeof(T), c.shape[0], c.shape[1], ss);
    return;
  }
  // Unit-stride rows into a contiguous matrix.
  const auto row_bytes = c.shape[c.rank - 1] * static_cast<std::int64_t>(sizeof(T));
  const bool rows_into_matrix = c.rank == 2 && ss == 1 && ds == 1 && c.strides[1][0] == c.shape[1];
  if (rows_into_matrix && c.strides[0][0] == 0) {
    // One row repeated (a bias broadcast over a batch): copy it once, then double the filled
    // part with one memcpy per doubling.
    auto* out = reinterpret_cast<char*>(d);
    const auto total = row_bytes * c.shape[0];
    if (total == 0) return;
    std::memcpy(out, s, static_cast<std::size_t>(row_bytes));
    for (std::int64_t filled = row_bytes; filled < total; filled *= 2)
      std::memcpy(out + filled, out, static_cast<std::size_t>(std::min(filled, total - filled)));
    return;
  }
  constexpr std::int64_t short_row_bytes = 1024;
  if (rows_into_matrix && row_bytes <= short_row_bytes) {
    // Short rows (a slice of columns): vector moves per row, not a call to memcpy per row.
    elementwise_rows().copy_rows(s, c.strides[0][0] * static_cast<std::int64_t>(sizeof(T)), d,
                                 row_bytes, c.shape[0]);
    return;
  }
  for_each_row(c, [&](const std::array<std::int64_t, 2>& off, std::int64_t n) {
    const T* sp = s + off[0];
    T* dp = d + off[1];
    if (ss == 1 && ds == 1) {
      std::memcpy(dp, sp, static_cast<std::size_t>(n) * sizeof(T));
    } else {
      for (std::int64_t i = 0; i < n; ++i) dp[i * ds] = sp[i * ss];
    }
  });
}
}  // namespace

ArrayRef array_ref(const Tensor& t) {
  const auto& impl = *t.impl();
  return ArrayRef{impl.data(), impl.dtype, impl.shape, impl.strides};
}

void copy_strided(const ArrayRef& src, const ArrayRef& dst) {
  switch (dtype_size(src.dtype)) {
    case 1:
      copy_rows<std::uint8_t>(src, dst);
      break;
    case 2:
      copy_rows<std::uint16_t>(src, dst);
      break;
    case 4:
      copy_rows<std::uint32_t>(src, dst);
      break;
    case 8:
      copy_rows<std::uint64_t>(src, dst);
      break;
    default:
      break;
  }
}

}  // namespace kiln::detail

// Tensor's methods that copy data live with the copy kernel (core/ stays below kernels/).
namespace kiln {

Tensor Tensor::contiguous() const {
  if (!impl_) detail::fail("tensor", "contiguous of an undefined tensor");
  const auto& impl = *impl_;
  if (impl.is_slices()) return detail::densify_slices(*this);
  if (impl.is_contiguous() || impl.is_symbolic()) return *this;
  Tensor out = detail::empty(impl.shape, impl.dtype);
  detail::copy_strided(detail::array_ref(*this), detail::array_ref(out));
  return out;
}

void Tensor::copy_to(void* dst) const {
  if (!impl_) detail::fail("tensor", "copy of an undefined tensor");
  const auto& impl = *impl_;
  if (impl.is_slices()) return detail::densify_slices(*this).copy_to(dst);
  detail::check_concrete(impl, "to_vector");
  detail::ArrayRef out{dst, impl.dtype, impl.shape, detail::contiguous_strides(impl.shape)};
  detail::copy_strided(detail::array_ref(*this), out);
}

}  // namespace kiln

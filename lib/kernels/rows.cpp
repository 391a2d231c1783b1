// Kernels of the `rows` family (primitives.def): unique_rows, segment_rows, take_rows,
// scatter_rows and dense_rows, and the in-place row update of variables (rows.hpp). Inputs are
// contiguous (KernelCall's promise for non-elementwise families); the attrs contracts are in
// lib/ops/rows.cpp.

#include "kernels/rows.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "kernels/streaming.hpp"

namespace kiln::detail {

namespace {

/// Elements per row of a [n, ...] array.
std::int64_t row_elements(const ArrayRef& a) {
  std::int64_t n = 1;
  for (std::size_t d = 1; d < a.shape.size(); ++d) n *= a.shape[d];
  return n;
}

/// The flat list of row numbers `rows` as i64, each checked against [0, count) (-1 kept when
/// `padded`; negative ids counted from the end when `wrap`, as gather reads them).
std::vector<std::int64_t> read_rows(const ArrayRef& rows, std::int64_t count, bool padded,
                                    bool wrap, const char* op) {
  const auto n = static_cast<std::size_t>(rows.numel());
  std::vector<std::int64_t> out(n);
  if (rows.dtype == DType::i32) {
    const auto* p = rows.ptr<const std::int32_t>();
    for (std::size_t i = 0; i < n; ++i) out[i] = p[i];
  } else if (rows.dtype == DType::i64) {
    std::memcpy(out.data(), rows.data, n * sizeof(std::int64_t));
  } else {
    fail(op, "row numbers must be i32 or i64, got {}", dtype_name(rows.dtype));
  }
  for (std::int64_t& r : out) {
    if (r >= 0 && r < count) continue;
    if (padded && r == -1) continue;
    if (wrap && r < 0 && r >= -count) {  // (after padding: -1 in a padded list is unused)
      r += count;
      continue;
    }
    fail(op, "row {} is out of range for a table of {} rows", r, count);
  }
  return out;
}

/// The distinct rows of `ids` in increasing order (padding excluded).
std::vector<std::int64_t> distinct(std::vector<std::int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (!ids.empty() && ids.front() == -1) ids.erase(ids.begin());
  return ids;
}

/// Position of id in the sorted list `unique` (which holds it).
std::int64_t position(const std::vector<std::int64_t>& unique, std::int64_t id) {
  return std::lower_bound(unique.begin(), unique.end(), id) - unique.begin();
}

bool padded_rows(const Attrs& attrs, std::size_t at) {
  return attrs.ints.size() > at && attrs.ints[at] != 0;
}

// unique_rows: ints[0] == 0: the distinct ids in increasing order, then -1 up to the input's
// length; ints[0] == 1: each id's position in that list (-1 for padding). ints[1]: padded input.
void unique_rows(const KernelCall& call) {
  const char* op = "unique_rows";
  const bool padded = padded_rows(call.attrs, 1);
  std::vector<std::int64_t> ids = read_rows(call.inputs[0], call.attrs.axis, padded, true, op);
  const std::vector<std::int64_t> unique = distinct(ids);
  auto* out = call.out.ptr<std::int64_t>();
  if (!call.attrs.ints.empty() && call.attrs.ints[0] == 1) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      out[i] = ids[i] < 0 ? -1 : position(unique, ids[i]);
    return;
  }
  std::copy(unique.begin(), unique.end(), out);
  std::fill(out + unique.size(), out + ids.size(), std::int64_t{-1});
}

// segment_rows: values [ids' shape..., row...] summed per distinct id, in unique_rows' order;
// the rows after the last distinct id are zero. ints[0]: padded ids (-1 entries skipped).
template <class T>
void segment_rows(const KernelCall& call) {
  const ArrayRef& values = call.inputs[0];
  const std::vector<std::int64_t> ids =
      read_rows(call.inputs[1], call.attrs.axis, padded_rows(call.attrs, 0), true, "segment_rows");
  const std::vector<std::int64_t> unique = distinct(ids);
  if (ids.empty()) return;
  const std::int64_t width = values.numel() / static_cast<std::int64_t>(ids.size());
  const T* src = values.ptr<const T>();
  T* dst = call.out.ptr<T>();
  std::fill(dst, dst + call.out.numel(), T{});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) continue;
    T* row = dst + position(unique, ids[i]) * width;
    const T* from = src + static_cast<std::int64_t>(i) * width;
    for (std::int64_t k = 0; k < width; ++k) row[k] += from[k];
  }
}

// take_rows: out[j] = table[rows[j]], a zero row for padding.
template <class T>
void take_rows(const KernelCall& call) {
  const ArrayRef& table = call.inputs[0];
  const std::vector<std::int64_t> rows =
      read_rows(call.inputs[1], table.shape[0], padded_rows(call.attrs, 0), false, "take_rows");
  const std::int64_t width = row_elements(table);
  const T* src = table.ptr<const T>();
  T* dst = call.out.ptr<T>();
  const auto row_bytes = static_cast<std::int64_t>(width * sizeof(T));
  constexpr auto ahead = static_cast<std::size_t>(prefetch_rows_ahead);
  for (std::size_t j = 0; j < rows.size(); ++j) {
    if (j + ahead < rows.size() && rows[j + ahead] >= 0)
      prefetch_row(src + rows[j + ahead] * width, row_bytes, false);
    T* to = dst + static_cast<std::int64_t>(j) * width;
    if (rows[j] < 0)
      std::fill(to, to + width, T{});
    else
      std::memcpy(to, src + rows[j] * width, static_cast<std::size_t>(width) * sizeof(T));
  }
}

template <class T>
void update_rows(T* table, std::int64_t width, const std::vector<std::int64_t>& rows,
                 const T* values, RowUpdate mode) {
  const auto row_bytes = static_cast<std::int64_t>(width * sizeof(T));
  constexpr auto ahead = static_cast<std::size_t>(prefetch_rows_ahead);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + ahead < rows.size() && rows[i + ahead] >= 0)
      prefetch_row(table + rows[i + ahead] * width, row_bytes, true);
    if (rows[i] < 0) continue;
    T* row = table + rows[i] * width;
    const T* v = values + static_cast<std::int64_t>(i) * width;
    switch (mode) {
      case RowUpdate::add:
        for (std::int64_t k = 0; k < width; ++k) row[k] += v[k];
        break;
      case RowUpdate::sub:
        for (std::int64_t k = 0; k < width; ++k) row[k] -= v[k];
        break;
      case RowUpdate::assign:
        std::memcpy(row, v, static_cast<std::size_t>(width) * sizeof(T));
        break;
    }
  }
}

/// Calls fn(T{}) for the dtypes the row kernels take (booleans are refused): every other dtype
/// when the rows are only moved, the compute dtypes when they are added.
template <bool MovesOnly, class Fn>
void visit_row_type(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::boolean) fail(op, "does not take bool values");
  if constexpr (MovesOnly)
    visit_dtype(dtype, [&](auto tag) {
      if constexpr (!std::is_same_v<decltype(tag), bool>) fn(tag);
    });
  else
    visit_compute_type(dtype, op, [&](auto tag) {
      if constexpr (!std::is_same_v<decltype(tag), std::uint8_t>) fn(tag);  // bool's storage
    });
}

}  // namespace

void check_rows(const ArrayRef& rows, std::int64_t count, bool padded, const char* op) {
  read_rows(rows, count, padded, false, op);
}

void update_rows_in_place(const ArrayRef& table, const ArrayRef& rows, const ArrayRef& values,
                          RowUpdate mode, bool padded, const char* op) {
  const std::vector<std::int64_t> list = read_rows(rows, table.shape[0], padded, false, op);
  if (mode == RowUpdate::assign && compute_dtype(table.dtype) != table.dtype) {
    // A dtype ops compute in a wider one (f16, u8...): its rows are only ever stored.
    const auto row_bytes = static_cast<std::size_t>(row_elements(table)) * dtype_size(table.dtype);
    auto* dst = static_cast<unsigned char*>(table.data);
    const auto* src = static_cast<const unsigned char*>(values.data);
    for (std::size_t i = 0; i < list.size(); ++i)
      if (list[i] >= 0)
        std::memcpy(dst + static_cast<std::size_t>(list[i]) * row_bytes, src + i * row_bytes,
                    row_bytes);
    return;
  }
  visit_row_type<false>(table.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    update_rows(table.ptr<T>(), row_elements(table), list, values.ptr<const T>(), mode);
  });
}

void run_rows(const KernelCall& call) {
  const char* op = name(call.prim).data();
  switch (call.prim) {
    case Prim::unique_rows:
      unique_rows(call);
      return;
    case Prim::segment_rows:
      visit_row_type<false>(call.out.dtype, op,
                            [&](auto tag) { segment_rows<decltype(tag)>(call); });
      return;
    case Prim::take_rows:
      visit_row_type<true>(call.out.dtype, op, [&](auto tag) { take_rows<decltype(tag)>(call); });
      return;
    case Prim::scatter_rows: {
      // A copy of the base, then the update in place.
      const ArrayRef& base = call.inputs[0];
      std::memcpy(call.out.data, base.data,
                  static_cast<std::size_t>(base.numel()) * dtype_size(base.dtype));
      const auto mode = static_cast<RowUpdate>(call.attrs.ints.at(0));
      update_rows_in_place(call.out, call.inputs[1], call.inputs[2], mode,
                           padded_rows(call.attrs, 1), op);
      return;
    }
    case Prim::dense_rows:
      std::memset(call.out.data, 0,
                  static_cast<std::size_t>(call.out.numel()) * dtype_size(call.out.dtype));
      update_rows_in_place(call.out, call.inputs[0], call.inputs[1], RowUpdate::add,
                           padded_rows(call.attrs, 0), op);
      return;
    case Prim::check_ids: {
      const ArrayRef& ids = call.inputs[0];
      const auto n = static_cast<std::size_t>(ids.numel());
      const auto check = [&](std::int64_t id) {
        if (id < 0 || id >= call.attrs.axis)
          fail("embedding_lookup", "id {} is out of range for a table of {} rows", id,
               call.attrs.axis);
      };
      if (ids.dtype == DType::i32)
        for (std::size_t i = 0; i < n; ++i) check(ids.ptr<const std::int32_t>()[i]);
      else
        for (std::size_t i = 0; i < n; ++i) check(ids.ptr<const std::int64_t>()[i]);
      std::memcpy(call.out.data, ids.data, n * dtype_size(ids.dtype));
      return;
    }
    default:
      fail(op, "is not a rows primitive");
  }
}

}  // namespace kiln::detail

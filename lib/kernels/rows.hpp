#pragma once
// Row-sparse kernels: the pieces of an indexed-slices gradient (unique rows, rows summed per
// id), reading and writing chosen rows of a table, and the in-place row update a variable's
// scatter_add / scatter_sub / scatter_update and the sparse optimizers run.
//
// A "rows" input is a list of row numbers (i32 or i64, of any shape, read in row-major order)
// of a table; values go with it as [rows' shape..., the table's row shape...]. In a
// padded list (attrs.ints[1] == 1, what unique_rows makes) -1 marks an unused entry, skipped by
// every kernel; in any other list a row outside [0, rows) is an error naming the op.

#include <cstdint>

#include "kernels/kernel.hpp"

namespace kiln::detail {

/// How update_rows_in_place combines a value with its row (also scatter_rows' attrs.ints[0]).
enum class RowUpdate : std::int64_t { add = 0, assign = 1, sub = 2 };

/// table[rows[i]] (+)= values[i] for every i, in place. table: contiguous [n, ...]; rows: a
/// list (see above; `padded` allows -1 entries); values: contiguous, one table row per entry.
/// Duplicate rows add up (add, sub) or the last one wins (assign). Checks every row before it
/// writes any, so a bad row changes nothing. `op` names the op in errors. Throws what
/// update_rows_in_place would for a row outside [0, count) (-1 allowed when `padded`), without
/// writing anything.
void check_rows(const ArrayRef& rows, std::int64_t count, bool padded, const char* op);

void update_rows_in_place(const ArrayRef& table, const ArrayRef& rows, const ArrayRef& values,
                          RowUpdate mode, bool padded, const char* op);

}  // namespace kiln::detail

#pragma once
// Front ends of the `rows` primitives (lib/kernels/rows.cpp) and the indexed-slices values built
// from them (kiln/sparse.hpp): what gather's gradient, the tape and the sparse optimizers use.

#include <cstdint>

#include "core/tensor_impl.hpp"
#include "kernels/rows.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

/// The shape of the values going with row numbers of shape `rows` into a table of shape
/// `table`: rows' dims followed by the table's dims after the first.
Shape row_values_shape(const Shape& rows, const Shape& table);

/// The distinct ids of `ids` (any shape; row numbers of a table of `rows` rows, negative ones
/// counted from the end) in increasing order, then -1 entries up to ids' shape; with `inverse`,
/// each id's position in that list instead. i64. `padded`: -1 entries of ids are unused.
Tensor unique_rows(const Tensor& ids, std::int64_t rows, bool inverse = false, bool padded = false);
/// values ([ids' shape..., row...]) summed per distinct id, in unique_rows' order (zero rows
/// after the last).
Tensor segment_rows(const Tensor& values, const Tensor& ids, std::int64_t rows,
                    bool padded = false);
/// table[rows[i...]] for each entry of `rows` (zero rows for -1 entries of a padded list).
Tensor take_rows(const Tensor& table, const Tensor& rows, bool padded);
/// A copy of `base` with its rows updated as update_rows_in_place does.
Tensor scatter_rows(const Tensor& base, const Tensor& rows, const Tensor& values, RowUpdate mode,
                    bool padded);
/// Zeros of dense_shape with each value row added to its row.
Tensor dense_rows(const Tensor& rows, const Tensor& values, const Shape& dense_shape, bool padded);

/// ids (i32 or i64) unchanged, each checked to lie in [0, rows) when the op runs (a kiln::Error
/// naming embedding_lookup and the id).
Tensor check_ids(const Tensor& ids, std::int64_t rows);

/// An indexed-slices value (unchecked parts; see RowSlices for the flags).
Tensor make_slices(const Tensor& indices, const Tensor& values, const Shape& dense_shape,
                   bool unique, bool padded);
/// The parts of an indexed-slices value.
const RowSlices& slices_parts(const Tensor& t);
/// a + b for gradients: two indexed-slices values of one shape join into one (their rows and
/// values concatenated), anything else is added densely.
Tensor add_gradients(const Tensor& a, const Tensor& b);
/// The gradient of gather(data, ids, 0) for the output gradient g, as indexed slices: each
/// distinct id once, in increasing order, with g's rows of that id summed.
Tensor gather_gradient_slices(const Tensor& g, const Tensor& ids, const Shape& data_shape);

}  // namespace kiln::detail

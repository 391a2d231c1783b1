// Front ends of the `rows` primitives and indexed-slices values (kiln/sparse.hpp).
//
// Attrs contracts (read by run_rows in kernels/rows.cpp):
//   unique_rows  : inputs {ids}; axis = the table's row count; ints = {inverse, padded}.
//   segment_rows : inputs {values, ids}; axis = the table's row count; ints = {padded}.
//   take_rows    : inputs {table, rows}; ints = {padded}.
//   scatter_rows : inputs {base, rows, values}; ints = {RowUpdate mode, padded}.
//   dense_rows   : inputs {rows, values}; ints = {padded}; the output shape is the dense one.
//   check_ids    : inputs {ids}; axis = the table's row count; the output is ids.
// A row list may have any shape; its values are [the list's shape..., the table's row dims...].

#include "ops/rows.hpp"

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/ops.hpp"
#include "kiln/sparse.hpp"
#include "ops/dispatch.hpp"

namespace kiln::detail {

namespace {

[[maybe_unused]] const bool densify_installed = [] {
  densify_slices = [](const Tensor& t) { return to_dense(t); };
  return true;
}();

void check_row_list(const Tensor& rows, const char* op) {
  check_defined(rows, op, 1);
  if (rows.dtype() != DType::i32 && rows.dtype() != DType::i64)
    fail(op, "row numbers must be i32 or i64, got {}", dtype_name(rows.dtype()));
}

void check_values(const Tensor& values, const Tensor& rows, const Shape& table_shape,
                  const char* op) {
  const Shape expected = row_values_shape(rows.shape(), table_shape);
  if (values.shape() != expected)
    fail(op,
         "values of shape {} do not fit {} row numbers of shape {} into a table of shape {} "
         "(expected {})",
         values.shape(), rows.size(), rows.shape(), table_shape, expected);
}

Attrs row_attrs(std::int64_t axis, std::vector<std::int64_t> ints) {
  Attrs attrs;
  attrs.axis = axis;
  attrs.ints = std::move(ints);
  return attrs;
}

}  // namespace

Shape row_values_shape(const Shape& rows, const Shape& table) {
  Shape s = rows;
  for (std::size_t d = 1; d < table.size(); ++d) s.push_back(table[d]);
  return s;
}

Tensor unique_rows(const Tensor& ids, std::int64_t rows, bool inverse, bool padded) {
  check_row_list(ids, "unique_rows");
  return apply(Prim::unique_rows, {ids}, row_attrs(rows, {inverse ? 1 : 0, padded ? 1 : 0}),
               DType::i64, ids.shape());
}

Tensor segment_rows(const Tensor& values, const Tensor& ids, std::int64_t rows, bool padded) {
  check_row_list(ids, "segment_rows");
  const Shape& v = values.shape();
  if (v.size() < ids.shape().size() ||
      !std::equal(ids.shape().begin(), ids.shape().end(), v.begin()))
    fail("segment_rows", "values of shape {} do not start with the ids' shape {}", v, ids.shape());
  return apply(Prim::segment_rows, {values, ids}, row_attrs(rows, {padded ? 1 : 0}), values.dtype(),
               values.shape());
}

Tensor take_rows(const Tensor& table, const Tensor& rows, bool padded) {
  check_defined(table, "take_rows", 0);
  check_row_list(rows, "take_rows");
  if (table.ndim() < 1) fail("take_rows", "the table must have at least one dim");
  return apply(Prim::take_rows, {table, rows}, row_attrs(0, {padded ? 1 : 0}), table.dtype(),
               row_values_shape(rows.shape(), table.shape()));
}

Tensor scatter_rows(const Tensor& base, const Tensor& rows, const Tensor& values, RowUpdate mode,
                    bool padded) {
  check_defined(base, "scatter_rows", 0);
  check_row_list(rows, "scatter_rows");
  check_defined(values, "scatter_rows", 2);
  check_same_dtype(base, values, "scatter_rows");
  check_values(values, rows, base.shape(), "scatter_rows");
  return apply(Prim::scatter_rows, {base, rows, values},
               row_attrs(0, {static_cast<std::int64_t>(mode), padded ? 1 : 0}), base.dtype(),
               base.shape());
}

Tensor dense_rows(const Tensor& rows, const Tensor& values, const Shape& dense_shape, bool padded) {
  return apply(Prim::dense_rows, {rows, values}, row_attrs(dense_shape[0], {padded ? 1 : 0}),
               values.dtype(), dense_shape);
}

Tensor check_ids(const Tensor& ids, std::int64_t rows) {
  check_row_list(ids, "embedding_lookup");
  return apply(Prim::check_ids, {ids}, row_attrs(rows, {}), ids.dtype(), ids.shape());
}

Tensor make_slices(const Tensor& indices, const Tensor& values, const Shape& dense_shape,
                   bool unique, bool padded) {
  auto impl = std::make_shared<TensorImpl>(values.dtype(), dense_shape,
                                           contiguous_strides(dense_shape), 0, nullptr);
  impl->slices = std::make_shared<const RowSlices>(RowSlices{indices, values, unique, padded});
  return Tensor(std::move(impl));
}

const RowSlices& slices_parts(const Tensor& t) {
  if (!t.defined() || !t.impl()->is_slices())
    fail("slices_of", "the tensor is not an indexed-slices value");
  return *t.impl()->slices;
}

namespace {
/// The row list of `s` as one dim, and its values as [entries, row...]; false when a dynamic
/// dim keeps them from being flattened.
bool flat_parts(const Tensor& s, Tensor& indices, Tensor& values) {
  const RowSlices& p = slices_parts(s);
  if (p.indices.ndim() == 1) {
    indices = p.indices;
    values = p.values;
    return true;
  }
  if (p.indices.shape().has_dynamic_dims()) return false;
  Shape flat_values = row_values_shape(Shape{p.indices.size()}, s.shape());
  indices = reshape(p.indices, {p.indices.size()});
  values = reshape(p.values, flat_values);
  return true;
}
}  // namespace

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  if (a.is_indexed_slices() && b.is_indexed_slices() && a.shape() == b.shape() &&
      a.dtype() == b.dtype()) {
    Tensor ia, va, ib, vb;
    if (flat_parts(a, ia, va) && flat_parts(b, ib, vb)) {
      const auto i64 = [](const Tensor& t) { return cast(t, DType::i64); };
      return make_slices(concat({i64(ia), i64(ib)}, 0), concat({va, vb}, 0), a.shape(), false,
                         slices_parts(a).padded || slices_parts(b).padded);
    }
  }
  return add(a, b);
}

Tensor gather_gradient_slices(const Tensor& g, const Tensor& ids, const Shape& data_shape) {
  const std::int64_t rows = data_shape[0];
  return make_slices(unique_rows(ids, rows), segment_rows(g, ids, rows), data_shape,
                     /*unique*/ true, /*padded*/ true);
}

}  // namespace kiln::detail

namespace kiln {

Tensor indexed_slices(const Tensor& indices, const Tensor& values, const Shape& dense_shape) {
  constexpr const char* op = "indexed_slices";
  detail::check_defined(indices, op, 0);
  detail::check_defined(values, op, 1);
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64)
    detail::fail(op, "indices must be i32 or i64, got {}", dtype_name(indices.dtype()));
  if (indices.is_indexed_slices() || values.is_indexed_slices())
    detail::fail(op, "indices and values must be dense tensors");
  if (dense_shape.empty()) detail::fail(op, "the dense shape needs at least one dim");
  detail::require_static_dim(dense_shape[0], op, "the dense shape's first dim (the row count)");
  for (auto d : dense_shape)
    if (d < 0 && !is_dynamic_dim(d))
      detail::fail(op, "negative dimension in shape {}", dense_shape);
  detail::check_values(values, indices, dense_shape, op);
  return detail::make_slices(indices, values, dense_shape, false, false);
}

IndexedSlices slices_of(const Tensor& t) {
  const detail::RowSlices& p = detail::slices_parts(t);
  return IndexedSlices{p.indices, p.values, t.shape()};
}

Tensor to_dense(const Tensor& t) {
  detail::check_defined(t, "to_dense");
  if (!t.is_indexed_slices()) return t;
  const detail::RowSlices& p = *t.impl()->slices;
  return detail::dense_rows(p.indices, p.values, t.shape(), p.padded);
}

Tensor deduplicate(const Tensor& t) {
  detail::check_defined(t, "deduplicate");
  if (!t.is_indexed_slices()) return t;
  const detail::RowSlices& p = *t.impl()->slices;
  if (p.unique) return t;
  const std::int64_t rows = t.shape()[0];
  return detail::make_slices(detail::unique_rows(p.indices, rows, false, p.padded),
                             detail::segment_rows(p.values, p.indices, rows, p.padded), t.shape(),
                             true, true);
}

}  // namespace kiln

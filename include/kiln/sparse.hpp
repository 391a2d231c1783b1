#pragma once
/// @file sparse.hpp
/// Row-sparse values (TensorFlow's IndexedSlices): the gradient of a row lookup.
///
/// The gradient of kiln::gather along axis 0 (and so of nn::Embedding and embedding lookups)
/// with respect to its table is not a dense tensor of the table's shape but an *indexed-slices
/// value*: the rows the lookup touched and one gradient row for each. A batch of 4096 ids into a
/// 1,000,000-row table makes 4096 rows, not a million. Such a value is a kiln::Tensor whose
/// is_indexed_slices() is true; its dtype() and shape() are those of the dense tensor it stands
/// for. It flows through GradientTape and kiln::function without being made dense:
/// - the optimizers (SGD, Adam, RMSprop, Adagrad) update only the rows it names, in place;
/// - gradient clipping (clipnorm, global_clipnorm) reads only its values;
/// - two of them for one variable (a table looked up twice) join into one.
///
/// Every other use makes it dense first, eagerly or in the traced graph: an op applied to it,
/// Variable::assign, to_vector/item/at, contiguous(), or a traced function returning it. Call
/// kiln::to_dense to do so yourself, and kiln::slices_of to read its parts.
///
/// The gradients kiln makes hold each row once, in increasing order (duplicate ids summed); their
/// lists may end in entries of row -1 with zero values, unused, so that their length is the
/// number of ids looked up, known when tracing.

#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

/// The parts of an indexed-slices value: dense row indices[i...] (of the first dim of
/// dense_shape) holds values[i...]; rows not named are zero, rows named twice add up.
struct IndexedSlices {
  Tensor indices;     ///< i32 or i64, any shape (usually one dim); -1 entries are unused
  Tensor values;      ///< indices.shape() followed by dense_shape without its first dim
  Shape dense_shape;  ///< the shape of the dense tensor
};

/// An indexed-slices value of dense shape `dense_shape` from its parts (checked: indices i32 or
/// i64; values of indices' shape followed by dense_shape's dims after the first; a static row
/// count). Row numbers are checked when the value is used: each must lie in
/// [0, dense_shape[0]).
Tensor indexed_slices(const Tensor& indices, const Tensor& values, const Shape& dense_shape);

/// The parts of indexed-slices value t (a kiln::Error for a dense tensor).
IndexedSlices slices_of(const Tensor& t);

/// The dense tensor t stands for: t itself when it is dense; for an indexed-slices value, zeros
/// with each value row added to its row.
Tensor to_dense(const Tensor& t);

/// t with each row once, in increasing order, duplicate rows' values summed (as the gradients
/// kiln makes already are); a dense t is returned as it is.
Tensor deduplicate(const Tensor& t);

}  // namespace kiln

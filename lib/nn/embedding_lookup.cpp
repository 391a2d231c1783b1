// embedding_lookup and embedding_lookup_sparse (kiln/partitioned.hpp) over one table or its
// shards. Ids are checked against the whole table, then each shard gathers the ids it holds
// (take_rows of a padded list: -1 for the others) and the shards' rows add up, so shapes stay
// static and each shard's gradient is indexed slices of its own rows.
#include <cmath>

#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "kiln/partitioned.hpp"
#include "ops/dispatch.hpp"
#include "ops/rows.hpp"

namespace kiln {

namespace {

constexpr const char* lookup_op = "embedding_lookup";

/// Each looked-up row of `rows` ([ids..., row dims]) scaled down to L2 norm max_norm.
Tensor clip_rows(const Tensor& rows, std::int64_t id_dims, double max_norm) {
  std::vector<std::int64_t> axes;
  for (std::int64_t d = id_dims; d < rows.ndim(); ++d) axes.push_back(d);
  if (axes.empty()) return rows;
  const Tensor norm = sqrt(sum(square(rows), axes, /*keepdims*/ true));
  return rows * (max_norm / maximum(norm, scalar(max_norm, rows.dtype())));
}

void check_params(const std::vector<Tensor>& params, const char* op) {
  if (params.empty()) detail::fail(op, "needs at least one table (shard)");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    detail::check_defined(p, op, static_cast<int>(i));
    if (p.ndim() < 1 || p.dtype() != params[0].dtype() ||
        !std::equal(p.shape().begin() + 1, p.shape().end(), params[0].shape().begin() + 1,
                    params[0].shape().end()) ||
        p.ndim() != params[0].ndim())
      detail::fail(op, "shard {} is {} {}; every shard needs shard 0's dtype {} and row dims {}", i,
                   dtype_name(p.dtype()), p.shape(), dtype_name(params[0].dtype()),
                   params[0].shape());
    detail::require_static_dim(p.shape()[0], op, "a shard's row count");
  }
}

}  // namespace

Tensor embedding_lookup(const std::vector<Tensor>& params, const Tensor& ids,
                        const EmbeddingLookupOptions& options) {
  check_params(params, lookup_op);
  detail::check_defined(ids, lookup_op, static_cast<int>(params.size()));
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    detail::fail(lookup_op, "ids must be i32 or i64, got {}", dtype_name(ids.dtype()));
  if (options.max_norm && !(*options.max_norm > 0))
    detail::fail(lookup_op, "max_norm must be > 0, got {}", *options.max_norm);
  std::int64_t total = 0;
  for (const Tensor& p : params) total += p.shape()[0];
  const Tensor checked = detail::check_ids(ids, total);
  Tensor out;
  const auto n = static_cast<std::int64_t>(params.size());
  if (n == 1) {
    out = gather(params[0], checked, 0);
  } else {
    // The shard of each id and its row there (TensorFlow's mod and div strategies).
    Tensor shard, row;
    if (options.partition_strategy == PartitionStrategy::mod) {
      shard = checked % n;
      row = (checked) / (n);
    } else {
      const std::int64_t per = total / n, extras = total % n;
      shard = maximum((checked) / (per + 1), (checked - extras) / (per));
      row = where(shard < extras, checked % (per + 1), (checked - extras) % per);
    }
    const Tensor none = full({}, -1.0, checked.dtype());
    for (std::int64_t s = 0; s < n; ++s) {
      const Tensor local = where(shard == s, row, none);
      const Tensor part = detail::take_rows(params[static_cast<std::size_t>(s)], local, true);
      out = out.defined() ? out + part : part;
    }
  }
  return options.max_norm ? clip_rows(out, ids.ndim(), *options.max_norm) : out;
}

Tensor embedding_lookup(const Tensor& params, const Tensor& ids,
                        const EmbeddingLookupOptions& options) {
  return embedding_lookup(std::vector<Tensor>{params}, ids, options);
}

Tensor embedding_lookup(const PartitionedVariable& params, const Tensor& ids,
                        const EmbeddingLookupOptions& options) {
  return embedding_lookup(params.shard_values(), ids, options);
}

Tensor embedding_lookup_sparse(const std::vector<Tensor>& params, const Tensor& ids,
                               const Tensor& segment_ids, std::int64_t num_segments,
                               const Tensor& weights, const EmbeddingLookupSparseOptions& options) {
  constexpr const char* op = "embedding_lookup_sparse";
  check_params(params, op);
  detail::check_defined(ids, op, 1);
  detail::check_defined(segment_ids, op, 2);
  if (ids.ndim() != 1 || segment_ids.shape() != ids.shape())
    detail::fail(op, "ids and segment_ids must be one list of equal length, got {} and {}",
                 ids.shape(), segment_ids.shape());
  if (num_segments < 0) detail::fail(op, "num_segments must be >= 0, got {}", num_segments);
  const DType dtype = params[0].dtype();
  if (weights.defined() && (weights.shape() != ids.shape() || weights.dtype() != dtype))
    detail::fail(op, "weights must be {} {} (one per id), got {} {}", dtype_name(dtype),
                 ids.shape(), dtype_name(weights.dtype()), weights.shape());
  const Tensor rows = embedding_lookup(
      params, ids,
      {.partition_strategy = options.partition_strategy, .max_norm = options.max_norm});
  // Weights shaped to scale whole rows: [n, 1, ...].
  Shape column = ids.shape();
  for (std::int64_t d = 1; d < rows.ndim(); ++d) column.push_back(1);
  const Tensor w = weights.defined() ? reshape(weights, column) : ones(column, dtype);
  Shape out_shape = rows.shape();
  out_shape[0] = num_segments;
  const Tensor summed = detail::dense_rows(segment_ids, rows * w, out_shape, false);
  if (options.combiner == Combiner::sum) return summed;
  Shape per_segment = column;
  per_segment[0] = num_segments;
  Tensor norm = detail::dense_rows(segment_ids, options.combiner == Combiner::mean ? w : w * w,
                                   per_segment, false);
  if (options.combiner == Combiner::sqrtn) norm = sqrt(norm);
  // A segment without ids sums to zero: divide it by 1, not 0.
  const Tensor safe = where(norm == 0.0, ones({}, dtype), norm);
  return summed / safe;
}

Tensor embedding_lookup_sparse(const PartitionedVariable& params, const Tensor& ids,
                               const Tensor& segment_ids, std::int64_t num_segments,
                               const Tensor& weights, const EmbeddingLookupSparseOptions& options) {
  return embedding_lookup_sparse(params.shard_values(), ids, segment_ids, num_segments, weights,
                                 options);
}

}  // namespace kiln

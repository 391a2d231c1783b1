#pragma once
/// @file partitioned.hpp
/// Partitioned variables (TensorFlow's get_variable(..., partitioner=...)) and embedding
/// lookups over them (tf.nn.embedding_lookup, embedding_lookup_sparse).
///
/// A partitioned variable is one logical variable of shape [rows, ...] kept as shards along its
/// first dim: ordinary variables "<name>/part_0", "<name>/part_1", ... in the variable store,
/// shard i holding rows [offset_i, offset_i + size_i), the sizes as even as possible (the first
/// rows % shards shards have one row more). Optimizers, checkpoints and the gradient tape see
/// the shards; an embedding lookup's gradient reaches each shard as indexed slices of its own
/// rows (kiln/sparse.hpp). A kiln::Checkpoint that tracks the store saves each shard, and
/// restores a file written with another number of shards by joining the file's shards and
/// splitting them again (the partitioned variable must exist when restoring then).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/init.hpp"
#include "kiln/variable.hpp"
#include "kiln/variable_store.hpp"

namespace kiln {

/// How many shards a variable of `shape` and `dtype` is split into along its first dim.
using Partitioner = std::function<std::int64_t(const Shape& shape, DType dtype)>;

/// Always `num_shards` shards (TensorFlow's fixed_size_partitioner).
Partitioner fixed_size_partitioner(std::int64_t num_shards);
/// As many shards as keep each at least `min_slice_size` bytes, at most `max_partitions` and at
/// most one per row (TensorFlow's min_max_variable_partitioner).
Partitioner min_max_variable_partitioner(std::int64_t max_partitions = 1,
                                         std::int64_t min_slice_size = 256 << 10);

struct PartitionedVariableOptions {
  /// Required: the shard count for the variable's shape (1 to its row count).
  Partitioner partitioner;
  Reuse reuse = Reuse::No;
  DType dtype = f32;
  bool trainable = true;
};

/// A handle to the shards of one partitioned variable. Copies refer to the same shards.
class PartitionedVariable {
 public:
  PartitionedVariable() = default;
  PartitionedVariable(std::string name, Shape shape, std::vector<Variable> shards);

  /// The logical variable's full name ("emb"; its shards are "emb/part_0", ...).
  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const;
  const std::vector<Variable>& shards() const { return shards_; }
  std::int64_t num_shards() const { return static_cast<std::int64_t>(shards_.size()); }
  /// The first row of each shard in the logical variable.
  std::vector<std::int64_t> shard_offsets() const;
  /// The whole value: the shards' values joined (a copy of every row).
  Tensor value() const;
  /// Assigns a value of the whole shape, split into the shards.
  void assign(const Tensor& value) const;
  /// The shards' values, in order (what embedding_lookup takes).
  std::vector<Tensor> shard_values() const;

 private:
  std::string name_;
  Shape shape_;
  std::vector<Variable> shards_;
};

/// The shard sizes a variable of `rows` rows split into `shards` shards has (the first rows %
/// shards one row longer).
std::vector<std::int64_t> shard_sizes(std::int64_t rows, std::int64_t shards);

/// get_variable with a partitioner: creates (or finds, by options.reuse) the shards
/// scoped_name(name)/part_i of a variable of `shape`. The initializer runs once for the whole
/// shape, and each shard takes its rows, so the values do not depend on the shard count.
/// Errors: no partitioner; a shard count below 1 or above the row count; an existing variable
/// with another shard count, shape or dtype (and the Reuse errors of get_variable).
PartitionedVariable get_variable(std::string_view name, const Shape& shape,
                                 const init::Initializer& initializer,
                                 const PartitionedVariableOptions& options);

/// Which shard holds an id: mod (id % shards, row id / shards: TensorFlow's default) or div
/// (contiguous ranges, the layout get_variable's shards have).
enum class PartitionStrategy { mod, div };

struct EmbeddingLookupOptions {
  PartitionStrategy partition_strategy = PartitionStrategy::mod;
  /// Scale each looked-up row whose L2 norm exceeds this down to it.
  std::optional<double> max_norm = {};
};

/// The rows of `params` for `ids` (i32 or i64, any shape): ids' shape followed by a row's dims.
/// With several shards the ids are split between them by the partition strategy (one shard:
/// the table itself). Each id must lie in [0, total rows): a kiln::Error naming the id, eagerly
/// and in kiln::function. The gradient with respect to each shard is indexed slices of its
/// rows.
Tensor embedding_lookup(const std::vector<Tensor>& params, const Tensor& ids,
                        const EmbeddingLookupOptions& options = {});
Tensor embedding_lookup(const Tensor& params, const Tensor& ids,
                        const EmbeddingLookupOptions& options = {});
Tensor embedding_lookup(const PartitionedVariable& params, const Tensor& ids,
                        const EmbeddingLookupOptions& options = {});

/// How embedding_lookup_sparse combines the rows of one segment: their weighted sum, that sum
/// over the sum of the weights (mean), or over the root of the sum of squared weights (sqrtn).
enum class Combiner { sum, mean, sqrtn };

struct EmbeddingLookupSparseOptions {
  Combiner combiner = Combiner::mean;
  PartitionStrategy partition_strategy = PartitionStrategy::mod;
  std::optional<double> max_norm = {};
};

/// TensorFlow's embedding_lookup_sparse with its sparse ids given as parts: ids [n] looked up,
/// segment_ids [n] (each in [0, num_segments): the row of the batch each id belongs to, the
/// first column of a SparseTensor's indices), weights [n] of the params' dtype (undefined: all
/// 1). Returns [num_segments, row dims...]: each segment's rows combined; a segment without ids
/// is zero.
Tensor embedding_lookup_sparse(const std::vector<Tensor>& params, const Tensor& ids,
                               const Tensor& segment_ids, std::int64_t num_segments,
                               const Tensor& weights = {},
                               const EmbeddingLookupSparseOptions& options = {});
Tensor embedding_lookup_sparse(const PartitionedVariable& params, const Tensor& ids,
                               const Tensor& segment_ids, std::int64_t num_segments,
                               const Tensor& weights = {},
                               const EmbeddingLookupSparseOptions& options = {});

}  // namespace kiln

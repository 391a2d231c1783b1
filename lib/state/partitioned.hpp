#pragma once
// Restoring partitioned variables (kiln/partitioned.hpp) from files with another sharding.

#include <map>
#include <string>

#include "kiln/tensor.hpp"
#include "kiln/variable_store.hpp"

namespace kiln::detail {

/// For each partitioned variable of `store` (shards "<name>/part_0".."part_<k-1>") whose
/// shards in `values` (a restored file's keys, "<name>/part_<j>") are split otherwise: joins
/// the file's shards and replaces them by the store's split. A file whose shards do not add up
/// to the variable (rows, row dims, dtype) is a kiln::Error naming `file`, before anything is
/// restored.
void reshard_partitioned(const VariableStore& store, std::map<std::string, Tensor>& values,
                         const char* op, const std::string& file);

}  // namespace kiln::detail

// Partitioned variables (kiln/partitioned.hpp): partitioners, get_variable with one, and the
// PartitionedVariable handle over the shards "<name>/part_<i>" of the variable store.
#include "kiln/partitioned.hpp"

#include <algorithm>
#include <charconv>
#include <map>

#include "state/partitioned.hpp"

#include "core/fail.hpp"
#include "kiln/name_scope.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace {
constexpr std::string_view op = "get_variable";

std::string shard_name(std::string_view name, std::int64_t i) {
  return fmt::format("{}/part_{}", name, i);
}
}  // namespace

Partitioner fixed_size_partitioner(std::int64_t num_shards) {
  if (num_shards < 1)
    detail::fail("fixed_size_partitioner", "num_shards must be at least 1, got {}", num_shards);
  return [num_shards](const Shape&, DType) { return num_shards; };
}

Partitioner min_max_variable_partitioner(std::int64_t max_partitions, std::int64_t min_slice_size) {
  if (max_partitions < 1 || min_slice_size < 1)
    detail::fail("min_max_variable_partitioner",
                 "max_partitions and min_slice_size must be at least 1, got {} and {}",
                 max_partitions, min_slice_size);
  return [=](const Shape& shape, DType dtype) {
    const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size(dtype));
    const std::int64_t wanted =
        std::max<std::int64_t>(1, (bytes + min_slice_size - 1) / min_slice_size);
    return std::min(
        {wanted, max_partitions, shape.empty() ? 1 : std::max<std::int64_t>(1, shape[0])});
  };
}

std::vector<std::int64_t> shard_sizes(std::int64_t rows, std::int64_t shards) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(shards), rows / shards);
  for (std::int64_t i = 0; i < rows % shards; ++i) ++sizes[static_cast<std::size_t>(i)];
  return sizes;
}

PartitionedVariable::PartitionedVariable(std::string name, Shape shape,
                                         std::vector<Variable> shards)
    : name_(std::move(name)), shape_(std::move(shape)), shards_(std::move(shards)) {}

DType PartitionedVariable::dtype() const {
  if (shards_.empty()) detail::fail("PartitionedVariable", "an empty handle has no dtype");
  return shards_.front().dtype();
}

std::vector<std::int64_t> PartitionedVariable::shard_offsets() const {
  std::vector<std::int64_t> offsets;
  std::int64_t row = 0;
  for (const Variable& s : shards_) {
    offsets.push_back(row);
    row += s.shape()[0];
  }
  return offsets;
}

std::vector<Tensor> PartitionedVariable::shard_values() const {
  std::vector<Tensor> values;
  for (const Variable& s : shards_) values.push_back(s.value());
  return values;
}

Tensor PartitionedVariable::value() const {
  if (shards_.empty()) detail::fail("PartitionedVariable", "an empty handle has no value");
  return shards_.size() == 1 ? shards_[0].value() : concat(shard_values(), 0);
}

void PartitionedVariable::assign(const Tensor& value) const {
  constexpr const char* where = "PartitionedVariable.assign";
  detail::check_defined(value, where, 0);
  if (value.shape() != shape_ || value.dtype() != dtype())
    detail::fail(where, "'{}' is {} {}; the new value is {} {}", name_, dtype_name(dtype()), shape_,
                 dtype_name(value.dtype()), value.shape());
  const std::vector<std::int64_t> offsets = shard_offsets();
  for (std::size_t i = 0; i < shards_.size(); ++i)
    shards_[i].assign(slice(value, 0, offsets[i], offsets[i] + shards_[i].shape()[0]));
}

PartitionedVariable get_variable(std::string_view name, const Shape& shape,
                                 const init::Initializer& initializer,
                                 const PartitionedVariableOptions& options) {
  VariableStore& store = default_variable_store();
  if (!options.partitioner)
    detail::fail(op, "variable {}: PartitionedVariableOptions needs a partitioner", name);
  if (shape.empty() || shape.has_dynamic_dims() || shape[0] < 1)
    detail::fail(op, "variable {}: a partitioned variable needs a static shape with rows, got {}",
                 name, shape);
  const std::int64_t count = options.partitioner(shape, options.dtype);
  if (count < 1 || count > shape[0])
    detail::fail(op,
                 "variable {}: the partitioner asked for {} shards of {} rows; it must give 1 to "
                 "{} (one row per shard at least)",
                 name, count, shape[0], shape[0]);
  const std::string full = scoped_name(name);
  // The shards that exist already, in order.
  std::vector<Variable> existing;
  for (std::int64_t i = 0;; ++i) {
    Variable v = store.find(shard_name(full, i));
    if (!v.defined()) break;
    existing.push_back(std::move(v));
  }
  const std::vector<std::int64_t> sizes = shard_sizes(shape[0], count);
  if (!existing.empty()) {
    if (options.reuse == Reuse::No)
      detail::fail(op,
                   "partitioned variable {} already exists ({} shards); pass Reuse::Yes or "
                   "Reuse::Auto to share it, or choose another name",
                   full, existing.size());
    bool same = static_cast<std::int64_t>(existing.size()) == count;
    for (std::size_t i = 0; same && i < existing.size(); ++i) {
      Shape want = shape;
      want[0] = sizes[i];
      same = existing[i].shape() == want && existing[i].dtype() == options.dtype;
    }
    if (!same)
      detail::fail(op,
                   "partitioned variable {} exists as {} shards of another shape or dtype; "
                   "{} {} in {} shards was requested",
                   full, existing.size(), dtype_name(options.dtype), shape, count);
    return PartitionedVariable(full, shape, std::move(existing));
  }
  if (options.reuse == Reuse::Yes)
    detail::fail(op,
                 "partitioned variable {} does not exist; Reuse::Yes only returns existing "
                 "variables (create it first, or use Reuse::Auto)",
                 full);
  detail::check_variable_creation_allowed(full);
  const Tensor initial = initializer(shape, options.dtype);  // once: values independent of count
  std::vector<Variable> shards;
  std::int64_t row = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t rows = sizes[static_cast<std::size_t>(i)];
    Shape part = shape;
    part[0] = rows;
    // (get_variable scopes the name as `full` was.)
    shards.push_back(store.get_variable(shard_name(name, i), part,
                                        init::from_value(slice(initial, 0, row, row + rows)),
                                        Reuse::No, options.dtype, options.trainable));
    row += rows;
  }
  return PartitionedVariable(full, shape, std::move(shards));
}

namespace detail {

namespace {
/// "<prefix>/part_<i>" split into prefix and i; false for any other name.
bool split_shard_name(const std::string& name, std::string& prefix, std::int64_t& index) {
  const auto at = name.rfind("/part_");
  if (at == std::string::npos) return false;
  const char* first = name.data() + at + 6;
  const char* last = name.data() + name.size();
  if (first == last || (*first == '0' && last - first > 1)) return false;
  const auto [end, error] = std::from_chars(first, last, index);
  if (error != std::errc() || end != last) return false;
  prefix = name.substr(0, at);
  return true;
}

/// Groups of names "<prefix>/part_<i>" whose indices are exactly 0..k-1, by prefix.
template <class T>
std::map<std::string, std::vector<T>> shard_groups(const std::map<std::string, T>& named) {
  std::map<std::string, std::map<std::int64_t, T>> found;
  for (const auto& [name, item] : named) {
    std::string prefix;
    std::int64_t index = 0;
    if (split_shard_name(name, prefix, index)) found[prefix].emplace(index, item);
  }
  std::map<std::string, std::vector<T>> groups;
  for (auto& [prefix, parts] : found) {
    if (parts.rbegin()->first != static_cast<std::int64_t>(parts.size()) - 1) continue;
    for (auto& [index, item] : parts) groups[prefix].push_back(item);
  }
  return groups;
}
}  // namespace

void reshard_partitioned(const VariableStore& store, std::map<std::string, Tensor>& values,
                         const char* op, const std::string& file) {
  std::map<std::string, Variable> variables;
  for (const Variable& v : store.variables()) variables.emplace(v.name(), v);
  const auto stored = shard_groups(values);
  for (const auto& [prefix, shards] : shard_groups(variables)) {
    const auto it = stored.find(prefix);
    if (it == stored.end()) continue;
    const std::vector<Tensor>& parts = it->second;
    bool same = parts.size() == shards.size();
    for (std::size_t i = 0; same && i < parts.size(); ++i)
      same = parts[i].shape() == shards[i].shape() && parts[i].dtype() == shards[i].dtype();
    if (same) continue;
    std::int64_t rows = 0, file_rows = 0;
    for (const Variable& s : shards) rows += s.shape()[0];
    for (const Tensor& p : parts) {
      const Shape& a = p.shape();
      const Shape& b = shards[0].shape();
      if (p.dtype() != shards[0].dtype() || a.size() != b.size() || a.empty() ||
          !std::equal(a.begin() + 1, a.end(), b.begin() + 1))
        fail(op, "{}: the shards of '{}' in the file ({} {}) do not fit its shards ({} {})", file,
             prefix, dtype_name(p.dtype()), a, dtype_name(shards[0].dtype()), b);
      file_rows += a[0];
    }
    if (file_rows != rows)
      fail(op, "{}: the {} shards of '{}' in the file hold {} rows; the variable has {}", file,
           parts.size(), prefix, file_rows, rows);
    const Tensor whole = parts.size() == 1 ? parts[0] : concat(parts, 0);
    for (std::size_t j = 0; j < parts.size(); ++j)
      values.erase(shard_name(prefix, static_cast<std::int64_t>(j)));
    std::int64_t row = 0;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const std::int64_t n = shards[i].shape()[0];
      values[shards[i].name()] = slice(whole, 0, row, row + n).contiguous();
      row += n;
    }
  }
}

}  // namespace detail

}  // namespace kiln

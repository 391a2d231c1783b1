// Named collections of variables (TensorFlow's tf.add_to_collection / tf.get_collection, e.g. a
// MODEL_VARIABLES list that a model keeps beside its trainable ones). They observe: entries are
// weak references, so a collection never keeps a variable or its memory alive.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/fail.hpp"
#include "kiln/variable_store.hpp"
#include "state/names.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

namespace {

/// Collection name -> its entries, in the order they were added.
using Collections = std::map<std::string, std::vector<std::weak_ptr<VariableImpl>>, std::less<>>;

std::mutex collections_mutex;
Collections& collections() {
  static auto* map = new Collections;
  return *map;
}

}  // namespace

void clear_collections() {
  Collections dropped;  // released after the lock
  std::lock_guard lock(collections_mutex);
  dropped.swap(collections());
}

}  // namespace detail

void add_to_collection(std::string_view collection, const Variable& variable) {
  detail::check_name("add_to_collection", "collection name", collection, /*allow_slash*/ true);
  if (!variable.defined())
    detail::fail("add_to_collection", "{}: empty Variable handle", collection);
  std::lock_guard lock(detail::collections_mutex);
  auto& entries = detail::collections()[std::string(collection)];
  std::erase_if(entries, [](const auto& weak) { return weak.expired(); });
  const auto& impl = variable.impl();
  for (const auto& weak : entries)  // once per collection (compared without a strong handle)
    if (!weak.owner_before(impl) && !impl.owner_before(weak)) return;
  entries.emplace_back(variable.impl());
}

std::vector<Variable> get_collection(std::string_view collection, std::string_view scope_prefix) {
  std::vector<std::weak_ptr<detail::VariableImpl>> entries;
  {
    std::lock_guard lock(detail::collections_mutex);
    const auto it = detail::collections().find(collection);
    if (it == detail::collections().end()) return {};
    entries = it->second;
  }
  std::vector<Variable> out;  // handles are made and dropped outside the lock
  for (const auto& weak : entries)
    if (auto strong = weak.lock(); strong && detail::path_has_prefix(strong->name, scope_prefix))
      out.emplace_back(std::move(strong));
  return out;
}

}  // namespace kiln

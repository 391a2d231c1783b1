#include "state/deferred_restore.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace kiln::detail {

namespace {

struct Pending {
  std::uint64_t owner = 0;
  std::string key;
  Tensor value;
};

std::mutex pending_mutex;
std::map<std::string, Pending>& pending_by_name() {
  static auto* pending = new std::map<std::string, Pending>;
  return *pending;
}

}  // namespace

std::uint64_t new_restore_owner() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

void defer_restore(std::uint64_t owner, const std::string& full_name, std::string key,
                   Tensor value) {
  std::lock_guard lock(pending_mutex);
  pending_by_name()[full_name] = Pending{owner, std::move(key), std::move(value)};
}

std::optional<Tensor> take_deferred_restore(const std::string& full_name) {
  std::lock_guard lock(pending_mutex);
  auto& pending = pending_by_name();
  if (pending.empty()) return std::nullopt;
  auto it = pending.find(full_name);
  if (it == pending.end()) return std::nullopt;
  Tensor value = std::move(it->second.value);
  pending.erase(it);
  return value;
}

std::vector<std::string> pending_restores(std::uint64_t owner) {
  std::lock_guard lock(pending_mutex);
  std::vector<std::string> keys;
  for (const auto& [name, p] : pending_by_name())
    if (p.owner == owner) keys.push_back(p.key);
  return keys;
}

void drop_deferred_restores(std::uint64_t owner) {
  std::lock_guard lock(pending_mutex);
  auto& pending = pending_by_name();
  for (auto it = pending.begin(); it != pending.end();)
    it = it->second.owner == owner ? pending.erase(it) : std::next(it);
}

}  // namespace kiln::detail

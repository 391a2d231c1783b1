#pragma once
// Values restored from a checkpoint before their variables exist (layers that build lazily):
// queued by the variable's full name and used as the initial value when it is created.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::detail {

/// A new owner id (checkpoints and modules that queue values each take one).
std::uint64_t new_restore_owner();
/// Queues `value` for the variable that will be named `full_name`; `owner` identifies the
/// checkpoint, `key` is how it names the value in messages.
void defer_restore(std::uint64_t owner, const std::string& full_name, std::string key,
                   Tensor value);
/// The queued value for a variable being created as `full_name`, removed from the queue.
std::optional<Tensor> take_deferred_restore(const std::string& full_name);
/// Keys of the values `owner` queued that are still waiting.
std::vector<std::string> pending_restores(std::uint64_t owner);
/// Drops every value `owner` queued.
void drop_deferred_restores(std::uint64_t owner);

}  // namespace kiln::detail

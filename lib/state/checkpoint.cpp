// kiln::Checkpoint: named modules and variables saved to numbered safetensors files, restored
// all or nothing, with values for not-yet-created variables queued (deferred restore).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/fail.hpp"
#include "io/elements.hpp"
#include "io/weights_file.hpp"
#include "kiln/checkpoint.hpp"
#include "state/deferred_restore.hpp"
#include "state/partitioned.hpp"
#include "state/weights.hpp"

namespace kiln {

namespace {

constexpr std::string_view checkpoint_suffix = ".safetensors";
/// The highest checkpoint number, 18 nines: every number of 1 to 18 digits fits below it.
constexpr std::uint64_t max_checkpoint_number = 999'999'999'999'999'999;
constexpr std::size_t max_checkpoint_digits = 18;

/// The number in a checkpoint name, when `digits` is one kiln writes: 1 to 18 decimal digits
/// without a leading zero. Anything else (0, 007, 1a, +5, a 20-digit number) is not kiln's.
std::optional<std::uint64_t> checkpoint_number(std::string_view digits) {
  if (digits.empty() || digits.size() > max_checkpoint_digits || digits.front() == '0')
    return std::nullopt;
  std::uint64_t n = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n;
}

/// The checkpoint files of a prefix by number: names "<prefix>-<n>.safetensors" in its folder
/// whose n is a number kiln writes. Other names are not kiln's and are ignored.
std::map<std::uint64_t, std::filesystem::path> numbered_files(const std::filesystem::path& prefix) {
  std::map<std::uint64_t, std::filesystem::path> files;
  std::filesystem::path dir = prefix.parent_path();
  if (dir.empty()) dir = ".";
  const std::string stem = prefix.filename().string() + "-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= stem.size() + checkpoint_suffix.size() || !name.starts_with(stem) ||
        !name.ends_with(checkpoint_suffix))
      continue;
    const std::string_view digits = std::string_view(name).substr(
        stem.size(), name.size() - stem.size() - checkpoint_suffix.size());
    if (const auto n = checkpoint_number(digits)) files.emplace(*n, entry.path());
  }
  return files;
}

/// The full variable name that `path` names in `module`: rooted at the module's name
/// ("net/l1/kernel", as named_variables and save give) or relative to it ("l1/kernel"). The
/// module's path may carry a name scope in front of its own name.
std::string full_name(const Module& module, const std::string& path) {
  const std::string module_path = module.path();
  if (!path.starts_with(module.name() + "/")) return module_path + "/" + path;
  const std::size_t slash = module_path.rfind('/');
  return slash == std::string::npos ? path : module_path.substr(0, slash + 1) + path;
}

/// Whether two tensors of one dtype and shape hold the same bytes.
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const auto bytes = static_cast<std::size_t>(ca.size()) * dtype_size(ca.dtype());
  return bytes == 0 || std::memcmp(ca.data(), cb.data(), bytes) == 0;
}

}  // namespace

struct Checkpoint::State {
  std::uint64_t id = detail::new_restore_owner();
  Objects objects;
  std::vector<std::pair<std::string, Variable>> variables;
  const VariableStore* store = nullptr;  // track_store's
  CheckpointOptions options;
  /// The number this checkpoint last saved under each prefix (absolute, normalized), so that
  /// its numbering never goes back even when files are removed between saves.
  std::map<std::string, std::uint64_t> last_saved;

  /// Made by Checkpoint(Module&): one object without a name, whose paths are the keys.
  bool rooted() const { return objects.size() == 1 && objects.front().first.empty(); }
};

Checkpoint::Checkpoint(Objects objects, CheckpointOptions options)
    : state_(std::make_unique<State>()) {
  std::set<std::string> names;
  for (const auto& [name, module] : objects) {
    if (module == nullptr) detail::fail("Checkpoint", "object '{}' is a null module", name);
    if (name.empty() || name.find('/') != std::string::npos)
      detail::fail("Checkpoint", "object name '{}' must be non-empty and contain no '/'", name);
    if (!names.insert(name).second) detail::fail("Checkpoint", "object name '{}' repeats", name);
  }
  if (options.keep_last < 0)
    detail::fail("Checkpoint", "keep_last is {}; use 0 to keep every file", options.keep_last);
  state_->objects = std::move(objects);
  state_->options = options;
}

Checkpoint::Checkpoint(Module& module, CheckpointOptions options)
    : Checkpoint(Objects{{"model", &module}}, options) {
  state_->objects.front().first.clear();  // one unnamed object: keys are its variable paths
}

Checkpoint::~Checkpoint() { detail::drop_deferred_restores(state_->id); }

Checkpoint& Checkpoint::track(const std::string& name, const Variable& variable) {
  if (!variable.defined()) detail::fail("Checkpoint.track", "'{}' is an empty Variable", name);
  if (name.empty() || name.find('/') != std::string::npos)
    detail::fail("Checkpoint.track", "name '{}' must be non-empty and contain no '/'", name);
  for (const auto& [object, module] : state_->objects)
    if (object == name) detail::fail("Checkpoint.track", "name '{}' is already an object", name);
  for (const auto& [tracked, v] : state_->variables)
    if (tracked == name) detail::fail("Checkpoint.track", "name '{}' is already tracked", name);
  state_->variables.emplace_back(name, variable);
  return *this;
}

std::filesystem::path Checkpoint::latest(const std::filesystem::path& prefix) {
  // The highest number, whatever it names: restoring an older file instead of a newest one
  // that cannot be read (a folder, a FIFO) would silently load stale values.
  const auto files = numbered_files(prefix);
  return files.empty() ? std::filesystem::path() : files.rbegin()->second;
}

Checkpoint& Checkpoint::track_store(const VariableStore& store) {
  if (state_->rooted())
    detail::fail("Checkpoint.track_store",
                 "this checkpoint's keys are one module's variable paths, which a store's full "
                 "names could collide with; name the module: Checkpoint({{\"model\", &m}})");
  state_->store = &store;
  return *this;
}

std::filesystem::path Checkpoint::save(const std::filesystem::path& prefix) {
  constexpr const char* op = "Checkpoint.save";
  detail::refuse_while_tracing(op);
  std::map<std::string, Tensor> values;
  for (const auto& [object, module] : state_->objects)
    for (const auto& [path, v] :
         object.empty() ? detail::relative_variables(*module) : module->named_variables())
      values[object.empty() ? path : object + "/" + path] = v.value();
  for (const auto& [name, v] : state_->variables) values[name] = v.value();
  if (state_->store != nullptr)
    for (const Variable& v : state_->store->variables()) {
      const std::string object = v.name().substr(0, v.name().find('/'));
      const bool clashes = values.count(v.name()) != 0 ||
                           std::any_of(state_->objects.begin(), state_->objects.end(),
                                       [&](const auto& o) { return o.first == object; });
      if (clashes)
        detail::fail(op,
                     "the store's variable '{}' would share its key with an object or tracked "
                     "variable of this checkpoint (name one of them differently); nothing was "
                     "saved",
                     v.name());
      values[v.name()] = v.value();
    }
  if (!prefix.parent_path().empty()) std::filesystem::create_directories(prefix.parent_path());
  auto files = numbered_files(prefix);
  std::error_code no_cwd;
  std::filesystem::path absolute = std::filesystem::absolute(prefix, no_cwd);
  if (no_cwd) absolute = prefix;
  const std::string key = absolute.lexically_normal().string();
  std::uint64_t previous = files.empty() ? 0 : files.rbegin()->first;
  if (const auto saved = state_->last_saved.find(key); saved != state_->last_saved.end())
    previous = std::max(previous, saved->second);
  if (previous >= max_checkpoint_number)
    detail::fail(op,
                 "{}-{}{}: checkpoint numbers end at {}; move the checkpoints of '{}' away or "
                 "save under another prefix",
                 prefix.string(), previous, checkpoint_suffix, max_checkpoint_number,
                 prefix.string());
  const std::uint64_t n = previous + 1;
  const std::filesystem::path file = prefix.string() + fmt::format("-{}{}", n, checkpoint_suffix);
  io::save_safetensors(file, values, {{"format", "kiln-checkpoint"}});
  state_->last_saved[key] = n;
  files[n] = file;
  // The oldest go first; n is the highest number, so the file just written always stays.
  const auto keep = static_cast<std::size_t>(state_->options.keep_last);
  while (keep > 0 && files.size() > keep && files.begin()->first != n) {
    std::error_code ec;
    std::filesystem::remove(files.begin()->second, ec);
    files.erase(files.begin());
  }
  return file;
}

std::filesystem::path Checkpoint::restore(const std::filesystem::path& prefix) {
  return restore(prefix, RestoreOptions{}).file;
}

RestoreResult Checkpoint::restore(const std::filesystem::path& prefix,
                                  const RestoreOptions& options) {
  constexpr const char* op = "Checkpoint.restore";
  RestoreResult result;
  detail::refuse_while_tracing(op);
  const std::filesystem::path file = detail::checkpoint_file(prefix, op);
  result.file = file;
  const std::map<std::string, Tensor> stored = io::detail::read_weights_file(file, op);
  std::map<std::string, Tensor> values;
  if (options.key_map) {
    for (const auto& [key, value] : stored) {
      std::string mapped = options.key_map(key);
      if (mapped.empty()) {
        result.skipped.push_back(key);
        continue;
      }
      if (!values.emplace(mapped, value).second)
        detail::fail(op, "{}: two keys map to '{}'; nothing was restored", file.string(),
                     io::detail::printable(mapped));
    }
  } else {
    values = stored;
  }
  // Partitioned variables of the store take files written with another shard count.
  if (state_->store != nullptr)
    detail::reshard_partitioned(*state_->store, values, op, file.string());
  std::set<std::uint64_t> selected;  // var_list's ids
  for (const Variable& v : options.var_list) {
    if (!v.defined()) detail::fail(op, "var_list holds an empty Variable handle");
    selected.insert(v.id());
  }

  // Validate every key first; assign (or queue) only when all of them are usable.
  std::vector<std::pair<Variable, Tensor>> assignments;
  struct Deferred {
    std::string full_name, key;
    Tensor value;
  };
  std::vector<Deferred> deferred;
  std::vector<std::string> problems;
  // Every variable takes one value. One object can name a variable by two keys (a path rooted
  // at the module's name and one relative to it): that is an error. A variable that two
  // objects share (a layer in two models, a tracked variable of a module) is saved under both
  // names; that is fine as long as the values agree.
  struct Claim {
    std::string key, owner;
    Tensor value;
  };
  std::map<std::uint64_t, Claim> claimed;             // by Variable::id()
  std::map<std::string, std::string> deferred_names;  // full name -> key
  for (const auto& entry : values) {
    const std::string& key = entry.first;  // not a structured binding: lambdas capture it
    const Tensor& value = entry.second;
    // A rooted checkpoint's keys are all its module's paths; else the first component names
    // the object.
    const bool rooted = state_->rooted();
    const std::size_t slash = rooted ? 0 : key.find('/');
    const std::string object = rooted ? std::string() : key.substr(0, slash);
    auto tracked = std::find_if(state_->variables.begin(), state_->variables.end(),
                                [&](const auto& p) { return p.first == key; });
    Variable target;
    auto owner = std::find_if(state_->objects.begin(), state_->objects.end(),
                              [&](const auto& p) { return p.first == object; });
    if (tracked == state_->variables.end() && state_->store != nullptr &&
        (owner == state_->objects.end() || slash == std::string::npos)) {
      // A store variable, by its full name: assigned if the store has it, else queued.
      target = state_->store->find(key);
      if (!target.defined()) {
        if (!selected.empty()) {
          result.skipped.push_back(key);
          continue;
        }
        if (deferred_names.emplace(key, key).second) {
          deferred.push_back({key, key, value});
          result.deferred.push_back(key);
        }
        continue;
      }
    } else if (tracked != state_->variables.end()) {
      target = tracked->second;
    } else {
      if (owner == state_->objects.end() || (!rooted && slash == std::string::npos)) {
        if (options.strict)
          problems.push_back(fmt::format("'{}' belongs to no object of this checkpoint",
                                         io::detail::printable(key)));
        else
          result.unused.push_back(key);
        continue;
      }
      const std::string path = rooted ? owner->second->name() + "/" + key : key.substr(slash + 1);
      const Module& module = *owner->second;
      if (!module.has_variable(path)) {
        if (!selected.empty()) {  // not created yet, so not in var_list
          result.skipped.push_back(key);
          continue;
        }
        std::string name = full_name(module, path);
        const auto [earlier, fresh] = deferred_names.emplace(name, key);
        if (!fresh) {
          problems.push_back(
              fmt::format("'{}' and '{}' both name the variable '{}' (not created "
                          "yet) of object '{}'",
                          io::detail::printable(earlier->second), io::detail::printable(key),
                          io::detail::printable(name), io::detail::printable(object)));
          continue;
        }
        deferred.push_back({std::move(name), key, value});
        result.deferred.push_back(key);
        continue;
      }
      target = module.variable(path);
    }
    if (!selected.empty() && selected.count(target.id()) == 0) {
      result.skipped.push_back(key);
      continue;
    }
    const std::string claimant = tracked != state_->variables.end() ? key : object;
    if (const auto earlier = claimed.find(target.id()); earlier != claimed.end()) {
      const Claim& first = earlier->second;
      if (first.owner == claimant)
        problems.push_back(fmt::format("'{}' and '{}' both name the variable '{}' of object '{}'",
                                       io::detail::printable(first.key), io::detail::printable(key),
                                       target.name(), io::detail::printable(claimant)));
      else if (!same_bytes(first.value, value))
        problems.push_back(fmt::format(
            "'{}' and '{}' name one variable ('{}') with different "
            "values",
            io::detail::printable(first.key), io::detail::printable(key), target.name()));
      continue;  // an agreeing alias: the first key assigns it
    }
    claimed.emplace(target.id(), Claim{key, claimant, value});
    if (target.dtype() != value.dtype() || target.shape() != value.shape()) {
      if (options.strict)
        problems.push_back(fmt::format("'{}' is {} {} in the file but {} {} in the model",
                                       io::detail::printable(key), dtype_name(value.dtype()),
                                       value.shape().to_string(), dtype_name(target.dtype()),
                                       target.shape().to_string()));
      else
        result.mismatched.push_back(fmt::format("{}: file {} {}, variable {} {}", key,
                                                dtype_name(value.dtype()), value.shape(),
                                                dtype_name(target.dtype()), target.shape()));
      continue;
    }
    assignments.emplace_back(target, value);
    result.assigned.push_back(key);
  }
  if (!problems.empty()) {
    // A hostile file may hold millions of keys: list the first few problems.
    constexpr std::size_t listed = 20;
    const std::size_t more = problems.size() > listed ? problems.size() - listed : 0;
    problems.resize(problems.size() - more);
    if (more > 0) problems.push_back(fmt::format("... and {} more", more));
    detail::fail(op, "{}: nothing was restored:\n  {}", file.string(), fmt::join(problems, "\n  "));
  }
  // The report's missing variables: existing ones (var_list's only, when given) of the objects,
  // the tracked ones and the store's that took no value.
  const auto missed = [&](const Variable& v) {
    return (selected.empty() || selected.count(v.id()) != 0) && claimed.count(v.id()) == 0;
  };
  for (const auto& [object, module] : state_->objects)
    for (const auto& [path, v] :
         object.empty() ? detail::relative_variables(*module) : module->named_variables())
      if (missed(v)) result.missing.push_back(object.empty() ? path : object + "/" + path);
  for (const auto& [name, v] : state_->variables)
    if (missed(v)) result.missing.push_back(name);
  if (state_->store != nullptr)
    for (const Variable& v : state_->store->variables())
      if (missed(v)) result.missing.push_back(v.name());
  detail::drop_deferred_restores(state_->id);
  for (auto& [v, value] : assignments) v.assign(value);
  for (Deferred& d : deferred)
    detail::defer_restore(state_->id, d.full_name, std::move(d.key), std::move(d.value));
  return result;
}

std::vector<std::string> Checkpoint::pending() const {
  return detail::pending_restores(state_->id);
}

void Checkpoint::assert_consumed() const {
  const std::vector<std::string> waiting = pending();
  if (!waiting.empty())
    detail::fail("Checkpoint",
                 "{} restored values were never used (their variables were not "
                 "created): {}",
                 waiting.size(), fmt::join(waiting, ", "));
}

}  // namespace kiln

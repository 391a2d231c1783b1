// kiln::Checkpoint: named modules and variables saved to numbered safetensors files, restored
// all or nothing, with values for not-yet-created variables queued (deferred restore).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <set>

#include "core/fail.hpp"
#include "kiln/checkpoint.hpp"
#include "state/deferred_restore.hpp"

namespace kiln {

namespace detail {
std::map<std::string, Tensor> read_weights_file(const std::filesystem::path& path);
void refuse_while_tracing(const char* op);
}  // namespace detail

namespace {

std::atomic<std::uint64_t> next_checkpoint_id{1};

/// "<prefix>-<n>.safetensors" files of a prefix, by n.
std::map<std::uint64_t, std::filesystem::path> numbered_files(const std::filesystem::path& prefix) {
  std::map<std::uint64_t, std::filesystem::path> files;
  std::filesystem::path dir = prefix.parent_path();
  if (dir.empty()) dir = ".";
  const std::string stem = prefix.filename().string() + "-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".safetensors";
    if (name.size() <= stem.size() + suffix.size() || name.compare(0, stem.size(), stem) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const char* first = name.data() + stem.size();
    const char* last = name.data() + name.size() - suffix.size();
    std::uint64_t n = 0;
    auto [end, err] = std::from_chars(first, last, n);
    if (err == std::errc() && end == last) files.emplace(n, entry.path());
  }
  return files;
}

/// The full variable name that `path` (rooted at module's name, as named_variables gives)
/// has: the module's path may carry a name scope in front of its own name.
std::string full_name(const Module& module, const std::string& path) {
  const std::string module_path = module.path();
  const std::size_t slash = module_path.rfind('/');
  return slash == std::string::npos ? path : module_path.substr(0, slash + 1) + path;
}

}  // namespace

struct Checkpoint::State {
  std::uint64_t id = next_checkpoint_id.fetch_add(1);
  Objects objects;
  std::vector<std::pair<std::string, Variable>> variables;
  CheckpointOptions options;
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
  const auto files = numbered_files(prefix);
  return files.empty() ? std::filesystem::path() : files.rbegin()->second;
}

std::filesystem::path Checkpoint::save(const std::filesystem::path& prefix) {
  detail::refuse_while_tracing("Checkpoint.save");
  std::map<std::string, Tensor> values;
  for (const auto& [object, module] : state_->objects)
    for (const auto& [path, v] : module->named_variables())
      values[object + "/" + path] = v.value();
  for (const auto& [name, v] : state_->variables) values[name] = v.value();
  if (!prefix.parent_path().empty()) std::filesystem::create_directories(prefix.parent_path());
  auto files = numbered_files(prefix);
  const std::uint64_t n = files.empty() ? 1 : files.rbegin()->first + 1;
  const std::filesystem::path file = prefix.string() + fmt::format("-{}.safetensors", n);
  io::save_safetensors(file, values, {{"format", "kiln-checkpoint"}});
  files.emplace(n, file);
  const auto keep = static_cast<std::size_t>(state_->options.keep_last);
  while (keep > 0 && files.size() > keep) {
    std::error_code ec;
    std::filesystem::remove(files.begin()->second, ec);
    files.erase(files.begin());
  }
  return file;
}

std::filesystem::path Checkpoint::restore(const std::filesystem::path& prefix) {
  constexpr const char* op = "Checkpoint.restore";
  detail::refuse_while_tracing(op);
  std::filesystem::path file = prefix;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(prefix, ec)) {
    file = latest(prefix);
    if (file.empty())
      detail::fail(op, "no checkpoint '{}' and no files '{}-<n>.safetensors'", prefix.string(),
                   prefix.string());
  }
  const std::map<std::string, Tensor> values = detail::read_weights_file(file);

  // Validate every key first; assign (or queue) only when all of them are usable.
  std::vector<std::pair<Variable, Tensor>> assignments;
  struct Deferred {
    std::string full_name, key;
    Tensor value;
  };
  std::vector<Deferred> deferred;
  std::vector<std::string> problems;
  for (const auto& entry : values) {
    const std::string& key = entry.first;  // not a structured binding: lambdas capture it
    const Tensor& value = entry.second;
    const std::size_t slash = key.find('/');
    const std::string object = key.substr(0, slash);
    auto tracked = std::find_if(state_->variables.begin(), state_->variables.end(),
                                [&](const auto& p) { return p.first == key; });
    Variable target;
    if (tracked != state_->variables.end()) {
      target = tracked->second;
    } else {
      auto owner = std::find_if(state_->objects.begin(), state_->objects.end(),
                                [&](const auto& p) { return p.first == object; });
      if (owner == state_->objects.end() || slash == std::string::npos) {
        problems.push_back(fmt::format("'{}' belongs to no object of this checkpoint", key));
        continue;
      }
      const std::string path = key.substr(slash + 1);
      const Module& module = *owner->second;
      if (!module.has_variable(path)) {
        deferred.push_back({full_name(module, path), key, value});
        continue;
      }
      target = module.variable(path);
    }
    if (target.dtype() != value.dtype() || target.shape() != value.shape()) {
      problems.push_back(fmt::format("'{}' is {} {} in the file but {} {} in the model", key,
                                     dtype_name(value.dtype()), value.shape().to_string(),
                                     dtype_name(target.dtype()), target.shape().to_string()));
      continue;
    }
    assignments.emplace_back(target, value);
  }
  if (!problems.empty())
    detail::fail(op, "{}: nothing was restored:\n  {}", file.string(),
                 fmt::join(problems, "\n  "));
  detail::drop_deferred_restores(state_->id);
  for (auto& [v, value] : assignments) v.assign(value);
  for (Deferred& d : deferred)
    detail::defer_restore(state_->id, d.full_name, std::move(d.key), std::move(d.value));
  return file;
}

std::vector<std::string> Checkpoint::pending() const {
  return detail::pending_restores(state_->id);
}

void Checkpoint::assert_consumed() const {
  const std::vector<std::string> waiting = pending();
  if (!waiting.empty())
    detail::fail("Checkpoint", "{} restored values were never used (their variables were not "
                 "created): {}",
                 waiting.size(), fmt::join(waiting, ", "));
}

}  // namespace kiln

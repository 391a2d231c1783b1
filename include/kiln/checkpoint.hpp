#pragma once
/// @file checkpoint.hpp
/// Saving and loading a model's weights by variable path, and checkpoints of several objects
/// (models, optimizers, counters) with deferred restore.
///
/// Loading assigns values to the existing variables in place: no graph nodes, no retrace, no
/// new variables, no lasting memory. A kiln::function that reads the variables sees the new
/// values on its next call.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/module.hpp"
#include "kiln/variable.hpp"
#include "kiln/variable_store.hpp"

namespace kiln {

/// Writes every variable of `module` to a file, keyed by its path relative to the module
/// (`l1/kernel` for the variable `net/l1/kernel` of a module `net`, like a PyTorch
/// state_dict), so the module's own name never decides whether the file loads into another
/// instance. The format follows the extension: `.npz` writes NumPy's archive, anything else
/// safetensors. The write is atomic.
void save_weights(const Module& module, const std::filesystem::path& path,
                  const io::Metadata& metadata = {});

struct LoadWeightsOptions {
  /// Every variable must be in the file and every key of the file must be a variable, with
  /// matching dtype and shape; otherwise one error lists every problem and nothing changes.
  /// When false, what matches is loaded and the rest is reported in LoadWeightsResult.
  bool strict = true;
  /// Maps a key of the file to a variable path relative to the module (for weights named by
  /// another framework, e.g. "encoder.layer.0.weight" -> "l1/kernel"; a path rooted at the
  /// module's name, "net/l1/kernel", is found too). Return an empty string to skip a key. The
  /// identity when unset.
  std::function<std::string(const std::string&)> key_map = nullptr;
  /// Converts a value before it is checked and assigned, given its file key (e.g. transpose
  /// PyTorch's Linear weights, stored [out, in], into kiln's [in, out] kernels).
  std::function<Tensor(const std::string& key, const Tensor& value)> transform = nullptr;
};

struct LoadWeightsResult {
  std::vector<std::string> loaded;      ///< variable paths (relative) assigned
  std::vector<std::string> missing;     ///< variable paths (relative) the file did not provide
  std::vector<std::string> unexpected;  ///< file keys (after key_map) that are no variable
  std::vector<std::string> mismatched;  ///< "path: file f32 [3,4], variable f32 [4,3]"
  /// Variable paths (relative) whose values wait for variables not created yet: the module
  /// had none (it is not built), so every value is queued under the name its variable will
  /// have and becomes that variable's initial value when the layer creates it (dtype and shape
  /// must match then). Loading again replaces the queue; it is dropped with the module.
  std::vector<std::string> deferred;
};

/// Assigns the values in `path` (safetensors, .npz or .npy detected from the file) to the
/// variables of `module` by their paths relative to it. A file written before keys were
/// relative (every key rooted at the saving module's name, "sequential_1/dense/kernel") loads
/// too: without a key_map, a first component shared by every key and by none of the module's
/// paths is dropped. Validates everything before assigning anything; with strict options any
/// problem is an error that lists them all and changes nothing. Into a module with no variables
/// yet (not built), the values are deferred by path instead (LoadWeightsResult::deferred). Cannot
/// be called while a function is being traced.
LoadWeightsResult load_weights(Module& module, const std::filesystem::path& path,
                               const LoadWeightsOptions& options = {});

/// The tensors a weights or checkpoint file holds (names, dtypes, shapes, from the headers
/// only: TensorFlow's tf.train.list_variables). `path` is a safetensors, .npz or .npy file, or a
/// Checkpoint prefix, whose newest file is read. A kiln::Error when there is neither.
std::vector<io::TensorInfo> list_variables(const std::filesystem::path& path);
/// One tensor of such a file (or of a prefix's newest checkpoint) by its key, reading only its
/// bytes (tf.train.load_variable). A kiln::Error naming the file when the key is not in it.
Tensor load_variable(const std::filesystem::path& path, const std::string& name);

/// How Checkpoint::restore(prefix, options) reads a file (TensorFlow's Saver(var_list) and
/// restore(...).expect_partial()).
struct RestoreOptions {
  /// Restore only these variables; keys for any other variable are skipped (reported as
  /// `skipped`). Empty: every variable of the checkpoint's objects.
  std::vector<Variable> var_list = {};
  /// When true, a key that belongs to no object or whose dtype or shape differs from its
  /// variable is an error and nothing is restored (as restore(prefix) does). When false they
  /// are reported and everything else is restored.
  bool strict = true;
  /// Maps a key of the file to a checkpoint key ("<object>/<variable path>") before it is
  /// looked up; an empty result skips the key. The identity when unset.
  std::function<std::string(const std::string&)> key_map = nullptr;
};

/// What Checkpoint::restore(prefix, options) did.
struct RestoreResult {
  std::filesystem::path file;           ///< the checkpoint file read
  std::vector<std::string> assigned;    ///< keys assigned to existing variables
  std::vector<std::string> deferred;    ///< keys queued for variables not created yet
  std::vector<std::string> skipped;     ///< keys left out by var_list or the key map
  std::vector<std::string> unused;      ///< keys that belong to no object (strict = false)
  std::vector<std::string> mismatched;  ///< "key: file f32 [3], variable f32 [4]" (strict = false)
  /// Keys ("<object>/<variable path>", or a tracked name) of existing variables (var_list's,
  /// when given) that the file gave no value; a mismatched one is listed under `mismatched`.
  std::vector<std::string> missing;
};

struct CheckpointOptions {
  /// Checkpoint files kept by save(): older ones are deleted (0 keeps all).
  int keep_last = 5;
};

/// A set of named objects saved and restored together: modules (a model, an optimizer whose
/// slots are variables) and single variables (a step counter). File keys are
/// "<object name>/<variable path>".
///
/// save(prefix) writes "<prefix>-<n>.safetensors" with n counting up from the newest existing
/// file, atomically, and keeps the last `keep_last` files. restore(prefix) reads the newest
/// such file (or `prefix` itself when it is a file). Only names whose n has 1 to 18 decimal
/// digits and no leading zero are checkpoint files; others are ignored, and numbering never
/// wraps (save throws past 999999999999999999). See docs/checkpoints.md. Values whose variables do
/// not exist yet (layers that build on their first call) are queued by path and assigned when the
/// variables are created; assert_consumed() throws if any queued value is still waiting.
class Checkpoint {
 public:
  using Objects = std::vector<std::pair<std::string, Module*>>;
  explicit Checkpoint(Objects objects, CheckpointOptions options = {});
  /// A checkpoint of one module tree whose keys are its variable paths ("dense/kernel",
  /// relative to `module`, as save_weights writes them), with no object name in front; restore
  /// defers by path as above. track() adds variables beside it; track_store() is refused (a
  /// store's full names could collide with the paths).
  explicit Checkpoint(Module& module, CheckpointOptions options = {});
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  /// Also saves and restores `variable` under `name` (e.g. a step counter).
  Checkpoint& track(const std::string& name, const Variable& variable);
  /// Also saves and restores every variable of `store` (the default: kiln::get_variable's),
  /// each under its full name ("layer1/w"): a TF1-style model built with get_variable needs no
  /// track() per variable. Each save takes the store's variables of that moment; a restore
  /// assigns the ones the store holds and queues the other keys (no object's) by name until
  /// get_variable creates them (pending() and assert_consumed() see them). A store variable
  /// whose name is also another key of the checkpoint is an error at save. The store must
  /// outlive the checkpoint.
  Checkpoint& track_store(const VariableStore& store = default_variable_store());

  /// Writes a new checkpoint file, numbered one above the highest of the folder's checkpoint
  /// files and of this checkpoint's last save to `prefix`; returns its path (which keep_last
  /// never deletes). Throws, writing nothing, when that number would pass the limit.
  std::filesystem::path save(const std::filesystem::path& prefix);
  /// Restores from the newest checkpoint of `prefix` (or the file `prefix`). Every key must
  /// belong to a tracked object and match dtype and shape where the variable exists, and no
  /// two keys may give one variable different values (or, within one object, name it twice);
  /// otherwise nothing changes. Returns the file read.
  std::filesystem::path restore(const std::filesystem::path& prefix);
  /// restore(prefix) steered by `options` (a subset of variables, partial files, renamed keys),
  /// with a report of what was assigned, queued, skipped, unused, mismatched and missing.
  /// Validation still comes first: nothing changes when a strict check fails or two keys give
  /// one variable different values.
  RestoreResult restore(const std::filesystem::path& prefix, const RestoreOptions& options);
  /// The newest checkpoint file of `prefix`, or an empty path when there is none.
  static std::filesystem::path latest(const std::filesystem::path& prefix);

  /// Paths ("model/net/l2/kernel") of restored values still waiting for their variables.
  std::vector<std::string> pending() const;
  /// Throws, listing them, if restored values are still waiting for their variables.
  void assert_consumed() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln

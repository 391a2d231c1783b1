#pragma once
/// @file callbacks.hpp
/// Callbacks that steer train::fit (kiln::train), with Keras's semantics: TensorBoard,
/// ModelCheckpoint, EarlyStopping, LearningRateScheduler, CSVLogger, LambdaCallback, and the
/// Callback interface for your own.
///
/// ```cpp
/// kiln::train::TensorBoard tensorboard({.log_dir = "logs/run1", .histogram_freq = 1});
/// kiln::train::ModelCheckpoint best("best.safetensors", {.save_best_only = true});
/// kiln::train::EarlyStopping stop({.patience = 3, .restore_best_weights = true});
/// auto history = kiln::train::fit(model, optimizer, loss, x, y,
///     {.epochs = 50, .validation_split = 0.2, .callbacks = {tensorboard, best, stop}});
/// ```
///
/// Callbacks run eagerly between the steps, so they never retrace fit's traced step: a whole fit
/// with validation and any callbacks traces its train step once and its validation step once.
/// A callback's configuration is checked in on_train_begin, before the first step: a monitored
/// value that fit will not log, an unwritable folder or file, a schedule that cannot be set.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/function.hpp"
#include "kiln/module.hpp"
#include "kiln/optim.hpp"
#include "kiln/tensor.hpp"
#include "kiln/train.hpp"

namespace kiln::summary {
class FileWriter;
}

namespace kiln::train {

/// What a callback sees of the fit that runs it (Callback::fit()).
class FitState {
 public:
  Module& model;
  optim::Optimizer& optimizer;
  /// The history so far (the epochs before the current one).
  const History& history;
  /// The traced train step (forward, loss, backward and update), e.g. for its graph.
  const ConcreteFunction& train_function;
  int epochs = 0;
  std::int64_t steps_per_epoch = 0;
  /// Batches run so far in this fit (0 in on_train_begin).
  std::int64_t global_step = 0;
  bool has_validation = false;
  /// Set to true to stop after the current epoch (EarlyStopping does).
  bool stop_training = false;

  /// The keys of each epoch's logs ("loss", the metrics, "val_..." with validation,
  /// "learning_rate").
  const std::vector<std::string>& epoch_keys() const { return epoch_keys_; }
  /// Raises a kiln::Error from `who` when fit will not log `key` (naming the keys it will).
  void require_key(std::string_view who, std::string_view key) const;

  FitState(Module& model, optim::Optimizer& optimizer, const History& history,
           const ConcreteFunction& train_function, std::vector<std::string> epoch_keys)
      : model(model),
        optimizer(optimizer),
        history(history),
        train_function(train_function),
        epoch_keys_(std::move(epoch_keys)) {}

 private:
  std::vector<std::string> epoch_keys_;
};

namespace detail {
class CallbackList;
}

/// The interface: override the hooks you need. `epoch` and `batch` are 0-based (batch within
/// the epoch). Batch logs hold the epoch's running averages so far ("loss", the metrics);
/// epoch logs add the validation values and "learning_rate". An exception from a hook stops fit
/// and propagates (on_train_end is not called).
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const Logs& /*logs*/) {}
  virtual void on_train_end(const Logs& /*logs*/) {}
  virtual void on_epoch_begin(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_batch_begin(std::int64_t /*batch*/, const Logs& /*logs*/) {}
  virtual void on_batch_end(std::int64_t /*batch*/, const Logs& /*logs*/) {}
  /// Whether it writes files (TensorBoard, ModelCheckpoint, CSVLogger say yes): a distributed
  /// fit (FitOptions::distributed) runs such callbacks on rank 0 only, so one process writes.
  virtual bool writes_files() const { return false; }

 protected:
  /// The fit running this callback: valid from on_train_begin to on_train_end, else a
  /// kiln::Error.
  FitState& fit() const;

 private:
  friend class detail::CallbackList;
  FitState* state_ = nullptr;
};

/// min: lower is better; max: higher is better; automatic: max for a key containing "acc" or
/// "auc", min otherwise (Keras's rule).
enum class Mode { automatic, min, max };

struct TensorBoardOptions {
  /// Event files go to log_dir/train and, with validation, log_dir/validation (Keras's layout).
  std::filesystem::path log_dir = "logs";
  /// Histograms of every variable of the model every histogram_freq epochs (0: none), tagged
  /// by the variable's path.
  int histogram_freq = 0;
  /// The train step's graph, once, at the start of training.
  bool write_graph = true;
  /// 0: scalars per epoch only ("epoch_loss", "epoch_<metric>", "epoch_learning_rate"); N > 0:
  /// also "batch_loss" and "batch_<metric>" every N batches, at the global batch number.
  std::int64_t update_freq = 0;
};

/// Writes TensorBoard event files during fit (see kiln/summary.hpp).
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(TensorBoardOptions options = {});
  ~TensorBoard() override;
  void on_train_begin(const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  bool writes_files() const override { return true; }
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_batch_end(std::int64_t batch, const Logs& logs) override;

 private:
  void write_histograms(std::int64_t step);
  TensorBoardOptions options_;
  std::unique_ptr<summary::FileWriter> train_, validation_;
};

struct ModelCheckpointOptions {
  /// The value that decides "best" (with save_best_only).
  std::string monitor = "val_loss";
  /// Save only when the monitored value improved on the best so far.
  bool save_best_only = false;
  Mode mode = Mode::automatic;
  /// Save every save_freq epochs.
  int save_freq = 1;
  /// 1: a line per save.
  int verbose = 0;
};

/// Saves the model's weights (the file kiln::save_weights writes: safetensors, or .npz by
/// extension; atomic and fsynced) after epochs. The path may name the epoch (1-based) and logged
/// values in fmt's syntax: "ckpt/weights.{epoch:02d}-{val_loss:.3f}.safetensors"; missing
/// folders are created.
///
/// The values are taken at the epoch's end (tensors are immutable, so this copies nothing) and
/// written by a background thread while training goes on, as TensorFlow's asynchronous
/// checkpoints do: the disk's latency stays out of the epoch. One write is in flight at a
/// time; the next save and on_train_end wait for it and raise its error, so when fit returns
/// every file is complete.
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions options = {});
  ~ModelCheckpoint() override;
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  bool writes_files() const override { return true; }
  /// The best monitored value so far (save_best_only), and the files saved.
  double best() const { return best_; }
  const std::vector<std::filesystem::path>& saved() const { return saved_; }

 private:
  void wait_for_write();
  std::string filepath_;
  ModelCheckpointOptions options_;
  bool maximize_ = false;
  double best_ = 0;
  std::vector<std::filesystem::path> saved_;
  std::future<void> writing_;
};

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  /// The least change that counts as an improvement.
  double min_delta = 0.0;
  /// Epochs without improvement before stopping.
  int patience = 0;
  Mode mode = Mode::automatic;
  /// Training stops unless the monitored value gets better than this (no baseline: none).
  std::optional<double> baseline = {};
  /// When stopping, set the model's variables back to their values at the best epoch.
  bool restore_best_weights = false;
  /// Epochs to run before monitoring starts.
  int start_from_epoch = 0;
  /// 1: a line when stopping.
  int verbose = 0;
};

/// Stops fit when the monitored value has not improved for `patience` epochs.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  /// The epoch (0-based) after which training stopped, or -1 if it ran to the end.
  int stopped_epoch() const { return stopped_epoch_; }
  /// The best epoch and its value (-1 before any monitored epoch).
  int best_epoch() const { return best_epoch_; }
  double best() const { return best_; }

 private:
  bool improved(double value, double reference) const;
  EarlyStoppingOptions options_;
  bool maximize_ = false;
  double best_ = 0;
  int best_epoch_ = -1;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  std::vector<std::pair<Variable, Tensor>> best_weights_;
};

/// Sets the optimizer's learning rate at the start of each epoch to schedule(epoch, current
/// rate). The optimizer needs a constant rate (not an optim::Schedule): it is a variable, so
/// the traced step sees the new rate without retracing.
class LearningRateScheduler : public Callback {
 public:
  using Rule = std::function<double(int epoch, double learning_rate)>;
  explicit LearningRateScheduler(Rule schedule, int verbose = 0);
  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int epoch, const Logs& logs) override;

 private:
  Rule schedule_;
  int verbose_;
};

struct CSVLoggerOptions {
  char separator = ',';
  /// Append to an existing file (its header kept) instead of replacing it.
  bool append = false;
};

/// Writes one row per epoch: "epoch" and the epoch logs, with a header row; flushed per row.
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::filesystem::path path, CSVLoggerOptions options = {});
  ~CSVLogger() override;
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  bool writes_files() const override { return true; }

 private:
  std::filesystem::path path_;
  CSVLoggerOptions options_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> columns_;
};

/// A callback from functions (each may be empty).
struct LambdaCallback : Callback {
  std::function<void(const Logs&)> train_begin, train_end;
  std::function<void(int, const Logs&)> epoch_begin, epoch_end;
  std::function<void(std::int64_t, const Logs&)> batch_begin, batch_end;

  void on_train_begin(const Logs& logs) override {
    if (train_begin) train_begin(logs);
  }
  void on_train_end(const Logs& logs) override {
    if (train_end) train_end(logs);
  }
  void on_epoch_begin(int epoch, const Logs& logs) override {
    if (epoch_begin) epoch_begin(epoch, logs);
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (epoch_end) epoch_end(epoch, logs);
  }
  void on_batch_begin(std::int64_t batch, const Logs& logs) override {
    if (batch_begin) batch_begin(batch, logs);
  }
  void on_batch_end(std::int64_t batch, const Logs& logs) override {
    if (batch_end) batch_end(batch, logs);
  }
};

namespace detail {
/// Runs the callbacks of one fit: attaches them to its state and detaches them on destruction.
class CallbackList {
 public:
  CallbackList(const std::vector<std::reference_wrapper<Callback>>& callbacks, FitState& state);
  ~CallbackList();
  CallbackList(const CallbackList&) = delete;
  CallbackList& operator=(const CallbackList&) = delete;
  bool empty() const { return callbacks_.empty(); }
  void train_begin(const Logs& logs);
  void train_end(const Logs& logs);
  void epoch_begin(int epoch, const Logs& logs);
  void epoch_end(int epoch, const Logs& logs);
  void batch_begin(std::int64_t batch, const Logs& logs);
  void batch_end(std::int64_t batch, const Logs& logs);
  /// Seconds spent in the hooks since the last call (and resets the count).
  double take_seconds();

 private:
  template <class Hook>
  void run(const Hook& hook);
  std::vector<std::reference_wrapper<Callback>> callbacks_;
  double seconds_ = 0;
};
}  // namespace detail

}  // namespace kiln::train

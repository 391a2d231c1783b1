#pragma once
/// @file train.hpp
/// The training loop (kiln::train): fit, evaluate, predict, and metrics.
///
/// Each runs a kiln::function whose input_signature marks the batch dim dynamic, so a whole
/// fit traces its step exactly once, the last partial batch included. The train step is one
/// graph: forward, loss, metrics, backward (GradientTape inside the trace) and the optimizer's
/// update. fit sets nn::learning_phase() to training inside its step; evaluate and predict run
/// in inference mode. The functions live only for the call, so nothing stays cached after it.
///
/// **Stateful models** (a recurrent layer built with `stateful = true`, anywhere in the model;
/// see nn::is_stateful). A stateful layer carries its final state over to the next batch, so
/// sample i of each batch continues sample i of the batch before (Keras's semantics). Then the
/// batch dim is static: the step is traced once with options.batch_size, which must divide the
/// number of samples (else a kiln::Error naming train.fit and the batch size; Keras requires
/// the same), and fit requires shuffle = false (shuffling would break the sequences apart, so
/// it is an error rather than silently ignored). The state carries over from epoch to epoch and
/// from one fit, evaluate or predict call to the next unless reset: nn::reset_states(model), or
/// FitOptions::reset_states_at_epoch_end.

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/module.hpp"
#include "kiln/optim.hpp"
#include "kiln/tensor.hpp"

namespace kiln::train {

/// loss(y_true, y_pred) -> scalar tensor (see kiln::nn::losses).
using LossFn = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;

/// A named per-batch statistic (y_true, y_pred) -> scalar: the mean over the batch's samples.
/// Epoch values are averages weighted by batch size.
struct Metric {
  std::string name = {};
  LossFn fn;
};

namespace metrics {
/// Fraction of samples where (y_pred > threshold) equals (y_true > 0.5).
Metric binary_accuracy(double threshold = 0.5);
/// Fraction where argmax(y_pred, -1) equals argmax(y_true, -1) (one-hot labels).
Metric categorical_accuracy();
/// Fraction where argmax(y_pred, -1) equals the integer label.
Metric sparse_categorical_accuracy();
}  // namespace metrics

class Callback;  // kiln/callbacks.hpp

/// Validation samples for fit: evaluated after every validation_freq-th epoch.
struct ValidationData {
  Tensor x;
  Tensor y;
};

/// Named values of a batch or an epoch, in the order fit logs them: "loss", the metrics, then
/// (at an epoch's end, with validation) "val_loss" and "val_<metric>", and "learning_rate".
class Logs {
 public:
  /// Sets `key` (appended if new).
  void set(std::string_view key, double value);
  bool contains(std::string_view key) const;
  /// The value of `key`; a kiln::Error listing the keys there are if it is missing.
  double at(std::string_view key) const;
  const std::vector<std::pair<std::string, double>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<std::pair<std::string, double>> items_;
};

struct FitOptions {
  int epochs = 1;
  std::int64_t batch_size = 32;
  /// Shuffle the samples at the start of every epoch.
  bool shuffle = true;
  /// Seed of the shuffles; without one, fit takes kiln::random::next_seed() (repeatable after
  /// kiln::random::set_global_seed).
  std::optional<std::uint64_t> seed = {};
  /// 0: silent. 1: a progress bar (loss, samples/s) on a terminal, one line per epoch
  /// otherwise. 2: one line per epoch. Output goes to standard output.
  int verbose = 1;
  std::vector<Metric> metrics = {};
  /// After every epoch, zero the carried state of the model's stateful layers
  /// (nn::reset_states), so each epoch starts its sequences afresh. Keras leaves this to a
  /// callback; nothing to do for a model without stateful layers.
  bool reset_states_at_epoch_end = false;
  /// Samples to validate on after each epoch (loss and metrics in inference mode, logged as
  /// "val_loss" and "val_<metric>"). x and y must have the training data's dtypes and its shapes
  /// after dim 0; checked before training starts.
  std::optional<ValidationData> validation_data = {};
  /// Instead of validation_data: the last fraction (0 <= split < 1) of x and y, taken before
  /// shuffling, as Keras does. Setting both is an error.
  double validation_split = 0.0;
  /// Batch size of validation (0: batch_size).
  std::int64_t validation_batch_size = 0;
  /// Validate after every validation_freq-th epoch (and after the last).
  int validation_freq = 1;
  /// Called at the start and end of training, of each epoch and of each batch (see
  /// kiln/callbacks.hpp: TensorBoard, ModelCheckpoint, EarlyStopping, LearningRateScheduler,
  /// CSVLogger, LambdaCallback, or your own). Held by reference: they must outlive the fit.
  std::vector<std::reference_wrapper<Callback>> callbacks = {};
  /// Train across the processes of an MPI job (kiln::distributed::init() first; every process
  /// calls fit with the same data and options). batch_size is per process: each step, process
  /// r takes rows [r B, (r+1) B) of the next p x B rows of the epoch's order (the same shuffle on
  /// every process), so p processes train like one process with batch p x B; a last, shorter
  /// global batch is split evenly (up to p - 1 rows dropped). The optimizer is wrapped in a
  /// kiln::distributed::DistributedOptimizer for the fit unless it already is, the variables
  /// start from rank 0's values, validation data is split between the processes, the epoch's
  /// loss and metrics are averaged over them, progress is printed by rank 0 only, and a
  /// callback's stop_training on any process stops every process. Callbacks run on every
  /// process, except those that write files (Callback::writes_files: ModelCheckpoint,
  /// TensorBoard, CSVLogger), which run on rank 0 only.
  bool distributed = false;
};

/// What fit returns: per-epoch averages (weighted by batch size) and counters. An epoch without
/// validation (validation_freq) has NaN in the val_ rows.
struct History {
  std::vector<double> loss = {};
  std::map<std::string, std::vector<double>> metrics = {};
  std::vector<double> val_loss = {};
  std::map<std::string, std::vector<double>> val_metrics = {};
  /// The learning rate at the end of each epoch.
  std::vector<double> learning_rate = {};
  /// Wall time per epoch, seconds.
  std::vector<double> seconds = {};
  /// Of that, the seconds spent in the callbacks' hooks (0 without callbacks).
  std::vector<double> callback_seconds = {};
  /// The epochs run (0-based; fewer than FitOptions::epochs when a callback stopped training).
  std::vector<int> epochs = {};
  /// How many times the train step was traced (1 for any run), and the validation step.
  int traces = 0;
  int validation_traces = 0;
  /// The values logged under `key` ("loss", "val_loss", "val_binary_accuracy",
  /// "learning_rate", a metric's name), one per epoch; a kiln::Error naming the keys if none.
  const std::vector<double>& at(std::string_view key) const;
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;
  /// 0: silent; 1 or 2: one summary line.
  int verbose = 0;
  std::vector<Metric> metrics = {};
};

struct EvaluateResult {
  double loss = 0;
  std::map<std::string, double> metrics = {};
};

struct PredictOptions {
  std::int64_t batch_size = 32;
};

namespace detail {
/// A model as the loop sees it: its module (for trainable_variables) and its forward call.
struct ModelRef {
  Module& module;
  std::function<Tensor(const Tensor&)> forward;
};
History fit(const ModelRef& model, optim::Optimizer& optimizer, const LossFn& loss, const Tensor& x,
            const Tensor& y, const FitOptions& options);
EvaluateResult evaluate(const ModelRef& model, const LossFn& loss, const Tensor& x, const Tensor& y,
                        const EvaluateOptions& options);
Tensor predict(const ModelRef& model, const Tensor& x, const PredictOptions& options);
}  // namespace detail

/// A model: a kiln::Module callable as model(x) -> y (a layer, a Sequential, your own struct).
template <class M>
concept Model = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m(x) } -> std::convertible_to<Tensor>;
};

/// Trains `model` on (x, y) for options.epochs epochs of batches along dim 0 (the last batch
/// may be smaller, except for a stateful model: see the file comment): per batch, loss(y, model(x))
/// is differentiated with respect to model.trainable_variables() and `optimizer` applies the
/// gradients. Returns the history. x and y must have the same size along dim 0 (> 0).
template <Model M>
History fit(M& model, optim::Optimizer& optimizer, const LossFn& loss, const Tensor& x,
            const Tensor& y, const FitOptions& options = {}) {
  return detail::fit({model, [&model](const Tensor& t) -> Tensor { return model(t); }}, optimizer,
                     loss, x, y, options);
}

/// The loss (and metrics) over (x, y), in batches, in inference mode.
template <Model M>
EvaluateResult evaluate(M& model, const LossFn& loss, const Tensor& x, const Tensor& y,
                        const EvaluateOptions& options = {}) {
  return detail::evaluate({model, [&model](const Tensor& t) -> Tensor { return model(t); }}, loss,
                          x, y, options);
}

/// model(x) computed in batches in inference mode, concatenated along dim 0.
template <Model M>
Tensor predict(M& model, const Tensor& x, const PredictOptions& options = {}) {
  return detail::predict({model, [&model](const Tensor& t) -> Tensor { return model(t); }}, x,
                         options);
}

}  // namespace kiln::train

#pragma once
/// @file optim.hpp
/// Optimizers (kiln::optim): SGD, Adam, RMSprop, Adagrad, learning-rate schedules, gradient
/// clipping.
///
/// An optimizer is a kiln::Module (named "sgd", "adam", "rmsprop" or as given) that owns its
/// state as non-trainable variables, so checkpoints save it with its paths:
/// - "iterations" (i64 scalar): updates applied so far;
/// - "learning_rate" (f32 scalar) when the rate is a constant (set_learning_rate assigns it, so a
///   cached train step sees the new rate without retracing);
/// - slots, one per slot kind per updated variable, created once, on the first apply() that
///   sees the variable, and named after it: Adam's "m" and "v" of "net/l1/kernel" are
///   "adam/net/l1/kernel/m" and "adam/net/l1/kernel/v".
///
/// apply() works eagerly and inside a kiln::function: there, the first trace creates the slots
/// (lifted out of the graph with their initial zeros) and the update compiles into the graph
/// with the forward and backward pass. Eagerly, apply() compiles its update too (clipping, the
/// rate, every variable's update and the iteration count) as one cached function per list of
/// variables, traced on the first apply() that sees the list: the update runs as fused loops
/// that write over the variables and slots where nothing else holds their values, not as one
/// allocating op after another. The cached functions hold the variables weakly and go with
/// them. Indexed-slices gradients, kiln::run_functions_eagerly(true), a GradientTape recording
/// (it sees the update's ops), and an update() that cannot be traced (it reads a value; a
/// warning says so, once per list) run op by op.
///
/// Slots are keyed by the variable's identity: when a variable the optimizer holds slots for is
/// destroyed (a model rebuilt in a loop), the next apply() drops its slots, so a long-lived
/// optimizer does not grow. Two live variables with the same name cannot share one optimizer
/// (their slots would collide): that is an error.
///
/// Gradients may be indexed-slices values (kiln/sparse.hpp: the gradient of an embedding
/// lookup). Their duplicate rows are summed, clipping reads only their values, and SGD, Adam,
/// RMSprop and Adagrad update only the rows they name, in place (each class says how its
/// slots behave); any other optimizer gets them as dense tensors.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/module.hpp"
#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln::optim {

/// A learning-rate schedule: the rate (f32 scalar tensor) for a step (i64 scalar tensor: the
/// updates applied before this one, so the first update sees step 0). Written with kiln ops, so
/// it is evaluated inside a traced train step from the optimizer's iteration counter.
class Schedule {
 public:
  using Rule = std::function<Tensor(const Tensor& step)>;
  Schedule(std::string name, Rule rule);
  Tensor operator()(const Tensor& step) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Rule> rule_;
};

namespace schedules {
/// Always `rate`.
Schedule constant(double rate);
/// initial_rate * decay_rate ^ (step / decay_steps); with staircase, the exponent is floored.
Schedule exponential_decay(double initial_rate, std::int64_t decay_steps, double decay_rate,
                           bool staircase = false);
/// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
/// boundaries[i], values.back() after the last boundary (Keras's PiecewiseConstantDecay).
/// Boundaries must increase; values.size() == boundaries.size() + 1.
Schedule piecewise_constant(std::vector<std::int64_t> boundaries, std::vector<double> values);
}  // namespace schedules

/// A constant learning rate (from a number) or a Schedule.
class LearningRate {
 public:
  LearningRate(double rate) : rate_(rate) {}  // NOLINT(google-explicit-constructor)
  LearningRate(Schedule schedule)             // NOLINT(google-explicit-constructor)
      : schedule_(std::make_shared<Schedule>(std::move(schedule))) {}
  bool is_schedule() const { return schedule_ != nullptr; }
  double constant() const { return rate_; }
  const Schedule& schedule() const { return *schedule_; }

 private:
  double rate_ = 0.0;
  std::shared_ptr<const Schedule> schedule_;
};

/// Combines the gradients an optimizer is given before it applies them, eagerly or while a
/// train step is traced (kiln::distributed::DistributedOptimizer averages them over the
/// processes of a job). Optimizer::set_gradient_aggregator installs one.
class GradientAggregator {
 public:
  virtual ~GradientAggregator() = default;
  /// The gradients to apply in place of `grads` (one per variable of `vars`; undefined where
  /// grads[i] is undefined).
  virtual std::vector<Tensor> aggregate(const std::vector<Tensor>& grads,
                                        const std::vector<Variable>& vars) = 0;
};

/// The common part of kiln's optimizers: validation, clipping, the learning rate, the
/// iteration counter and slot bookkeeping. Subclasses implement update(). An optimizer may be
/// moved (not copied); apply() is not synchronized, so one thread applies at a time.
class Optimizer : public Module {
 public:
  ~Optimizer() override;
  Optimizer(Optimizer&&) noexcept;

  /// Applies one update: grads[i] to vars[i]. Gradients must match their variable's dtype and
  /// shape; an undefined gradient skips its variable. Increments iterations() once. With a
  /// gradient aggregator, the gradients it returns are applied (after they are checked here).
  void apply(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);

  /// Makes apply() pass its gradients through `aggregator` first (not owned; it must outlive
  /// its installation). Null removes it. One at a time: installing a second one is an error.
  void set_gradient_aggregator(GradientAggregator* aggregator);
  /// The aggregator installed, or null.
  GradientAggregator* gradient_aggregator() const;

  /// Updates applied so far (the i64 scalar variable "iterations").
  Variable iterations() const;
  /// The learning rate of the next update (a symbolic tensor while tracing).
  Tensor learning_rate() const;
  /// Sets a constant learning rate (an error when the rate is a Schedule).
  void set_learning_rate(double rate);
  /// The slot kinds kept per variable ("m", "v"; "momentum"; "velocity", ...).
  const std::vector<std::string>& slot_names() const;
  /// The slot `slot_name` of `var`; a kiln::Error if apply() has not created it yet.
  Variable slot(const Variable& var, std::string_view slot_name) const;

 protected:
  /// `kind`: the op name in messages ("optim.Adam"); `default_name`: the automatic name
  /// ("adam"); `slot_names`: the slots update() receives, in that order.
  Optimizer(std::string kind, std::string_view default_name, std::string name,
            const LearningRate& learning_rate, std::optional<double> clipnorm,
            std::optional<double> global_clipnorm, std::vector<std::string> slot_names);

  /// Updates `var` (assign / assign_sub) from its gradient, its slots (in slot_names() order),
  /// the learning rate and the 1-based step number, both scalars of var's dtype.
  virtual void update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                      const Tensor& learning_rate, const Tensor& step) = 0;
  /// update() for an indexed-slices gradient (each row once, sorted, maybe padded with -1
  /// rows: kiln/sparse.hpp). This default makes it dense and calls update().
  virtual void update_sparse(const Variable& var, const Tensor& grad,
                             std::span<const Variable> slots, const Tensor& learning_rate,
                             const Tensor& step);
  /// The value every slot starts from (0 unless a subclass sets another before its first
  /// apply(): Adagrad's initial accumulator).
  void set_slot_initial_value(double value);

  const std::string& kind() const;

 private:
  /// Clipping, the updates and the iteration count (op by op, or while apply_compiled traces).
  void apply_updates(std::vector<Tensor> grads, const std::vector<Variable>& vars,
                     const std::vector<std::vector<Variable>>& slots);
  /// Eagerly, with only dense gradients: apply_updates as a cached kiln::function for this list
  /// of variables. False when the update must run op by op.
  bool apply_compiled(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                      const std::vector<std::vector<Variable>>& slots);

  struct State;
  std::unique_ptr<State> state_;
};

struct SGDOptions {
  LearningRate learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  /// Scale each gradient whose L2 norm exceeds this down to that norm (Keras's clipnorm).
  std::optional<double> clipnorm = {};
  /// Scale all gradients together when their global L2 norm exceeds this (Keras's
  /// global_clipnorm, TensorFlow's clip_by_global_norm). Applied after clipnorm.
  std::optional<double> global_clipnorm = {};
  /// Empty: an automatic name (see the class).
  std::string name = {};
};

/// Stochastic gradient descent, Keras's formulation: without momentum var -= lr * g; with it,
/// m = momentum * m - lr * g and var += m (nesterov: var += momentum * m - lr * g). Slot:
/// "momentum" (only when momentum > 0). An indexed-slices gradient updates only its rows, and
/// their momentum only (TensorFlow's SparseApplyMomentum).
class SGD : public Optimizer {
 public:
  explicit SGD(SGDOptions options = {});
  const SGDOptions& options() const { return options_; }

 protected:
  void update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
              const Tensor& learning_rate, const Tensor& step) override;
  void update_sparse(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                     const Tensor& learning_rate, const Tensor& step) override;

 private:
  SGDOptions options_;
};

struct AdamOptions {
  LearningRate learning_rate = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
  /// For indexed-slices gradients: true updates m, v and the variable only in the rows the
  /// gradient names (TensorFlow Addons' LazyAdam: memory and time scale with those rows);
  /// false gives the dense update's result (every row's m and v decay, every row moves).
  bool lazy = true;
  /// Scale each gradient whose L2 norm exceeds this down to that norm (Keras's clipnorm).
  std::optional<double> clipnorm = {};
  /// Scale all gradients together when their global L2 norm exceeds this (Keras's
  /// global_clipnorm, TensorFlow's clip_by_global_norm). Applied after clipnorm.
  std::optional<double> global_clipnorm = {};
  /// Empty: an automatic name (see the class).
  std::string name = {};
};

/// Adam (Kingma & Ba), Keras's formulation: m += (g - m)(1 - beta1), v += (g^2 - v)(1 - beta2),
/// var -= lr sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon), t the 1-based step.
/// Slots: "m", "v". Indexed-slices gradients: see AdamOptions::lazy.
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options = {});
  const AdamOptions& options() const { return options_; }

 protected:
  void update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
              const Tensor& learning_rate, const Tensor& step) override;
  void update_sparse(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                     const Tensor& learning_rate, const Tensor& step) override;

 private:
  AdamOptions options_;
};

struct RMSpropOptions {
  LearningRate learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  /// Scale each gradient whose L2 norm exceeds this down to that norm (Keras's clipnorm).
  std::optional<double> clipnorm = {};
  /// Scale all gradients together when their global L2 norm exceeds this (Keras's
  /// global_clipnorm, TensorFlow's clip_by_global_norm). Applied after clipnorm.
  std::optional<double> global_clipnorm = {};
  /// Empty: an automatic name (see the class).
  std::string name = {};
};

/// RMSprop, Keras's formulation: velocity = rho velocity + (1 - rho) g^2, increment =
/// lr g / sqrt(velocity + epsilon); var -= increment, or with momentum: m = momentum m +
/// increment, var -= m. Slots: "velocity", and "momentum" when momentum > 0. An
/// indexed-slices gradient updates only its rows and their slots (TensorFlow's
/// SparseApplyRMSProp).
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(RMSpropOptions options = {});
  const RMSpropOptions& options() const { return options_; }

 protected:
  void update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
              const Tensor& learning_rate, const Tensor& step) override;
  void update_sparse(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                     const Tensor& learning_rate, const Tensor& step) override;

 private:
  RMSpropOptions options_;
};

struct AdagradOptions {
  LearningRate learning_rate = 0.001;
  /// The accumulator's starting value (> 0 keeps the first steps finite).
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  /// Scale each gradient whose L2 norm exceeds this down to that norm (Keras's clipnorm).
  std::optional<double> clipnorm = {};
  /// Scale all gradients together when their global L2 norm exceeds this (Keras's
  /// global_clipnorm, TensorFlow's clip_by_global_norm). Applied after clipnorm.
  std::optional<double> global_clipnorm = {};
  /// Empty: an automatic name (see the class).
  std::string name = {};
};

/// Adagrad, Keras's formulation: accumulator += g^2, var -= lr g / (sqrt(accumulator) +
/// epsilon). Slot: "accumulator". An indexed-slices gradient updates only its rows, which gives
/// exactly the dense result (the other rows' gradient is zero).
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(AdagradOptions options = {});
  const AdagradOptions& options() const { return options_; }

 protected:
  void update(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
              const Tensor& learning_rate, const Tensor& step) override;
  void update_sparse(const Variable& var, const Tensor& grad, std::span<const Variable> slots,
                     const Tensor& learning_rate, const Tensor& step) override;

 private:
  AdagradOptions options_;
};

}  // namespace kiln::optim

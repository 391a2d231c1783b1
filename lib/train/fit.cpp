// train::fit, evaluate and predict: batching, shuffling, one traced step per call.
#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/callbacks.hpp"
#include "kiln/creation.hpp"
#include "kiln/distributed.hpp"
#include "kiln/function.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "kiln/train.hpp"
#include "train/learning_rate.hpp"
#include "train/progress.hpp"

namespace kiln::train {

namespace {

/// t's signature with `batch` as its batch dim (dim 0): -1 (dynamic), so one trace serves every
/// batch size, or a stateful model's static batch size.
TensorSpec batch_spec(const Tensor& t, std::int64_t batch) {
  Shape shape = t.shape();
  shape[0] = batch;
  return TensorSpec(shape, t.dtype());
}

/// The path of a stateful layer in `model` (the first, depth-first) for error messages.
std::string stateful_layer_path(const Module& model) {
  for (const auto& child : model.children())
    if (nn::is_stateful(*child.second)) return stateful_layer_path(*child.second);
  return model.path();
}

/// The batch dim of the steps' input_signature: dynamic (-1) for a model without state, else
/// the static batch_size, which must divide the number of samples (a stateful layer's state
/// variables are [batch, units], so every batch has the same size, as Keras requires).
std::int64_t signature_batch(std::string_view op, const Module& model, std::int64_t samples,
                             std::int64_t batch_size) {
  if (!nn::is_stateful(model)) return -1;
  if (samples % batch_size != 0)
    kiln::detail::fail(op,
                       "the model {} is stateful (the layer {} carries its state from one batch to "
                       "the next), so every batch must have batch_size {} samples; {} samples are "
                       "not a multiple of it (drop the last {} or choose another batch_size)",
                       model.path(), stateful_layer_path(model), batch_size, samples,
                       samples % batch_size);
  return batch_size;
}

void check_data(std::string_view op, const Tensor& t, const char* what) {
  if (!t.defined()) kiln::detail::fail(op, "{} is an undefined tensor", what);
  if (t.impl()->is_symbolic() || kiln::detail::active_trace() != nullptr)
    kiln::detail::fail(op, "runs its own traced functions; call it outside kiln::function");
  if (t.ndim() == 0) kiln::detail::fail(op, "{} must have a batch dim (dim 0); got a scalar", what);
  if (t.dim(0) == 0) kiln::detail::fail(op, "{} has no samples (dim 0 is 0)", what);
}

void check_pair(std::string_view op, const Tensor& x, const Tensor& y) {
  check_data(op, x, "x");
  check_data(op, y, "y");
  if (x.dim(0) != y.dim(0))
    kiln::detail::fail(op, "x has {} samples but y has {} (dim 0 must agree): x {}, y {}", x.dim(0),
                       y.dim(0), x.shape(), y.shape());
}

void check_batch_size(std::string_view op, std::int64_t batch_size) {
  if (batch_size <= 0) kiln::detail::fail(op, "batch_size must be positive, got {}", batch_size);
}

void check_metrics(std::string_view op, const std::vector<Metric>& metrics) {
  for (const Metric& m : metrics)
    if (!m.fn) kiln::detail::fail(op, "metric '{}' has no function", m.name);
}

void check_loss_value(const Tensor& value) {
  if (!value.defined() || value.size() != 1 || !is_floating(value.dtype()))
    kiln::detail::fail("train", "the loss must return a floating scalar, got {}",
                       value.defined()
                           ? fmt::format("{} {}", dtype_name(value.dtype()), value.shape())
                           : std::string("an undefined tensor"));
}

double scalar_value(const Tensor& t) {
  if (t.dtype() == f32) return static_cast<double>(t.item<float>());
  return t.dtype() == f64 ? t.item<double>() : cast(t, f64).item<double>();
}

/// A random permutation of [0, n) from `seed` (Fisher-Yates over SplitMix64; the same on every
/// platform).
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::uint64_t state = seed;
  const auto next = [&state] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto bound = static_cast<unsigned __int128>(i + 1);
    const auto j =
        static_cast<std::int64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

/// Running weighted means of the loss and the metrics over an epoch.
struct Averages {
  double loss = 0;
  std::vector<double> metrics;
  std::int64_t samples = 0;

  explicit Averages(std::size_t n) : metrics(n, 0.0) {}
  void add(const std::vector<Tensor>& values, std::int64_t count) {
    const double w = static_cast<double>(count);
    samples += count;
    const double f = w / static_cast<double>(samples);
    loss += (scalar_value(values[0]) - loss) * f;
    for (std::size_t i = 0; i < metrics.size(); ++i)
      metrics[i] += (scalar_value(values[i + 1]) - metrics[i]) * f;
  }
};

/// Loss and metrics of one batch (inside a trace): {loss, metric...}.
std::vector<Tensor> batch_values(const Tensor& loss, const std::vector<Metric>& metrics,
                                 const Tensor& y, const Tensor& pred) {
  std::vector<Tensor> out{loss};
  const Tensor fixed = stop_gradient(pred);
  for (const Metric& m : metrics) {
    Tensor v = m.fn(y, fixed);
    if (!v.defined() || v.size() != 1)
      kiln::detail::fail("train", "metric '{}' must return a scalar", m.name);
    out.push_back(v);
  }
  return out;
}

/// The traced evaluation step of evaluate and of fit's validation: loss and metrics in
/// inference mode.
auto make_evaluate_step(const detail::ModelRef& model, const LossFn& loss,
                        const std::vector<Metric>& metrics, std::vector<TensorSpec> signature,
                        std::string name) {
  FunctionOptions function_options;
  function_options.name = std::move(name);
  function_options.input_signature = std::move(signature);
  return kiln::function(
      [&model, &loss, &metrics](const Tensor& xb, const Tensor& yb) {
        nn::LearningPhaseScope phase(false);
        const Tensor pred = model.forward(xb);
        const Tensor value = loss(yb, pred);
        check_loss_value(value);
        return batch_values(value, metrics, yb, pred);
      },
      function_options);
}

template <class Step>
Averages run_evaluation(Step& step, const Tensor& x, const Tensor& y, std::int64_t batch_size,
                        std::size_t metrics) {
  const std::int64_t n = x.dim(0);
  Averages averages(metrics);
  for (std::int64_t begin = 0; begin < n; begin += batch_size) {
    const std::int64_t end = std::min(n, begin + batch_size);
    averages.add(step(slice(x, 0, begin, end), slice(y, 0, begin, end)), end - begin);
  }
  return averages;
}

/// A fit's place in an MPI job: process `rank` of `processes` (0 of 1 when not distributed).
struct Processes {
  bool distributed = false;
  int rank = 0, processes = 1;

  /// The averages over every process, weighted by their samples (each process's own when not
  /// distributed).
  Averages combined(const Averages& mine) const {
    if (!distributed) return mine;
    std::vector<double> sums{mine.loss * static_cast<double>(mine.samples)};
    for (double m : mine.metrics) sums.push_back(m * static_cast<double>(mine.samples));
    sums.push_back(static_cast<double>(mine.samples));
    const auto total =
        distributed::allreduce(tensor(sums)).to_vector<double>();  // sums, then the count
    Averages all(mine.metrics.size());
    all.samples = static_cast<std::int64_t>(total.back());
    const double count = std::max(total.back(), 1.0);
    all.loss = total[0] / count;
    for (std::size_t i = 0; i < all.metrics.size(); ++i) all.metrics[i] = total[i + 1] / count;
    return all;
  }
  /// Whether any process says yes.
  bool any(bool mine) const {
    if (!distributed) return mine;
    return distributed::allreduce(full({1}, mine ? 1 : 0, i32), distributed::ReduceOp::max)
               .to_vector<std::int32_t>()[0] != 0;
  }
  /// Rank 0's value on every process.
  std::uint64_t from_rank0(std::uint64_t value) const {
    if (!distributed) return value;
    const auto v =
        distributed::broadcast(tensor<std::int64_t>({static_cast<std::int64_t>(value)}, {1}))
            .to_vector<std::int64_t>();
    return static_cast<std::uint64_t>(v[0]);
  }
  /// This process's share [begin, end) of `rows` rows split evenly (validation data).
  std::pair<std::int64_t, std::int64_t> share(std::int64_t rows) const {
    return {rows * rank / processes, rows * (rank + 1) / processes};
  }
};

/// "loss" and the metrics (with `prefix`) of `averages`, appended to `logs`.
void log_averages(Logs& logs, const Averages& averages, const std::vector<Metric>& metrics,
                  std::string_view prefix) {
  logs.set(fmt::format("{}loss", prefix), averages.loss);
  for (std::size_t i = 0; i < metrics.size(); ++i)
    logs.set(fmt::format("{}{}", prefix, metrics[i].name), averages.metrics[i]);
}

/// The samples fit trains on and those it validates on (none: undefined tensors).
struct Split {
  Tensor x, y, val_x, val_y;
};

/// `t`'s dtype and its shape after dim 0 must be `like`'s.
void check_like(std::string_view op, const Tensor& t, const Tensor& like, const char* what,
                const char* like_what) {
  const Shape a = t.shape(), b = like.shape();
  bool same = t.dtype() == like.dtype() && a.size() == b.size();
  for (std::size_t d = 1; same && d < a.size(); ++d) same = a[d] == b[d];
  if (!same)
    kiln::detail::fail(op,
                       "{} must match {} in dtype and in every dim after the first: {} is {} {}, "
                       "{} is {} {}",
                       what, like_what, what, dtype_name(t.dtype()), a, like_what,
                       dtype_name(like.dtype()), b);
}

Split split_validation(std::string_view op, const Tensor& x, const Tensor& y,
                       const FitOptions& options) {
  Split s{x, y, Tensor(), Tensor()};
  const double split = options.validation_split;
  if (!(split >= 0.0 && split < 1.0))
    kiln::detail::fail(op, "validation_split must be in [0, 1), got {}", split);
  if (options.validation_data && split > 0.0)
    kiln::detail::fail(op, "give validation_data or validation_split, not both");
  if (options.validation_data) {
    const ValidationData& v = *options.validation_data;
    check_pair(op, v.x, v.y);
    check_like(op, v.x, x, "validation_data.x", "x");
    check_like(op, v.y, y, "validation_data.y", "y");
    s.val_x = v.x;
    s.val_y = v.y;
  } else if (split > 0.0) {
    const std::int64_t n = x.dim(0);
    const auto at = static_cast<std::int64_t>(static_cast<double>(n) * (1.0 - split));
    if (at <= 0 || at >= n)
      kiln::detail::fail(op,
                         "validation_split {} of {} samples leaves {} to train on and {} to "
                         "validate on; both need at least one",
                         split, n, at, n - at);
    s.x = slice(x, 0, 0, at);
    s.y = slice(y, 0, 0, at);
    s.val_x = slice(x, 0, at, n);
    s.val_y = slice(y, 0, at, n);
  }
  return s;
}

}  // namespace

namespace detail {

History fit(const ModelRef& model, optim::Optimizer& optimizer, const LossFn& loss, const Tensor& x,
            const Tensor& y, const FitOptions& options) {
  constexpr std::string_view op = "train.fit";
  check_pair(op, x, y);
  check_batch_size(op, options.batch_size);
  check_metrics(op, options.metrics);
  if (!loss) kiln::detail::fail(op, "the loss function is empty");
  if (options.epochs < 0) kiln::detail::fail(op, "epochs must be >= 0, got {}", options.epochs);
  if (options.verbose < 0 || options.verbose > 2)
    kiln::detail::fail(op, "verbose must be 0, 1 or 2, got {}", options.verbose);
  if (options.validation_freq < 1)
    kiln::detail::fail(op, "validation_freq must be >= 1, got {}", options.validation_freq);
  if (options.validation_batch_size < 0)
    kiln::detail::fail(op, "validation_batch_size must be positive (or 0: batch_size), got {}",
                       options.validation_batch_size);
  const Split data = split_validation(op, x, y, options);
  const bool validate = data.val_x.defined();
  const std::int64_t val_batch_size =
      options.validation_batch_size > 0 ? options.validation_batch_size : options.batch_size;

  const std::int64_t batch = signature_batch(op, model.module, data.x.dim(0), options.batch_size);
  if (batch != -1 && options.shuffle)
    kiln::detail::fail(op,
                       "the model {} is stateful (the layer {} carries its state from one batch to "
                       "the next), so the samples must stay in order: batch i continues the "
                       "sequences of batch i of the previous call; pass shuffle = false",
                       model.module.path(), stateful_layer_path(model.module));
  std::int64_t val_batch = -1;
  if (validate && batch != -1) {
    if (val_batch_size != options.batch_size)
      kiln::detail::fail(op,
                         "the model {} is stateful, so validation batches must have the training "
                         "batch_size {} (its state is one row per sample), not {}",
                         model.module.path(), options.batch_size, val_batch_size);
    val_batch = signature_batch(op, model.module, data.val_x.dim(0), val_batch_size);
  }

  Processes job;
  std::optional<distributed::DistributedOptimizer> sync;
  if (options.distributed) {
    if (!distributed::initialized())
      kiln::detail::fail(op, "distributed = true needs kiln::distributed::init() first");
    if (batch != -1)
      kiln::detail::fail(op,
                         "the model {} is stateful; distributed fit trains stateless models only "
                         "(the processes' last batches may differ from batch_size)",
                         model.module.path());
    job = Processes{true, distributed::rank(), distributed::size()};
    if (optimizer.gradient_aggregator() == nullptr) sync.emplace(optimizer);
  }

  FunctionOptions function_options;
  function_options.name = "train_step";
  function_options.input_signature = {batch_spec(data.x, batch), batch_spec(data.y, batch)};
  auto step = kiln::function(
      [&](const Tensor& xb, const Tensor& yb) {
        nn::LearningPhaseScope phase(true);
        Tensor pred, value;
        std::vector<Variable> vars;
        std::vector<Tensor> grads;
        {
          GradientTape tape;
          pred = model.forward(xb);
          value = loss(yb, pred);
          check_loss_value(value);
          vars = model.module.trainable_variables();
          grads = tape.gradient(value, vars);
        }
        optimizer.apply(grads, vars);
        return batch_values(value, options.metrics, yb, pred);
      },
      function_options);
  auto val_step = make_evaluate_step(model, loss, options.metrics,
                                     {batch_spec(data.x, val_batch), batch_spec(data.y, val_batch)},
                                     "validation_step");

  const std::int64_t n = data.x.dim(0);
  const std::int64_t first_end = std::min(n, options.batch_size);
  // With callbacks, the step is traced up front (the first batch then finds it cached), so they
  // see its graph from on_train_begin on.
  // Distributed, too: tracing creates the model's and the optimizer's variables, which then
  // start from rank 0's values.
  const ConcreteFunction train_function =
      options.callbacks.empty() && !job.distributed
          ? ConcreteFunction(nullptr)
          : step.get_concrete_function(slice(data.x, 0, 0, first_end),
                                       slice(data.y, 0, 0, first_end));
  if (job.distributed) {
    distributed::broadcast_variables(model.module.variables());
    distributed::broadcast_variables(optimizer.variables());
  }
  std::vector<std::string> keys{"loss"};
  for (const Metric& m : options.metrics) keys.push_back(m.name);
  if (validate) {
    keys.emplace_back("val_loss");
    for (const Metric& m : options.metrics) keys.push_back("val_" + m.name);
  }
  keys.emplace_back("learning_rate");

  History history;
  FitState state(model.module, optimizer, history, train_function, keys);
  state.epochs = options.epochs;
  // Each step takes batch_size rows on each process: a global batch of processes x batch_size.
  const std::int64_t global_batch = options.batch_size * job.processes;
  state.steps_per_epoch = n / global_batch + (n % global_batch >= job.processes ? 1 : 0);
  state.has_validation = validate;
  // In a distributed fit, one process writes the files.
  std::vector<std::reference_wrapper<Callback>> active;
  for (const auto& c : options.callbacks)
    if (job.rank == 0 || !c.get().writes_files()) active.push_back(c);
  CallbackList callbacks(active, state);
  callbacks.train_begin(Logs());
  callbacks.take_seconds();  // on_train_begin's time belongs to no epoch

  const std::uint64_t seed = job.from_rank0(options.seed ? *options.seed : random::next_seed());
  Progress progress(job.rank == 0 ? options.verbose : 0, options.epochs, n);
  Logs logs;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    callbacks.epoch_begin(epoch, Logs());
    progress.begin_epoch(epoch);
    Tensor xs = data.x, ys = data.y;
    if (options.shuffle) {
      const Tensor order = tensor(permutation(n, seed + static_cast<std::uint64_t>(epoch)));
      xs = gather(data.x, order, 0);
      ys = gather(data.y, order, 0);
    }
    Averages averages(options.metrics.size());
    std::int64_t batch_index = 0;
    for (std::int64_t begin = 0; begin < n; begin += global_batch, ++batch_index) {
      const std::int64_t end = std::min(n, begin + global_batch);
      // This process's rows of the global batch [begin, end), split evenly.
      const std::int64_t rows = (end - begin) / job.processes;
      if (rows == 0) break;
      const std::int64_t from = begin + job.rank * rows;
      callbacks.batch_begin(batch_index, Logs());
      averages.add(step(slice(xs, 0, from, from + rows), slice(ys, 0, from, from + rows)), rows);
      ++state.global_step;
      if (callbacks.empty() && !progress.draws_bar()) continue;  // nobody reads batch logs
      Logs batch_logs;
      log_averages(batch_logs, averages, options.metrics, "");
      progress.update(end, batch_logs);
      callbacks.batch_end(batch_index, batch_logs);
    }
    averages = job.combined(averages);
    logs = Logs();
    log_averages(logs, averages, options.metrics, "");
    const bool validate_now =
        validate && ((epoch + 1) % options.validation_freq == 0 || epoch + 1 == options.epochs);
    if (validate_now) {
      const auto [from, to] = job.share(data.val_x.dim(0));
      const Averages val = job.combined(run_evaluation(val_step, slice(data.val_x, 0, from, to),
                                                       slice(data.val_y, 0, from, to),
                                                       val_batch_size, options.metrics.size()));
      log_averages(logs, val, options.metrics, "val_");
    }
    logs.set("learning_rate", learning_rate_value(optimizer));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.end_epoch(logs, seconds);
    if (options.reset_states_at_epoch_end) nn::reset_states(model.module);

    const double missing = std::numeric_limits<double>::quiet_NaN();
    history.loss.push_back(averages.loss);
    for (std::size_t i = 0; i < options.metrics.size(); ++i)
      history.metrics[options.metrics[i].name].push_back(averages.metrics[i]);
    if (validate) {
      history.val_loss.push_back(validate_now ? logs.at("val_loss") : missing);
      for (const Metric& m : options.metrics)
        history.val_metrics[m.name].push_back(validate_now ? logs.at("val_" + m.name) : missing);
    }
    history.learning_rate.push_back(logs.at("learning_rate"));
    history.seconds.push_back(seconds);
    history.epochs.push_back(epoch);
    history.traces = step.tracing_count();
    history.validation_traces = val_step.tracing_count();

    callbacks.epoch_end(epoch, logs);
    // The epoch's time includes its callbacks (on_epoch_end too, as in Keras).
    history.callback_seconds.push_back(callbacks.take_seconds());
    history.seconds.back() =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (job.any(state.stop_training)) break;
  }
  history.traces = step.tracing_count();
  history.validation_traces = val_step.tracing_count();
  callbacks.train_end(logs);
  return history;
}

EvaluateResult evaluate(const ModelRef& model, const LossFn& loss, const Tensor& x, const Tensor& y,
                        const EvaluateOptions& options) {
  constexpr std::string_view op = "train.evaluate";
  check_pair(op, x, y);
  check_batch_size(op, options.batch_size);
  check_metrics(op, options.metrics);
  if (!loss) kiln::detail::fail(op, "the loss function is empty");
  const std::int64_t batch = signature_batch(op, model.module, x.dim(0), options.batch_size);
  auto step = make_evaluate_step(model, loss, options.metrics,
                                 {batch_spec(x, batch), batch_spec(y, batch)}, "evaluate_step");
  const std::int64_t n = x.dim(0);
  const Averages averages = run_evaluation(step, x, y, options.batch_size, options.metrics.size());
  EvaluateResult result;
  result.loss = averages.loss;
  for (std::size_t i = 0; i < options.metrics.size(); ++i)
    result.metrics[options.metrics[i].name] = averages.metrics[i];
  if (options.verbose > 0) {
    Logs logs;
    log_averages(logs, averages, options.metrics, "");
    print_evaluation(n, logs);
  }
  return result;
}

Tensor predict(const ModelRef& model, const Tensor& x, const PredictOptions& options) {
  constexpr std::string_view op = "train.predict";
  check_data(op, x, "x");
  check_batch_size(op, options.batch_size);
  const std::int64_t batch = signature_batch(op, model.module, x.dim(0), options.batch_size);
  FunctionOptions function_options;
  function_options.name = "predict_step";
  function_options.input_signature = {batch_spec(x, batch)};
  auto step = kiln::function(
      [&](const Tensor& xb) {
        nn::LearningPhaseScope phase(false);
        return model.forward(xb);
      },
      function_options);
  const std::int64_t n = x.dim(0);
  std::vector<Tensor> parts;
  for (std::int64_t begin = 0; begin < n; begin += options.batch_size)
    parts.push_back(step(slice(x, 0, begin, std::min(n, begin + options.batch_size))));
  return parts.size() == 1 ? parts.front() : concat(parts, 0);
}

}  // namespace detail

}  // namespace kiln::train

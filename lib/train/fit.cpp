// train::fit, evaluate and predict: batching, shuffling, one traced step per call.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/function.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "kiln/train.hpp"
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

std::vector<std::string> names_of(const std::vector<Metric>& metrics) {
  std::vector<std::string> names;
  for (const Metric& m : metrics) names.push_back(m.name);
  return names;
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

  const std::int64_t batch = signature_batch(op, model.module, x.dim(0), options.batch_size);
  if (batch != -1 && options.shuffle)
    kiln::detail::fail(op,
                       "the model {} is stateful (the layer {} carries its state from one batch to "
                       "the next), so the samples must stay in order: batch i continues the "
                       "sequences of batch i of the previous call; pass shuffle = false",
                       model.module.path(), stateful_layer_path(model.module));

  FunctionOptions function_options;
  function_options.name = "train_step";
  function_options.input_signature = {batch_spec(x, batch), batch_spec(y, batch)};
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

  const std::int64_t n = x.dim(0);
  const std::uint64_t seed = options.seed ? *options.seed : random::next_seed();
  Progress progress(options.verbose, options.epochs, n, names_of(options.metrics));
  History history;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    progress.begin_epoch(epoch);
    Tensor xs = x, ys = y;
    if (options.shuffle) {
      const Tensor order = tensor(permutation(n, seed + static_cast<std::uint64_t>(epoch)));
      xs = gather(x, order, 0);
      ys = gather(y, order, 0);
    }
    Averages averages(options.metrics.size());
    for (std::int64_t begin = 0; begin < n; begin += options.batch_size) {
      const std::int64_t end = std::min(n, begin + options.batch_size);
      averages.add(step(slice(xs, 0, begin, end), slice(ys, 0, begin, end)), end - begin);
      progress.update(end, averages.loss, averages.metrics);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.end_epoch(averages.loss, averages.metrics, seconds);
    if (options.reset_states_at_epoch_end) nn::reset_states(model.module);
    history.loss.push_back(averages.loss);
    for (std::size_t i = 0; i < options.metrics.size(); ++i)
      history.metrics[options.metrics[i].name].push_back(averages.metrics[i]);
    history.seconds.push_back(seconds);
  }
  history.traces = step.tracing_count();
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
  FunctionOptions function_options;
  function_options.name = "evaluate_step";
  function_options.input_signature = {batch_spec(x, batch), batch_spec(y, batch)};
  auto step = kiln::function(
      [&](const Tensor& xb, const Tensor& yb) {
        nn::LearningPhaseScope phase(false);
        const Tensor pred = model.forward(xb);
        const Tensor value = loss(yb, pred);
        check_loss_value(value);
        return batch_values(value, options.metrics, yb, pred);
      },
      function_options);
  const std::int64_t n = x.dim(0);
  Averages averages(options.metrics.size());
  for (std::int64_t begin = 0; begin < n; begin += options.batch_size) {
    const std::int64_t end = std::min(n, begin + options.batch_size);
    averages.add(step(slice(x, 0, begin, end), slice(y, 0, begin, end)), end - begin);
  }
  EvaluateResult result;
  result.loss = averages.loss;
  for (std::size_t i = 0; i < options.metrics.size(); ++i)
    result.metrics[options.metrics[i].name] = averages.metrics[i];
  if (options.verbose > 0)
    print_evaluation(n, averages.loss, names_of(options.metrics), averages.metrics);
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

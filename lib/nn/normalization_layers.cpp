// nn::LayerNormalization and nn::BatchNormalization.
#include <utility>

#include "core/fail.hpp"
#include "kiln/autodiff.hpp"
#include "kiln/nn/functional.hpp"
#include "kiln/nn/normalization.hpp"
#include "kiln/ops.hpp"
#include "nn/layer_options.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view layer_norm_op = "nn.LayerNormalization";
constexpr std::string_view batch_norm_op = "nn.BatchNormalization";

/// The normalized axis and its (static) size, for a layer that holds one value per position of
/// that axis.
std::pair<std::int64_t, std::int64_t> feature_axis(std::string_view op, std::string_view path,
                                                   const Tensor& x, std::int64_t axis,
                                                   std::int64_t min_rank) {
  if (!x.defined()) kiln::detail::fail(op, "{}: the input is an undefined tensor", path);
  if (x.ndim() < min_rank)
    kiln::detail::fail(op, "{}: needs inputs of rank >= {}, got {} {}", path, min_rank,
                       dtype_name(x.dtype()), x.shape());
  if (axis < -x.ndim() || axis >= x.ndim())
    kiln::detail::fail(op, "{}: axis {} is out of range for the input {} {}", path, axis,
                       dtype_name(x.dtype()), x.shape());
  const std::int64_t a = axis < 0 ? axis + x.ndim() : axis;
  return {a, detail::checked_dim(op, path, x, x.ndim(), a, "normalized dim")};
}

/// v reshaped to broadcast along `axis` of a rank-`rank` tensor.
Tensor along(const Tensor& v, std::int64_t axis, std::int64_t rank) {
  if (!v.defined() || axis == rank - 1) return v;
  Shape shape;
  for (std::int64_t i = 0; i < rank; ++i) shape.push_back(i == axis ? v.dim(0) : 1);
  return reshape(v, shape);
}

void check_epsilon(std::string_view op, std::string_view path, double epsilon) {
  if (!(epsilon > 0.0))
    kiln::detail::fail(op, "{}: epsilon must be positive, got {}", path, epsilon);
}

}  // namespace

LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : Layer("layer_normalization", std::move(options.name)), options_(std::move(options)) {
  check_epsilon(layer_norm_op, path(), options_.epsilon);
}

Tensor LayerNormalization::operator()(const Tensor& x) {
  const auto [axis, size] = feature_axis(layer_norm_op, path(), x, options_.axis, 1);
  const Shape shape{size};
  Tensor gamma, beta;
  if (options_.scale) {
    detail::check_built(layer_norm_op, *this, "gamma", shape, x);
    note_input(x);
    gamma = weight("gamma", shape, options_.gamma_initializer, true, x.dtype()).value();
  }
  if (options_.center) {
    detail::check_built(layer_norm_op, *this, "beta", shape, x);
    note_input(x);
    beta = weight("beta", shape, options_.beta_initializer, true, x.dtype()).value();
  }
  if (axis == x.ndim() - 1) return layer_norm(x, gamma, beta, -1, options_.epsilon);
  const auto [mean, variance] = moments(x, {axis}, /*keepdims*/ true);
  Tensor y = (x - mean) * rsqrt(variance + options_.epsilon);
  if (gamma.defined()) y = y * along(gamma, axis, x.ndim());
  if (beta.defined()) y = y + along(beta, axis, x.ndim());
  return y;
}

Variable LayerNormalization::gamma() const {
  if (!options_.scale)
    kiln::detail::fail(layer_norm_op, "{} has no gamma (scale is false)", path());
  return variable("gamma");
}

Variable LayerNormalization::beta() const {
  if (!options_.center)
    kiln::detail::fail(layer_norm_op, "{} has no beta (center is false)", path());
  return variable("beta");
}

Config LayerNormalization::config() const {
  return base_config()
      .set("axis", options_.axis)
      .set("epsilon", options_.epsilon)
      .set("center", options_.center)
      .set("scale", options_.scale)
      .set("beta_initializer", init::to_config(options_.beta_initializer))
      .set("gamma_initializer", init::to_config(options_.gamma_initializer));
}

LayerNormalization LayerNormalization::from_config(const Config& config) {
  config.check_keys(
      {"name", "axis", "epsilon", "center", "scale", "beta_initializer", "gamma_initializer"});
  LayerNormalizationOptions o;
  o.name = config.get_string("name", "");
  o.axis = config.get_int("axis", o.axis);
  o.epsilon = config.get_double("epsilon", o.epsilon);
  o.center = config.get_bool("center", o.center);
  o.scale = config.get_bool("scale", o.scale);
  o.beta_initializer = detail::read_initializer(config, "beta_initializer", o.beta_initializer);
  o.gamma_initializer = detail::read_initializer(config, "gamma_initializer", o.gamma_initializer);
  return LayerNormalization(std::move(o));
}

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer("batch_normalization", std::move(options.name)), options_(std::move(options)) {
  check_epsilon(batch_norm_op, path(), options_.epsilon);
  if (!(options_.momentum >= 0.0 && options_.momentum <= 1.0))
    kiln::detail::fail(batch_norm_op, "{}: momentum must be in [0, 1], got {}", path(),
                       options_.momentum);
}

Tensor BatchNormalization::operator()(const Tensor& x) { return (*this)(x, learning_phase()); }

Tensor BatchNormalization::operator()(const Tensor& x, bool training) {
  const auto [axis, size] = feature_axis(batch_norm_op, path(), x, options_.axis, 2);
  const Shape shape{size};
  for (std::string_view name : {"gamma", "beta", "moving_mean", "moving_variance"})
    detail::check_built(batch_norm_op, *this, name, shape, x);
  note_input(x);
  const DType dtype = x.dtype();
  Tensor gamma, beta;
  if (options_.scale)
    gamma = weight("gamma", shape, options_.gamma_initializer, true, dtype).value();
  if (options_.center) beta = weight("beta", shape, options_.beta_initializer, true, dtype).value();
  const Variable moving_mean =
      weight("moving_mean", shape, options_.moving_mean_initializer, false, dtype);
  const Variable moving_variance =
      weight("moving_variance", shape, options_.moving_variance_initializer, false, dtype);
  if (!training)
    return batch_norm(x, moving_mean.value(), moving_variance.value(), gamma, beta,
                      options_.epsilon, axis);
  std::vector<std::int64_t> reduced;
  for (std::int64_t i = 0; i < x.ndim(); ++i)
    if (i != axis) reduced.push_back(i);
  const auto [mean, variance] = moments(x, reduced);
  const double m = options_.momentum;
  moving_mean.assign(moving_mean.value() * m + stop_gradient(mean) * (1.0 - m));
  moving_variance.assign(moving_variance.value() * m + stop_gradient(variance) * (1.0 - m));
  return batch_norm(x, mean, variance, gamma, beta, options_.epsilon, axis);
}

Variable BatchNormalization::gamma() const {
  if (!options_.scale)
    kiln::detail::fail(batch_norm_op, "{} has no gamma (scale is false)", path());
  return variable("gamma");
}

Variable BatchNormalization::beta() const {
  if (!options_.center)
    kiln::detail::fail(batch_norm_op, "{} has no beta (center is false)", path());
  return variable("beta");
}

Variable BatchNormalization::moving_mean() const { return variable("moving_mean"); }
Variable BatchNormalization::moving_variance() const { return variable("moving_variance"); }

Config BatchNormalization::config() const {
  return base_config()
      .set("axis", options_.axis)
      .set("momentum", options_.momentum)
      .set("epsilon", options_.epsilon)
      .set("center", options_.center)
      .set("scale", options_.scale)
      .set("beta_initializer", init::to_config(options_.beta_initializer))
      .set("gamma_initializer", init::to_config(options_.gamma_initializer))
      .set("moving_mean_initializer", init::to_config(options_.moving_mean_initializer))
      .set("moving_variance_initializer", init::to_config(options_.moving_variance_initializer));
}

BatchNormalization BatchNormalization::from_config(const Config& config) {
  config.check_keys({"name", "axis", "momentum", "epsilon", "center", "scale", "beta_initializer",
                     "gamma_initializer", "moving_mean_initializer",
                     "moving_variance_initializer"});
  BatchNormalizationOptions o;
  o.name = config.get_string("name", "");
  o.axis = config.get_int("axis", o.axis);
  o.momentum = config.get_double("momentum", o.momentum);
  o.epsilon = config.get_double("epsilon", o.epsilon);
  o.center = config.get_bool("center", o.center);
  o.scale = config.get_bool("scale", o.scale);
  o.beta_initializer = detail::read_initializer(config, "beta_initializer", o.beta_initializer);
  o.gamma_initializer = detail::read_initializer(config, "gamma_initializer", o.gamma_initializer);
  o.moving_mean_initializer =
      detail::read_initializer(config, "moving_mean_initializer", o.moving_mean_initializer);
  o.moving_variance_initializer = detail::read_initializer(config, "moving_variance_initializer",
                                                           o.moving_variance_initializer);
  return BatchNormalization(std::move(o));
}

}  // namespace kiln::nn

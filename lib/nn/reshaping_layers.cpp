// nn::Flatten, nn::Reshape and nn::ActivationLayer.
#include <optional>
#include <utility>

#include "core/fail.hpp"
#include "kiln/nn/reshaping.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view flatten_op = "nn.Flatten";
constexpr std::string_view reshape_op = "nn.Reshape";
constexpr std::string_view activation_op = "nn.Activation";

void check_input(std::string_view op, std::string_view path, const Tensor& x) {
  if (!x.defined()) kiln::detail::fail(op, "{}: the input is an undefined tensor", path);
  if (x.ndim() < 1)
    kiln::detail::fail(op, "{}: needs an input with a batch dim, got {} {}", path,
                       dtype_name(x.dtype()), x.shape());
}

/// The product of x's dims after the batch dim, or nullopt when one of them is dynamic.
std::optional<std::int64_t> rest_size(const Tensor& x) {
  std::int64_t n = 1;
  for (std::int64_t i = 1; i < x.ndim(); ++i) {
    if (is_dynamic_dim(x.dim(i))) return std::nullopt;
    n *= x.dim(i);
  }
  return n;
}

}  // namespace

Flatten::Flatten(std::string name) : Layer("flatten", std::move(name)) {}

Tensor Flatten::operator()(const Tensor& x) {
  check_input(flatten_op, path(), x);
  note_input(x);
  const std::optional<std::int64_t> rest = rest_size(x);
  if (!rest)
    kiln::detail::fail(flatten_op,
                       "{}: the input {} has a dynamic dim after the batch dim; Flatten needs "
                       "them static (only the batch dim may be dynamic)",
                       path(), x.shape());
  return reshape(x, {x.dim(0), *rest});
}

Config Flatten::config() const { return base_config(); }

Flatten Flatten::from_config(const Config& config) {
  config.check_keys({"name"});
  return Flatten(config.get_string("name", ""));
}

Reshape::Reshape(std::vector<std::int64_t> target_shape, std::string name)
    : Layer("reshape", std::move(name)), target_shape_(std::move(target_shape)) {
  int inferred = 0;
  for (std::int64_t d : target_shape_) {
    if (d == -1) ++inferred;
    if (d < -1 || (d == -1 && inferred > 1))
      kiln::detail::fail(reshape_op,
                         "{}: target_shape {} may hold sizes >= 0 and at most one -1 (the batch "
                         "dim is left out)",
                         path(), Shape(target_shape_));
  }
}

Tensor Reshape::operator()(const Tensor& x) {
  check_input(reshape_op, path(), x);
  std::int64_t known = 1;
  bool infer = false;
  for (std::int64_t d : target_shape_) {
    if (d == -1)
      infer = true;
    else
      known *= d;
  }
  const std::optional<std::int64_t> rest = rest_size(x);
  if (!rest)
    kiln::detail::fail(reshape_op,
                       "{}: the input {} has a dynamic dim after the batch dim; Reshape needs "
                       "them static (only the batch dim may be dynamic)",
                       path(), x.shape());
  if ((!infer && known != *rest) || (infer && (known == 0 || *rest % known != 0)))
    kiln::detail::fail(reshape_op, "{}: cannot reshape {} {} to [batch] + {}: {} elements per item",
                       path(), dtype_name(x.dtype()), x.shape(), Shape(target_shape_), *rest);
  note_input(x);
  Shape shape{x.dim(0)};
  for (std::int64_t d : target_shape_) shape.push_back(d == -1 ? *rest / known : d);
  return reshape(x, shape);
}

Config Reshape::config() const { return base_config().set("target_shape", target_shape_); }

Reshape Reshape::from_config(const Config& config) {
  config.check_keys({"name", "target_shape"});
  return Reshape(config.get_ints("target_shape"), config.get_string("name", ""));
}

ActivationLayer::ActivationLayer(Activation activation, std::string name)
    : Layer("activation", std::move(name)), activation_(activation) {}

ActivationLayer::ActivationLayer(std::string_view activation, std::string name)
    : ActivationLayer(activation_named(activation), std::move(name)) {}

Tensor ActivationLayer::operator()(const Tensor& x) {
  if (!x.defined())
    kiln::detail::fail(activation_op, "{}: the input is an undefined tensor", path());
  if (!is_floating(x.dtype()))
    kiln::detail::fail(activation_op, "{}: needs f32 or f64 inputs, got {} {}", path(),
                       dtype_name(x.dtype()), x.shape());
  note_input(x);
  return activate(activation_, x);
}

Config ActivationLayer::config() const {
  return base_config().set("activation", activation_name(activation_));
}

ActivationLayer ActivationLayer::from_config(const Config& config) {
  config.check_keys({"name", "activation"});
  return ActivationLayer(config.get_string("activation"), config.get_string("name", ""));
}

}  // namespace kiln::nn

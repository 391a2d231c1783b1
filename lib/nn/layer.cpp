// Layer base: lazily built variables with input-size checks, activations, learning phase.
#include "kiln/nn/layer.hpp"

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "kiln/creation.hpp"
#include "kiln/function.hpp"
#include "kiln/name_scope.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln::nn {

namespace {
thread_local bool training_phase = false;
}  // namespace

Tensor activate(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::none:
      return x;
    case Activation::relu:
      return relu(x);
    case Activation::sigmoid:
      return sigmoid(x);
    case Activation::tanh:
      return tanh(x);
    case Activation::softmax:
      return softmax(x, -1);
  }
  detail::fail("nn.activate", "unknown activation {}", static_cast<int>(a));
}

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::sigmoid:
      return "sigmoid";
    case Activation::tanh:
      return "tanh";
    case Activation::softmax:
      return "softmax";
  }
  return "unknown";
}

Activation activation_named(std::string_view name) {
  for (Activation a : {Activation::none, Activation::relu, Activation::sigmoid, Activation::tanh,
                       Activation::softmax})
    if (activation_name(a) == name) return a;
  detail::fail("nn.activation",
               "unknown activation '{}'; expected none, relu, sigmoid, tanh or softmax", name);
}

bool learning_phase() { return training_phase; }

LearningPhaseScope::LearningPhaseScope(bool training) : previous_(training_phase) {
  training_phase = training;
}
LearningPhaseScope::~LearningPhaseScope() { training_phase = previous_; }

Layer::Layer(std::string_view default_name, std::string name)
    : Module(name.empty() ? Module(AutomaticName{default_name}) : Module(std::move(name))) {}

void Layer::build(const Shape& input_shape, DType dtype) {
  constexpr std::string_view op = "nn.Layer.build";
  if (detail::active_trace() != nullptr)
    detail::fail(op, "{}: cannot build while a function is being traced (call the layer there)",
                 path());
  if (input_shape.empty())
    detail::fail(op, "{}: needs the input's shape, got a rank-0 shape", path());
  for (std::int64_t d : input_shape)
    if (d < -1) detail::fail(op, "{}: invalid dim {} in input shape {}", path(), d, input_shape);
  if (input_shape[0] == -1 && stateful())
    detail::fail(op,
                 "{} is stateful: its state is sized by the batch, so the input shape {} needs a "
                 "static batch dim",
                 path(), input_shape);
  // A placeholder of the shape (dynamic dims as such) and a one-element stand-in for each of
  // them in the tensor that selects the trace.
  Shape example = input_shape;
  for (std::int64_t& d : example)
    if (d == -1) d = 1;
  auto trace = kiln::function([this](const Tensor& x) { return (*this)(x); },
                              {.name = path() + ".build",
                               .input_signature = {TensorSpec(input_shape, dtype)},
                               .optimize = false});
  trace.get_concrete_function(zeros(example, dtype));
  built_input_ = InputSpec{input_shape, dtype};
}

void Layer::note_input(const Tensor& x) {
  if (built_input_ || !x.defined()) return;
  Shape shape = x.shape();
  for (std::int64_t& d : shape)
    if (is_dynamic_dim(d)) d = -1;
  built_input_ = InputSpec{std::move(shape), x.dtype()};
}

Config Layer::base_config() const {
  Config config(path());
  if (!has_automatic_name()) config.set("name", name());
  return config;
}

std::int64_t Layer::input_size(std::string_view op, const Tensor& x, std::int64_t min_rank) const {
  if (!x.defined()) detail::fail(op, "{}: the input is an undefined tensor", path());
  if (!is_floating(x.dtype()))
    detail::fail(op, "{}: needs f32 or f64 inputs, got {} {}", path(), dtype_name(x.dtype()),
                 x.shape());
  if (x.ndim() < min_rank)
    detail::fail(op, "{}: needs inputs of rank >= {}, got {} {}", path(), min_rank,
                 dtype_name(x.dtype()), x.shape());
  const std::int64_t size = x.dim(-1);
  if (is_dynamic_dim(size))
    detail::fail(op,
                 "{}: the last dim of the input {} is dynamic; layers size their variables "
                 "from it, so it must be static",
                 path(), x.shape());
  return size;
}

Variable Layer::input_weight(std::string_view op, const Tensor& x, std::string_view name,
                             const Shape& shape, const init::Initializer& initializer) {
  if (has_variable(name)) {
    Variable v = variable(name);
    if (v.shape() != shape || v.dtype() != x.dtype())
      detail::fail(op,
                   "{} was built for {} inputs with last dim {}; called with {} {} (variable {} "
                   "is {} {})",
                   path(), dtype_name(v.dtype()), v.shape()[0], dtype_name(x.dtype()), x.shape(),
                   v.name(), dtype_name(v.dtype()), v.shape());
    return v;
  }
  note_input(x);
  return add_variable(name, shape, initializer, /*trainable*/ true, x.dtype());
}

Variable Layer::weight(std::string_view name, const Shape& shape,
                       const init::Initializer& initializer, bool trainable, DType dtype) {
  return add_variable(name, shape, initializer, trainable, dtype);
}

bool Layer::stateful() const {
  for (const auto& child : children())
    if (is_stateful(*child.second)) return true;
  return false;
}

void Layer::reset_states() {
  for (const auto& child : children()) nn::reset_states(*child.second);
}

bool is_stateful(const Module& root) {
  if (const auto* layer = dynamic_cast<const Layer*>(&root)) return layer->stateful();
  for (const auto& child : root.children())
    if (is_stateful(*child.second)) return true;
  return false;
}

void reset_states(Module& root) {
  if (auto* layer = dynamic_cast<Layer*>(&root)) return layer->reset_states();
  for (const auto& child : root.children()) reset_states(*child.second);
}

}  // namespace kiln::nn

// nn::Sequential.
#include "kiln/nn/sequential.hpp"

#include "core/fail.hpp"

namespace kiln::nn {

namespace {
constexpr std::string_view sequential_op = "nn.Sequential";
}  // namespace

Sequential::Sequential(std::string name) : Layer("sequential", std::move(name)) {}

Sequential::Sequential(std::initializer_list<LayerArg> layers, std::string name)
    : Sequential(std::move(name)) {
  for (const LayerArg& layer : layers) add_layer(layer.get());
}

Layer& Sequential::add_layer(std::shared_ptr<Layer> layer) {
  if (!layer) detail::fail(sequential_op, "{}: cannot add a null layer", path());
  const std::string child_name = layer->name();
  Layer& added = add_module(child_name, std::move(layer));
  layers_.push_back(&added);
  return added;
}

Tensor Sequential::operator()(const Tensor& x) {
  if (layers_.empty()) detail::fail(sequential_op, "{} has no layers", path());
  Tensor h = x;
  for (Layer* layer : layers_) h = (*layer)(h);
  note_input(x);
  return h;
}

Layer& Sequential::layer(std::size_t i) const {
  if (i >= layers_.size())
    detail::fail(sequential_op, "{} has {} layers; asked for layer {}", path(), layers_.size(), i);
  return *layers_[i];
}

}  // namespace kiln::nn

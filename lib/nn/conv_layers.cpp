// nn::Conv1D, nn::Conv2D and nn::Conv2DTranspose over kiln::conv and kiln::conv_transpose.
#include <utility>

#include "core/fail.hpp"
#include "kiln/nn/conv.hpp"
#include "kiln/ops.hpp"
#include "nn/layer_options.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view conv1d_op = "nn.Conv1D";
constexpr std::string_view conv2d_op = "nn.Conv2D";
constexpr std::string_view conv2d_transpose_op = "nn.Conv2DTranspose";

/// The permutation from the channels-last kernel [k.., a, b] to the channels-first one
/// [b, a, k..].
std::vector<std::int64_t> channels_first_perm(std::size_t spatial) {
  std::vector<std::int64_t> perm{static_cast<std::int64_t>(spatial) + 1,
                                 static_cast<std::int64_t>(spatial)};
  for (std::size_t i = 0; i < spatial; ++i) perm.push_back(static_cast<std::int64_t>(i));
  return perm;
}

/// `base` drawn for the channels-last kernel shape `last` and transposed to channels-first,
/// so the fans (and the values for a seed) are those of the channels-last kernel.
init::Initializer channels_first_initializer(const init::Initializer& base, Shape last,
                                             std::size_t spatial) {
  return init::Initializer(base.name(), [base, last, spatial](const Shape&, DType dtype) {
    return transpose(base(last, dtype), channels_first_perm(spatial));
  });
}

/// The stored kernel shape and its initializer for the channels-last shape `last`.
std::pair<Shape, init::Initializer> kernel_layout(const Shape& last, std::size_t spatial,
                                                  DataLayout layout,
                                                  const init::Initializer& initializer) {
  if (layout == DataLayout::channels_last) return {last, initializer};
  Shape first;
  for (std::int64_t axis : channels_first_perm(spatial))
    first.push_back(last[static_cast<std::size_t>(axis)]);
  return {first, channels_first_initializer(initializer, last, spatial)};
}

/// The bias added along the channel axis of y.
Tensor add_bias(const Tensor& y, const Tensor& bias, DataLayout layout) {
  if (layout == DataLayout::channels_last) return y + bias;
  Shape shape{bias.dim(0)};
  for (std::int64_t i = 2; i < y.ndim(); ++i) shape.push_back(1);
  return y + reshape(bias, shape);
}

std::int64_t channel_axis(DataLayout layout) {
  return layout == DataLayout::channels_last ? -1 : 1;
}

}  // namespace

ConvLayer::ConvLayer(std::string_view op, std::string_view default_name, std::size_t spatial,
                     std::int64_t filters, const std::vector<std::int64_t>& kernel_size,
                     ConvLayerOptions options)
    : Layer(default_name, std::move(options.name)),
      op_(op),
      spatial_(spatial),
      filters_(filters),
      options_(std::move(options)) {
  if (filters <= 0) kiln::detail::fail(op, "{}: filters must be positive, got {}", path(), filters);
  if (kernel_size.empty()) kiln::detail::fail(op, "{}: kernel_size is empty", path());
  kernel_size_ = detail::per_axis(op, path(), "kernel_size", kernel_size, spatial, 1);
  options_.strides = detail::per_axis(op, path(), "strides", options_.strides, spatial, 1);
  options_.dilation_rate =
      detail::per_axis(op, path(), "dilation_rate", options_.dilation_rate, spatial, 1);
  detail::check_padding(op, path(), options_.padding);
  if (options_.groups <= 0 || filters % options_.groups != 0)
    kiln::detail::fail(op, "{}: groups must be positive and divide filters ({}), got {}", path(),
                       filters, options_.groups);
  for (std::size_t i = 0; i < spatial; ++i)
    if (options_.strides[i] > 1 && options_.dilation_rate[i] > 1)
      kiln::detail::fail(op, "{}: strides > 1 and dilation_rate > 1 together are not supported",
                         path());
}

Tensor ConvLayer::operator()(const Tensor& x) {
  const std::int64_t channels =
      detail::checked_dim(op_, path(), x, static_cast<std::int64_t>(spatial_) + 2,
                          channel_axis(options_.data_format), "channel dim");
  if (channels % options_.groups != 0)
    kiln::detail::fail(op_, "{}: the input's {} channels are not divisible by groups = {}", path(),
                       channels, options_.groups);
  Shape last(kernel_size_);
  last.push_back(channels / options_.groups);
  last.push_back(filters_);
  const auto [shape, initializer] =
      kernel_layout(last, spatial_, options_.data_format, options_.kernel_initializer);
  detail::check_built(op_, *this, "kernel", shape, x);
  note_input(x);
  const Variable kernel = weight("kernel", shape, initializer, true, x.dtype());
  Tensor y = conv(x, kernel.value(),
                  {.strides = options_.strides,
                   .dilations = options_.dilation_rate,
                   .padding = options_.padding,
                   .pads = {},
                   .groups = options_.groups,
                   .layout = options_.data_format});
  if (options_.use_bias)
    y = add_bias(y, weight("bias", {filters_}, options_.bias_initializer, true, x.dtype()).value(),
                 options_.data_format);
  return activate(options_.activation, y);
}

Variable ConvLayer::kernel() const { return variable("kernel"); }

Variable ConvLayer::bias() const {
  if (!options_.use_bias) kiln::detail::fail(op_, "{} has no bias (use_bias is false)", path());
  return variable("bias");
}

Config ConvLayer::config() const {
  return base_config()
      .set("filters", filters_)
      .set("kernel_size", kernel_size_)
      .set("strides", options_.strides)
      .set("padding", detail::padding_name(options_.padding))
      .set("dilation_rate", options_.dilation_rate)
      .set("groups", options_.groups)
      .set("activation", activation_name(options_.activation))
      .set("use_bias", options_.use_bias)
      .set("data_format", detail::data_format_name(options_.data_format))
      .set("kernel_initializer", init::to_config(options_.kernel_initializer))
      .set("bias_initializer", init::to_config(options_.bias_initializer));
}

ConvLayerOptions ConvLayer::options_from(std::string_view op, const Config& config) {
  config.check_keys({"name", "filters", "kernel_size", "strides", "padding", "dilation_rate",
                     "groups", "activation", "use_bias", "data_format", "kernel_initializer",
                     "bias_initializer"});
  ConvLayerOptions o;
  o.name = config.get_string("name", "");
  if (config.has("strides")) o.strides = config.get_ints("strides");
  o.padding = detail::padding_named(op, config.get_string("padding", "valid"));
  if (config.has("dilation_rate")) o.dilation_rate = config.get_ints("dilation_rate");
  o.groups = config.get_int("groups", o.groups);
  o.activation = activation_named(config.get_string("activation", "none"));
  o.use_bias = config.get_bool("use_bias", o.use_bias);
  o.data_format = detail::data_format_named(op, config.get_string("data_format", "channels_last"));
  o.kernel_initializer =
      detail::read_initializer(config, "kernel_initializer", o.kernel_initializer);
  o.bias_initializer = detail::read_initializer(config, "bias_initializer", o.bias_initializer);
  return o;
}

Conv1D::Conv1D(std::int64_t filters, std::vector<std::int64_t> kernel_size,
               ConvLayerOptions options)
    : ConvLayer(conv1d_op, "conv1d", 1, filters, kernel_size, std::move(options)) {}

Conv1D Conv1D::from_config(const Config& config) {
  ConvLayerOptions options = options_from(conv1d_op, config);
  return Conv1D(config.get_int("filters"), config.get_ints("kernel_size"), std::move(options));
}

Conv2D::Conv2D(std::int64_t filters, std::vector<std::int64_t> kernel_size,
               ConvLayerOptions options)
    : ConvLayer(conv2d_op, "conv2d", 2, filters, kernel_size, std::move(options)) {}

Conv2D Conv2D::from_config(const Config& config) {
  ConvLayerOptions options = options_from(conv2d_op, config);
  return Conv2D(config.get_int("filters"), config.get_ints("kernel_size"), std::move(options));
}

Conv2DTranspose::Conv2DTranspose(std::int64_t filters, std::vector<std::int64_t> kernel_size,
                                 ConvTransposeLayerOptions options)
    : Layer("conv2d_transpose", std::move(options.name)),
      filters_(filters),
      options_(std::move(options)) {
  constexpr std::string_view op = conv2d_transpose_op;
  if (filters <= 0) kiln::detail::fail(op, "{}: filters must be positive, got {}", path(), filters);
  if (kernel_size.empty()) kiln::detail::fail(op, "{}: kernel_size is empty", path());
  kernel_size_ = detail::per_axis(op, path(), "kernel_size", kernel_size, 2, 1);
  options_.strides = detail::per_axis(op, path(), "strides", options_.strides, 2, 1);
  options_.dilation_rate =
      detail::per_axis(op, path(), "dilation_rate", options_.dilation_rate, 2, 1);
  options_.output_padding =
      detail::per_axis(op, path(), "output_padding", options_.output_padding, 2, 0, 0);
  detail::check_padding(op, path(), options_.padding);
  for (std::size_t i = 0; i < 2; ++i)
    if (options_.output_padding[i] >= options_.strides[i])
      kiln::detail::fail(op, "{}: output_padding {} must be below strides {}", path(),
                         Shape(options_.output_padding), Shape(options_.strides));
}

Tensor Conv2DTranspose::operator()(const Tensor& x) {
  const std::int64_t channels = detail::checked_dim(
      conv2d_transpose_op, path(), x, 4, channel_axis(options_.data_format), "channel dim");
  Shape last(kernel_size_);
  last.push_back(filters_);
  last.push_back(channels);
  const auto [shape, initializer] =
      kernel_layout(last, 2, options_.data_format, options_.kernel_initializer);
  detail::check_built(conv2d_transpose_op, *this, "kernel", shape, x);
  note_input(x);
  const Variable kernel = weight("kernel", shape, initializer, true, x.dtype());
  Tensor y = conv_transpose(x, kernel.value(),
                            {.strides = options_.strides,
                             .dilations = options_.dilation_rate,
                             .padding = options_.padding,
                             .pads = {},
                             .output_padding = options_.output_padding,
                             .layout = options_.data_format});
  if (options_.use_bias)
    y = add_bias(y, weight("bias", {filters_}, options_.bias_initializer, true, x.dtype()).value(),
                 options_.data_format);
  return activate(options_.activation, y);
}

Variable Conv2DTranspose::kernel() const { return variable("kernel"); }

Variable Conv2DTranspose::bias() const {
  if (!options_.use_bias)
    kiln::detail::fail(conv2d_transpose_op, "{} has no bias (use_bias is false)", path());
  return variable("bias");
}

Config Conv2DTranspose::config() const {
  return base_config()
      .set("filters", filters_)
      .set("kernel_size", kernel_size_)
      .set("strides", options_.strides)
      .set("padding", detail::padding_name(options_.padding))
      .set("output_padding", options_.output_padding)
      .set("dilation_rate", options_.dilation_rate)
      .set("activation", activation_name(options_.activation))
      .set("use_bias", options_.use_bias)
      .set("data_format", detail::data_format_name(options_.data_format))
      .set("kernel_initializer", init::to_config(options_.kernel_initializer))
      .set("bias_initializer", init::to_config(options_.bias_initializer));
}

Conv2DTranspose Conv2DTranspose::from_config(const Config& config) {
  constexpr std::string_view op = conv2d_transpose_op;
  config.check_keys({"name", "filters", "kernel_size", "strides", "padding", "output_padding",
                     "dilation_rate", "activation", "use_bias", "data_format", "kernel_initializer",
                     "bias_initializer"});
  ConvTransposeLayerOptions o;
  o.name = config.get_string("name", "");
  if (config.has("strides")) o.strides = config.get_ints("strides");
  o.padding = detail::padding_named(op, config.get_string("padding", "valid"));
  if (config.has("output_padding")) o.output_padding = config.get_ints("output_padding");
  if (config.has("dilation_rate")) o.dilation_rate = config.get_ints("dilation_rate");
  o.activation = activation_named(config.get_string("activation", "none"));
  o.use_bias = config.get_bool("use_bias", o.use_bias);
  o.data_format = detail::data_format_named(op, config.get_string("data_format", "channels_last"));
  o.kernel_initializer =
      detail::read_initializer(config, "kernel_initializer", o.kernel_initializer);
  o.bias_initializer = detail::read_initializer(config, "bias_initializer", o.bias_initializer);
  return Conv2DTranspose(config.get_int("filters"), config.get_ints("kernel_size"), std::move(o));
}

}  // namespace kiln::nn

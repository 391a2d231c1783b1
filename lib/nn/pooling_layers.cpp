// The pooling layers over kiln::max_pool, avg_pool, global_max_pool and global_avg_pool.
#include <utility>

#include "core/fail.hpp"
#include "kiln/nn/pooling.hpp"
#include "nn/layer_options.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view max_pooling1d_op = "nn.MaxPooling1D";
constexpr std::string_view max_pooling2d_op = "nn.MaxPooling2D";
constexpr std::string_view average_pooling1d_op = "nn.AveragePooling1D";
constexpr std::string_view average_pooling2d_op = "nn.AveragePooling2D";
constexpr std::string_view global_average_pooling1d_op = "nn.GlobalAveragePooling1D";
constexpr std::string_view global_average_pooling2d_op = "nn.GlobalAveragePooling2D";
constexpr std::string_view global_max_pooling1d_op = "nn.GlobalMaxPooling1D";
constexpr std::string_view global_max_pooling2d_op = "nn.GlobalMaxPooling2D";

std::int64_t channel_axis(DataLayout layout) {
  return layout == DataLayout::channels_last ? -1 : 1;
}

}  // namespace

PoolingLayer::PoolingLayer(std::string_view op, std::string_view default_name, std::size_t spatial,
                           bool max, const std::vector<std::int64_t>& pool_size,
                           PoolingLayerOptions options)
    : Layer(default_name, std::move(options.name)),
      op_(op),
      spatial_(spatial),
      max_(max),
      options_(std::move(options)) {
  if (pool_size.empty()) kiln::detail::fail(op, "{}: pool_size is empty", path());
  pool_size_ = detail::per_axis(op, path(), "pool_size", pool_size, spatial, 1);
  options_.strides = options_.strides.empty()
                         ? pool_size_
                         : detail::per_axis(op, path(), "strides", options_.strides, spatial, 1);
  detail::check_padding(op, path(), options_.padding);
}

Tensor PoolingLayer::operator()(const Tensor& x) {
  detail::checked_dim(op_, path(), x, static_cast<std::int64_t>(spatial_) + 2,
                      channel_axis(options_.data_format), "channel dim");
  note_input(x);
  const PoolOptions pool{.window = pool_size_,
                         .strides = options_.strides,
                         .padding = options_.padding,
                         .pads = {},
                         .layout = options_.data_format,
                         .count_padding = false};
  return max_ ? max_pool(x, pool) : avg_pool(x, pool);
}

Config PoolingLayer::config() const {
  return base_config()
      .set("pool_size", pool_size_)
      .set("strides", options_.strides)
      .set("padding", detail::padding_name(options_.padding))
      .set("data_format", detail::data_format_name(options_.data_format));
}

PoolingLayerOptions PoolingLayer::options_from(std::string_view op, const Config& config) {
  config.check_keys({"name", "pool_size", "strides", "padding", "data_format"});
  PoolingLayerOptions o;
  o.name = config.get_string("name", "");
  if (config.has("strides")) o.strides = config.get_ints("strides");
  o.padding = detail::padding_named(op, config.get_string("padding", "valid"));
  o.data_format = detail::data_format_named(op, config.get_string("data_format", "channels_last"));
  return o;
}

MaxPooling1D::MaxPooling1D(std::vector<std::int64_t> pool_size, PoolingLayerOptions options)
    : PoolingLayer(max_pooling1d_op, "max_pooling1d", 1, true, pool_size, std::move(options)) {}

MaxPooling1D MaxPooling1D::from_config(const Config& config) {
  PoolingLayerOptions options = options_from(max_pooling1d_op, config);
  return MaxPooling1D(config.get_ints("pool_size"), std::move(options));
}

MaxPooling2D::MaxPooling2D(std::vector<std::int64_t> pool_size, PoolingLayerOptions options)
    : PoolingLayer(max_pooling2d_op, "max_pooling2d", 2, true, pool_size, std::move(options)) {}

MaxPooling2D MaxPooling2D::from_config(const Config& config) {
  PoolingLayerOptions options = options_from(max_pooling2d_op, config);
  return MaxPooling2D(config.get_ints("pool_size"), std::move(options));
}

AveragePooling1D::AveragePooling1D(std::vector<std::int64_t> pool_size, PoolingLayerOptions options)
    : PoolingLayer(average_pooling1d_op, "average_pooling1d", 1, false, pool_size,
                   std::move(options)) {}

AveragePooling1D AveragePooling1D::from_config(const Config& config) {
  PoolingLayerOptions options = options_from(average_pooling1d_op, config);
  return AveragePooling1D(config.get_ints("pool_size"), std::move(options));
}

AveragePooling2D::AveragePooling2D(std::vector<std::int64_t> pool_size, PoolingLayerOptions options)
    : PoolingLayer(average_pooling2d_op, "average_pooling2d", 2, false, pool_size,
                   std::move(options)) {}

AveragePooling2D AveragePooling2D::from_config(const Config& config) {
  PoolingLayerOptions options = options_from(average_pooling2d_op, config);
  return AveragePooling2D(config.get_ints("pool_size"), std::move(options));
}

GlobalPoolingLayer::GlobalPoolingLayer(std::string_view op, std::string_view default_name,
                                       std::size_t spatial, bool max,
                                       GlobalPoolingLayerOptions options)
    : Layer(default_name, std::move(options.name)),
      op_(op),
      spatial_(spatial),
      max_(max),
      options_(std::move(options)) {}

Tensor GlobalPoolingLayer::operator()(const Tensor& x) {
  detail::checked_dim(op_, path(), x, static_cast<std::int64_t>(spatial_) + 2,
                      channel_axis(options_.data_format), "channel dim");
  note_input(x);
  return max_ ? global_max_pool(x, options_.data_format, options_.keepdims)
              : global_avg_pool(x, options_.data_format, options_.keepdims);
}

Config GlobalPoolingLayer::config() const {
  return base_config()
      .set("data_format", detail::data_format_name(options_.data_format))
      .set("keepdims", options_.keepdims);
}

GlobalPoolingLayerOptions GlobalPoolingLayer::options_from(std::string_view op,
                                                           const Config& config) {
  config.check_keys({"name", "data_format", "keepdims"});
  GlobalPoolingLayerOptions o;
  o.name = config.get_string("name", "");
  o.data_format = detail::data_format_named(op, config.get_string("data_format", "channels_last"));
  o.keepdims = config.get_bool("keepdims", o.keepdims);
  return o;
}

GlobalAveragePooling1D::GlobalAveragePooling1D(GlobalPoolingLayerOptions options)
    : GlobalPoolingLayer(global_average_pooling1d_op, "global_average_pooling1d", 1, false,
                         std::move(options)) {}

GlobalAveragePooling1D GlobalAveragePooling1D::from_config(const Config& config) {
  return GlobalAveragePooling1D(options_from(global_average_pooling1d_op, config));
}

GlobalAveragePooling2D::GlobalAveragePooling2D(GlobalPoolingLayerOptions options)
    : GlobalPoolingLayer(global_average_pooling2d_op, "global_average_pooling2d", 2, false,
                         std::move(options)) {}

GlobalAveragePooling2D GlobalAveragePooling2D::from_config(const Config& config) {
  return GlobalAveragePooling2D(options_from(global_average_pooling2d_op, config));
}

GlobalMaxPooling1D::GlobalMaxPooling1D(GlobalPoolingLayerOptions options)
    : GlobalPoolingLayer(global_max_pooling1d_op, "global_max_pooling1d", 1, true,
                         std::move(options)) {}

GlobalMaxPooling1D GlobalMaxPooling1D::from_config(const Config& config) {
  return GlobalMaxPooling1D(options_from(global_max_pooling1d_op, config));
}

GlobalMaxPooling2D::GlobalMaxPooling2D(GlobalPoolingLayerOptions options)
    : GlobalPoolingLayer(global_max_pooling2d_op, "global_max_pooling2d", 2, true,
                         std::move(options)) {}

GlobalMaxPooling2D GlobalMaxPooling2D::from_config(const Config& config) {
  return GlobalMaxPooling2D(options_from(global_max_pooling2d_op, config));
}

}  // namespace kiln::nn

// Settings shared by the convolution, pooling, normalization and attention layers.
#include "nn/layer_options.hpp"

#include "core/fail.hpp"
#include "kiln/init.hpp"

namespace kiln::nn::detail {

std::string_view padding_name(ConvPadding padding) {
  return padding == ConvPadding::same ? "same" : "valid";
}

ConvPadding padding_named(std::string_view op, std::string_view name) {
  if (name == "valid") return ConvPadding::valid;
  if (name == "same") return ConvPadding::same;
  kiln::detail::fail(op, "unknown padding '{}'; expected valid or same", name);
}

std::string_view data_format_name(DataLayout layout) {
  return layout == DataLayout::channels_first ? "channels_first" : "channels_last";
}

DataLayout data_format_named(std::string_view op, std::string_view name) {
  if (name == "channels_last") return DataLayout::channels_last;
  if (name == "channels_first") return DataLayout::channels_first;
  kiln::detail::fail(op, "unknown data_format '{}'; expected channels_last or channels_first",
                     name);
}

std::vector<std::int64_t> per_axis(std::string_view op, std::string_view path,
                                   std::string_view what, const std::vector<std::int64_t>& values,
                                   std::size_t spatial, std::int64_t fallback,
                                   std::int64_t minimum) {
  std::vector<std::int64_t> out;
  if (values.empty())
    out.assign(spatial, fallback);
  else if (values.size() == 1)
    out.assign(spatial, values[0]);
  else if (values.size() == spatial)
    out = values;
  else
    kiln::detail::fail(op, "{}: {} needs 1 or {} values, got {}", path, what, spatial,
                       Shape(values));
  for (std::int64_t v : out)
    if (v < minimum)
      kiln::detail::fail(op, "{}: {} must be >= {}, got {}", path, what, minimum, Shape(out));
  return out;
}

void check_padding(std::string_view op, std::string_view path, ConvPadding padding) {
  if (padding != ConvPadding::valid && padding != ConvPadding::same)
    kiln::detail::fail(op, "{}: padding must be valid or same", path);
}

std::int64_t checked_dim(std::string_view op, std::string_view path, const Tensor& x,
                         std::int64_t rank, std::int64_t axis, std::string_view what) {
  if (!x.defined()) kiln::detail::fail(op, "{}: the input is an undefined tensor", path);
  if (!is_floating(x.dtype()))
    kiln::detail::fail(op, "{}: needs f32 or f64 inputs, got {} {}", path, dtype_name(x.dtype()),
                       x.shape());
  if (x.ndim() != rank)
    kiln::detail::fail(op, "{}: needs inputs of rank {}, got {} {}", path, rank,
                       dtype_name(x.dtype()), x.shape());
  const std::int64_t size = x.dim(axis);
  if (is_dynamic_dim(size))
    kiln::detail::fail(op,
                       "{}: the {} of the input {} is dynamic; the layer sizes its variables "
                       "from it, so it must be static",
                       path, what, x.shape());
  return size;
}

void check_built(std::string_view op, const Module& layer, std::string_view name,
                 const Shape& shape, const Tensor& x) {
  if (!layer.has_variable(name)) return;
  const Variable v = layer.variable(name);
  if (v.shape() != shape || v.dtype() != x.dtype())
    kiln::detail::fail(op,
                       "{} was built for other inputs: variable {} is {} {}, a call with {} {} "
                       "needs {} {}",
                       layer.path(), v.name(), dtype_name(v.dtype()), v.shape(),
                       dtype_name(x.dtype()), x.shape(), dtype_name(x.dtype()), shape);
}

init::Initializer read_initializer(const Config& config, std::string_view key,
                                   const init::Initializer& fallback) {
  return config.has(key) ? init::from_config(config.get_config(key)) : fallback;
}

}  // namespace kiln::nn::detail

#pragma once
// Settings shared by the convolution, pooling, normalization and attention layers: how they
// are checked, named in architecture files and read back.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/config.hpp"
#include "kiln/conv.hpp"
#include "kiln/module.hpp"
#include "kiln/tensor.hpp"

namespace kiln::nn::detail {

/// "valid" or "same"; explicit_pads is not a layer setting.
std::string_view padding_name(ConvPadding padding);
ConvPadding padding_named(std::string_view op, std::string_view name);
/// "channels_last" or "channels_first".
std::string_view data_format_name(DataLayout layout);
DataLayout data_format_named(std::string_view op, std::string_view name);

/// `values` with one entry per spatial axis: empty gives `fallback` for each, one value is
/// repeated (Keras's int form), `spatial` values are kept; anything else, or a value below
/// `minimum`, is an error naming the layer and the setting.
std::vector<std::int64_t> per_axis(std::string_view op, std::string_view path,
                                   std::string_view what, const std::vector<std::int64_t>& values,
                                   std::size_t spatial, std::int64_t fallback,
                                   std::int64_t minimum = 1);

/// Checks that the layer's padding is valid or same.
void check_padding(std::string_view op, std::string_view path, ConvPadding padding);

/// Checks x: defined, floating, of rank `rank`, with a static size on `axis`; returns that size.
std::int64_t checked_dim(std::string_view op, std::string_view path, const Tensor& x,
                         std::int64_t rank, std::int64_t axis, std::string_view what);

/// Fails with "[op] <path> was built for ..." if the layer's variable `name` exists with
/// another shape or dtype than a call with x needs.
void check_built(std::string_view op, const Module& layer, std::string_view name,
                 const Shape& shape, const Tensor& x);

/// The initializer stored under `key`, or `fallback`.
init::Initializer read_initializer(const Config& config, std::string_view key,
                                   const init::Initializer& fallback);

}  // namespace kiln::nn::detail

// Event, Summary.Value and HistogramProto messages; TensorFlow's histogram buckets.
#include "summary/events.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

namespace kiln::detail::summary {

namespace {

// Event
constexpr int event_wall_time = 1, event_step = 2, event_file_version = 3, event_graph_def = 4,
              event_summary = 5;
// Summary
constexpr int summary_value = 1;
// Summary.Value
constexpr int value_tag = 1, value_simple_value = 2, value_image = 4, value_histo = 5,
              value_tensor = 8, value_metadata = 9;
// Summary.Image
constexpr int image_height = 1, image_width = 2, image_colorspace = 3, image_encoded = 4;
// HistogramProto
constexpr int histo_min = 1, histo_max = 2, histo_num = 3, histo_sum = 4, histo_sum_squares = 5,
              histo_bucket_limit = 6, histo_bucket = 7;
// SummaryMetadata and its PluginData
constexpr int metadata_plugin_data = 1, plugin_name = 1;
// TensorProto, TensorShapeProto
constexpr int tensor_dtype = 1, tensor_shape = 2, tensor_string_val = 8;
constexpr int dt_string = 7;

/// The bucket of v: the index of the first limit above v (DBL_MAX itself falls into the last
/// bucket). The limits grow by 1.1 from 1e-12 on either side of 0, so a logarithm lands on the
/// bucket or next to it, and the comparisons after it make the answer exact (a binary search over
/// the 1,551 limits costs 11 unpredictable branches per value). The logarithm is read off the
/// double's bits (exponent + mantissa - 1, within 0.09 of log2), so it may land one bucket off;
/// the comparisons fix that.
std::size_t bucket_index(const std::vector<double>& limits, double v) {
  const std::size_t middle = limits.size() / 2;               // limits[middle] == 0
  const auto positive = static_cast<std::ptrdiff_t>(middle);  // limits above 0
  const double a = std::fabs(v);
  std::ptrdiff_t k = 0;
  if (a > 1e-12) {
    static const double log2_to_steps = std::log(2.0) / std::log(1.1);
    const auto bits = std::bit_cast<std::uint64_t>(a * 1e12);  // >= 1: a normal number or inf
    const double log2 = static_cast<double>(static_cast<int>((bits >> 52) & 0x7FF) - 1023) +
                        static_cast<double>(bits & ((std::uint64_t{1} << 52) - 1)) * 0x1p-52;
    const double steps = log2 * log2_to_steps;
    k = steps < static_cast<double>(positive) ? static_cast<std::ptrdiff_t>(steps) : positive - 1;
  }
  auto at = static_cast<std::ptrdiff_t>(middle) + (v >= 0 ? k + 2 : -k - 1);
  const auto size = static_cast<std::ptrdiff_t>(limits.size());
  at = std::clamp<std::ptrdiff_t>(at, 0, size - 1);
  while (at > 0 && limits[static_cast<std::size_t>(at - 1)] > v) --at;
  while (at < size - 1 && limits[static_cast<std::size_t>(at)] <= v) ++at;
  return static_cast<std::size_t>(at);
}

proto::Message event_header(double wall_time, std::int64_t step) {
  proto::Message event;
  event.float64(event_wall_time, wall_time);
  if (step != 0) event.varint(event_step, step);
  return event;
}

}  // namespace

std::string file_version_event(double wall_time) {
  return event_header(wall_time, 0).bytes(event_file_version, "brain.Event:2").release();
}

std::string summary_event(double wall_time, std::int64_t step, const proto::Message& value) {
  proto::Message summary;
  summary.message(summary_value, value);
  return event_header(wall_time, step).message(event_summary, summary).release();
}

std::string graph_event(double wall_time, std::string_view graph_def) {
  return event_header(wall_time, 0).bytes(event_graph_def, graph_def).release();
}

proto::Message scalar_value(std::string_view tag, float value) {
  proto::Message v;
  v.bytes(value_tag, tag).float32(value_simple_value, value);
  return v;
}

proto::Message histogram_value(std::string_view tag, std::span<const double> values) {
  const Histogram h = histogram_of(values);
  proto::Message histo;
  histo.float64(histo_min, h.min)
      .float64(histo_max, h.max)
      .float64(histo_num, h.num)
      .float64(histo_sum, h.sum)
      .float64(histo_sum_squares, h.sum_squares)
      .packed_float64(histo_bucket_limit, h.bucket_limit)
      .packed_float64(histo_bucket, h.bucket);
  proto::Message v;
  v.bytes(value_tag, tag).message(value_histo, histo);
  return v;
}

proto::Message text_value(std::string_view tag, std::string_view text) {
  proto::Message plugin;
  plugin.bytes(plugin_name, "text");
  proto::Message metadata;
  metadata.message(metadata_plugin_data, plugin);
  proto::Message tensor;
  tensor.varint(tensor_dtype, dt_string)
      .message(tensor_shape, proto::Message())  // a scalar: no dims
      .bytes(tensor_string_val, text);
  proto::Message v;
  v.bytes(value_tag, tag).message(value_metadata, metadata).message(value_tensor, tensor);
  return v;
}

proto::Message image_value(std::string_view tag, int height, int width, int channels,
                           std::string_view png) {
  proto::Message image;
  image.varint(image_height, height)
      .varint(image_width, width)
      .varint(image_colorspace, channels)  // 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
      .bytes(image_encoded, png);
  proto::Message v;
  v.bytes(value_tag, tag).message(value_image, image);
  return v;
}

const std::vector<double>& histogram_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> positive;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * positive.size() + 1);
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

Histogram histogram_of(std::span<const double> values) {
  const std::vector<double>& limits = histogram_limits();
  std::vector<double> counts(limits.size(), 0.0);
  Histogram h;
  if (!values.empty()) {
    h.min = DBL_MAX;
    h.max = -DBL_MAX;
  }
  for (const double v : values) {
    h.min = std::min(h.min, v);
    h.max = std::max(h.max, v);
    h.sum += v;
    h.sum_squares += v * v;
    counts[bucket_index(limits, v)] += 1.0;
  }
  h.num = static_cast<double>(values.size());
  for (std::size_t i = 0; i < limits.size();) {
    double end = limits[i];
    const double count = counts[i];
    ++i;
    if (count == 0.0)
      for (; i < limits.size() && counts[i] == 0.0; ++i) end = limits[i];
    h.bucket_limit.push_back(end);
    h.bucket.push_back(count);
  }
  return h;
}

}  // namespace kiln::detail::summary

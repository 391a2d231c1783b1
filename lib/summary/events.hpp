#pragma once
// The protocol buffers of TensorBoard's event files, encoded with summary/wire.hpp. Field
// numbers are those of TensorBoard's event.proto, summary.proto, tensor.proto, graph.proto,
// node_def.proto and attr_value.proto.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "summary/wire.hpp"

namespace kiln::detail {
struct GraphData;
}

namespace kiln::detail::summary {

/// The first event of every file: file_version "brain.Event:2".
std::string file_version_event(double wall_time);
/// An Event holding a Summary with one value.
std::string summary_event(double wall_time, std::int64_t step, const proto::Message& value);
/// An Event holding a serialized GraphDef.
std::string graph_event(double wall_time, std::string_view graph_def);

/// Summary.Value messages.
proto::Message scalar_value(std::string_view tag, float value);
proto::Message histogram_value(std::string_view tag, std::span<const double> values);
proto::Message text_value(std::string_view tag, std::string_view text);
proto::Message image_value(std::string_view tag, int height, int width, int channels,
                           std::string_view png);

/// TensorFlow's histogram bucket limits (ascending): -DBL_MAX, -1e20.., -1e-12, 0, 1e-12 ..
/// (x1.1) .. 1e20, DBL_MAX.
const std::vector<double>& histogram_limits();

/// The contents of a HistogramProto.
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit;  // the upper limit of each bucket
  std::vector<double> bucket;        // its count
};
/// `values` counted into the buckets of histogram_limits(), runs of empty buckets merged (one
/// empty bucket with limit DBL_MAX when there are no values). Values must be finite.
Histogram histogram_of(std::span<const double> values);

/// A PNG of 8-bit pixels, rows top to bottom, channels interleaved (1 to 4).
std::string encode_png(std::span<const std::uint8_t> pixels, int height, int width, int channels);

/// A GraphDef of `graph` (see kiln::summary::FileWriter::graph), and how many nodes it has.
struct GraphDefBytes {
  std::string bytes;
  std::size_t nodes = 0;
};
GraphDefBytes graph_def(const GraphData& graph);

}  // namespace kiln::detail::summary

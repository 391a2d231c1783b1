#pragma once
/// @file summary.hpp
/// TensorBoard event files (kiln::summary): scalars, histograms, text, images and graphs that
/// `tensorboard --logdir` shows, written as TensorBoard's own writers write them: TFRecord
/// files named `events.out.tfevents.TIME.HOST.PID.N` holding `Event` protocol buffers.
///
/// ```cpp
/// kiln::summary::FileWriter writer("logs/run1");
/// for (std::int64_t step = 0; step < 100; ++step) {
///   writer.scalar("loss", loss_value, step);
///   if (step % 10 == 0) writer.histogram("dense/kernel", dense.kernel().value(), step);
/// }
/// writer.graph(train_step.get_concrete_function(x, y));  // the Graphs tab
/// ```
///
/// A writer queues events and a background thread writes them: when max_queue events wait,
/// every flush_seconds, on flush() and on close() or destruction, so a crash loses at most the
/// events of the last interval. Every member function may be called from several threads at
/// once; several writers (in one folder or in several) are independent. A write error (a full
/// disk) is raised by the next call on the writer.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/function.hpp"
#include "kiln/tensor.hpp"

namespace kiln::summary {

struct FileWriterOptions {
  /// Seconds between background flushes (> 0).
  double flush_seconds = 10.0;
  /// Queued events that make the background thread write at once (>= 1).
  std::size_t max_queue = 10;
  /// Appended to the event file's name.
  std::string filename_suffix = {};
};

/// Writes one event file in `log_dir` (created with its parents if missing).
class FileWriter {
 public:
  /// Creates the folder and the file and writes the file's version event; a kiln::Error naming
  /// the folder if either cannot be made.
  explicit FileWriter(const std::filesystem::path& log_dir, const FileWriterOptions& options = {});
  /// Flushes and closes (a write error is reported to kiln's log sink, not thrown).
  ~FileWriter();
  FileWriter(FileWriter&&) noexcept;
  FileWriter& operator=(FileWriter&&) noexcept;
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  /// A scalar (TensorBoard's Scalars tab), stored as a 32-bit float like tf.summary.scalar.
  void scalar(std::string_view tag, double value, std::int64_t step);
  /// A scalar from a one-element tensor of any dtype.
  void scalar(std::string_view tag, const Tensor& value, std::int64_t step);
  /// The distribution of a tensor's elements (Histograms and Distributions tabs) in TensorFlow's
  /// bucket layout: limits at +-1e-12 * 1.1^k up to 1e20, 0 and +-DBL_MAX; bucket i counts the
  /// values v with limit[i-1] <= v < limit[i], and runs of empty buckets are merged. Also
  /// min, max, count, sum and sum of squares. NaN or infinite elements are an error.
  void histogram(std::string_view tag, const Tensor& values, std::int64_t step);
  /// Text (the Text tab; rendered as Markdown).
  void text(std::string_view tag, std::string_view text, std::int64_t step);
  /// An image (the Images tab), stored as PNG: a [H, W, C] tensor with C = 1 (grey), 2 (grey and
  /// alpha), 3 (RGB) or 4 (RGBA), or [H, W] grey. Floating values are taken as 0..1 (clipped
  /// and scaled to 0..255, as tf.summary.image does); integer values must be in 0..255.
  void image(std::string_view tag, const Tensor& image, std::int64_t step);
  /// The optimized graph of a concrete function (the Graphs tab): one node per graph node,
  /// named after the variable it reads or as "<op>_<n>", with its op, its inputs, its dtype and
  /// its output shape (-1 for a dynamic dim). An op is grouped under the module of the first
  /// variable it reads (else of its first input), so each layer is one expandable group, and
  /// the bodies of scan, while_loop and cond nodes are nested under their node's name.
  void graph(const ConcreteFunction& function);

  /// Writes every queued event and flushes the file.
  void flush();
  /// Flushes and closes the file; later calls are an error. Idempotent.
  void close();
  /// The event file.
  const std::filesystem::path& path() const;
  // A moved-from writer may only be destroyed or assigned to; other calls are a kiln::Error.

 private:
  struct Impl;
  Impl& live() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::summary

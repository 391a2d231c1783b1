// kiln::summary::FileWriter: events queued by any thread, written by a background thread.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "jit/concrete_function.hpp"
#include "jit/log.hpp"
#include "kiln/ops.hpp"
#include "kiln/summary.hpp"
#include "summary/events.hpp"
#include "summary/record.hpp"

namespace kiln::summary {

namespace {

constexpr std::string_view op = "summary.FileWriter";

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "localhost";
  return name;
}

/// events.out.tfevents.<seconds>.<host>.<pid>.<n><suffix>: unique for every writer of a
/// process, so several writers may share a folder.
std::string event_file_name(const std::string& suffix) {
  static std::atomic<int> writers{0};
  const auto seconds = static_cast<long long>(std::floor(wall_time()));
  return fmt::format("events.out.tfevents.{:010d}.{}.{}.{}{}", seconds, host_name(),
                     static_cast<long long>(getpid()), writers++, suffix);
}

void check_tag(std::string_view what, std::string_view tag) {
  if (tag.empty()) kiln::detail::fail(what, "the tag is empty");
}

/// A tensor's elements as doubles (any dtype), read eagerly.
std::vector<double> values_of(std::string_view what, const Tensor& t) {
  if (!t.defined()) kiln::detail::fail(what, "the tensor is undefined");
  if (t.impl()->is_symbolic())
    kiln::detail::fail(what,
                       "needs a concrete tensor; inside kiln::function return the value and "
                       "write it after the call");
  return cast(t, f64).contiguous().to_vector<double>();
}

}  // namespace

struct FileWriter::Impl {
  std::filesystem::path path;
  FileWriterOptions options;
  std::FILE* file = nullptr;

  std::mutex queue_mutex;  // pending, closing, error
  std::condition_variable wake;
  std::vector<std::string> pending;  // framed records, in order
  bool closing = false;
  std::string error;  // the first write error, raised by the next call

  std::mutex file_mutex;  // the file: one drain at a time, so records stay in order
  std::thread flusher;

  /// Writes what is queued and flushes; records an error instead of throwing (it may run on the
  /// background thread).
  void drain() {
    std::lock_guard file_lock(file_mutex);
    std::vector<std::string> batch;
    {
      std::lock_guard lock(queue_mutex);
      batch.swap(pending);
      if (!error.empty() || file == nullptr) return;
    }
    for (const std::string& record : batch)
      if (std::fwrite(record.data(), 1, record.size(), file) != record.size()) {
        set_error(std::strerror(errno));
        return;
      }
    if (std::fflush(file) != 0) set_error(std::strerror(errno));
  }

  void set_error(const char* reason) {
    std::lock_guard lock(queue_mutex);
    if (error.empty()) error = fmt::format("writing {}: {}", path.string(), reason);
  }

  void run_flusher() {
    const auto interval = std::chrono::duration<double>(options.flush_seconds);
    std::unique_lock lock(queue_mutex);
    while (!closing) {
      wake.wait_for(lock, interval,
                    [this] { return closing || pending.size() >= options.max_queue; });
      lock.unlock();
      drain();
      lock.lock();
    }
  }

  void push(std::string event) {
    std::string record = kiln::detail::tf_record(event);
    bool full = false;
    {
      std::lock_guard lock(queue_mutex);
      if (closing) kiln::detail::fail(op, "{} is closed", path.string());
      if (!error.empty()) kiln::detail::fail(op, "{}", error);
      pending.push_back(std::move(record));
      full = pending.size() >= options.max_queue;
    }
    if (full) wake.notify_one();
  }

  void close() {
    {
      std::lock_guard lock(queue_mutex);
      if (closing) return;
      closing = true;
    }
    wake.notify_one();
    if (flusher.joinable()) flusher.join();
    drain();
    std::lock_guard file_lock(file_mutex);
    if (file != nullptr && std::fclose(file) != 0) set_error(std::strerror(errno));
    file = nullptr;
  }

  void raise_error() {
    std::lock_guard lock(queue_mutex);
    if (!error.empty()) kiln::detail::fail(op, "{}", error);
  }
};

FileWriter::FileWriter(const std::filesystem::path& log_dir, const FileWriterOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!(options.flush_seconds > 0) || !std::isfinite(options.flush_seconds))
    kiln::detail::fail(op, "flush_seconds must be positive, got {}", options.flush_seconds);
  if (options.max_queue == 0) kiln::detail::fail(op, "max_queue must be at least 1");
  if (options.filename_suffix.find('/') != std::string::npos)
    kiln::detail::fail(op, "filename_suffix '{}' must not contain '/'", options.filename_suffix);
  if (log_dir.empty()) kiln::detail::fail(op, "the log folder is an empty path");
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec || !std::filesystem::is_directory(log_dir))
    kiln::detail::fail(op, "cannot create the log folder '{}': {}", log_dir.string(),
                       ec ? ec.message() : std::string("it exists and is not a folder"));
  impl_->options = options;
  impl_->path = log_dir / event_file_name(options.filename_suffix);
  impl_->file = std::fopen(impl_->path.c_str(), "wbx");
  if (impl_->file == nullptr)
    kiln::detail::fail(op, "cannot create the event file '{}': {}", impl_->path.string(),
                       std::strerror(errno));
  impl_->push(kiln::detail::summary::file_version_event(wall_time()));
  impl_->drain();
  impl_->raise_error();
  impl_->flusher = std::thread([impl = impl_.get()] { impl->run_flusher(); });
}

FileWriter::~FileWriter() {
  if (!impl_) return;
  impl_->close();
  if (!impl_->error.empty()) kiln::detail::log_warning(fmt::format("{}: {}", op, impl_->error));
}

FileWriter::FileWriter(FileWriter&&) noexcept = default;

FileWriter& FileWriter::operator=(FileWriter&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

FileWriter::Impl& FileWriter::live() const {
  if (!impl_) kiln::detail::fail(op, "this writer was moved from");
  return *impl_;
}

void FileWriter::scalar(std::string_view tag, double value, std::int64_t step) {
  check_tag("summary.scalar", tag);
  live().push(kiln::detail::summary::summary_event(
      wall_time(), step, kiln::detail::summary::scalar_value(tag, static_cast<float>(value))));
}

void FileWriter::scalar(std::string_view tag, const Tensor& value, std::int64_t step) {
  const std::vector<double> v = values_of("summary.scalar", value);
  if (v.size() != 1)
    kiln::detail::fail("summary.scalar", "'{}' needs one element, got a tensor of shape {}", tag,
                       value.shape());
  scalar(tag, v[0], step);
}

void FileWriter::histogram(std::string_view tag, const Tensor& values, std::int64_t step) {
  check_tag("summary.histogram", tag);
  const std::vector<double> v = values_of("summary.histogram", values);
  const auto bad = std::find_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
  if (bad != v.end())
    kiln::detail::fail("summary.histogram", "'{}' has a non-finite value ({} at element {})", tag,
                       *bad, bad - v.begin());
  live().push(kiln::detail::summary::summary_event(wall_time(), step,
                                                   kiln::detail::summary::histogram_value(tag, v)));
}

void FileWriter::text(std::string_view tag, std::string_view text, std::int64_t step) {
  check_tag("summary.text", tag);
  live().push(kiln::detail::summary::summary_event(wall_time(), step,
                                                   kiln::detail::summary::text_value(tag, text)));
}

void FileWriter::image(std::string_view tag, const Tensor& image, std::int64_t step) {
  constexpr std::string_view what = "summary.image";
  check_tag(what, tag);
  if (!image.defined()) kiln::detail::fail(what, "the tensor is undefined");
  if (image.ndim() != 2 && image.ndim() != 3)
    kiln::detail::fail(what, "'{}' must be [height, width, channels] or [height, width], got {}",
                       tag, image.shape());
  const std::int64_t h = image.dim(0), w = image.dim(1), c = image.ndim() == 3 ? image.dim(2) : 1;
  if (c < 1 || c > 4)
    kiln::detail::fail(what, "'{}' must have 1 to 4 channels (grey, grey+alpha, RGB, RGBA), got {}",
                       tag, c);
  if (h < 1 || w < 1 || h > (1 << 20) || w > (1 << 20))
    kiln::detail::fail(what, "'{}' has an unusable size {}x{}", tag, h, w);
  const std::vector<double> v = values_of(what, image);
  std::vector<std::uint8_t> pixels(v.size());
  const bool floating = is_floating(image.dtype());
  for (std::size_t i = 0; i < v.size(); ++i) {
    double x = v[i];
    if (std::isnan(x)) kiln::detail::fail(what, "'{}' has a NaN at element {}", tag, i);
    if (floating) {
      x = std::round(std::clamp(x, 0.0, 1.0) * 255.0);
    } else if (x < 0 || x > 255) {
      kiln::detail::fail(what,
                         "'{}' is an integer image, so its values must be in 0..255; "
                         "element {} is {}",
                         tag, i, x);
    }
    pixels[i] = static_cast<std::uint8_t>(x);
  }
  const std::string png = kiln::detail::summary::encode_png(
      pixels, static_cast<int>(h), static_cast<int>(w), static_cast<int>(c));
  live().push(kiln::detail::summary::summary_event(
      wall_time(), step,
      kiln::detail::summary::image_value(tag, static_cast<int>(h), static_cast<int>(w),
                                         static_cast<int>(c), png)));
}

void FileWriter::graph(const ConcreteFunction& function) {
  if (!function.impl() || !function.impl()->graph)
    kiln::detail::fail("summary.graph", "the concrete function has no graph");
  const auto def = kiln::detail::summary::graph_def(*function.impl()->graph);
  live().push(kiln::detail::summary::graph_event(wall_time(), def.bytes));
}

void FileWriter::flush() {
  Impl& impl = live();
  impl.raise_error();
  {
    std::lock_guard lock(impl.queue_mutex);
    if (impl.closing) kiln::detail::fail(op, "{} is closed", impl.path.string());
  }
  impl.drain();
  impl.raise_error();
}

void FileWriter::close() {
  Impl& impl = live();
  impl.close();
  impl.raise_error();
}

const std::filesystem::path& FileWriter::path() const { return live().path; }

}  // namespace kiln::summary

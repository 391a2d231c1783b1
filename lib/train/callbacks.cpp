// Logs, History::at, the callback list that fit runs, and the built-in callbacks but TensorBoard
// (train/tensorboard.cpp).
#include "kiln/callbacks.hpp"

#include <fmt/args.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "core/fail.hpp"
#include "io/weights_file.hpp"
#include "kiln/checkpoint.hpp"
#include "kiln/ops.hpp"
#include "state/weights.hpp"
#include "train/learning_rate.hpp"

namespace kiln::train {

namespace {

std::string joined(const std::vector<std::string>& keys) {
  return keys.empty() ? std::string("none") : fmt::format("{}", fmt::join(keys, ", "));
}

bool maximizes(Mode mode, std::string_view key) {
  if (mode != Mode::automatic) return mode == Mode::max;
  return key.find("acc") != std::string_view::npos || key.find("auc") != std::string_view::npos;
}

/// Fails from `who` unless `folder` (created if missing) takes a new file.
void check_writable_folder(std::string_view who, const std::filesystem::path& folder) {
  const std::filesystem::path dir = folder.empty() ? std::filesystem::path(".") : folder;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    kiln::detail::fail(who, "cannot create the folder '{}': {}", dir.string(),
                       ec ? ec.message() : std::string("it exists and is not a folder"));
  const std::filesystem::path probe =
      dir / fmt::format(".kiln-write-probe-{}", static_cast<long long>(getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "wx");
  if (f == nullptr)
    kiln::detail::fail(who, "cannot write in the folder '{}': {}", dir.string(),
                       std::strerror(errno));
  std::fclose(f);
  std::filesystem::remove(probe, ec);
}

}  // namespace

void Logs::set(std::string_view key, double value) {
  for (auto& item : items_)
    if (item.first == key) {
      item.second = value;
      return;
    }
  items_.emplace_back(std::string(key), value);
}

bool Logs::contains(std::string_view key) const {
  for (const auto& item : items_)
    if (item.first == key) return true;
  return false;
}

double Logs::at(std::string_view key) const {
  for (const auto& item : items_)
    if (item.first == key) return item.second;
  std::vector<std::string> keys;
  for (const auto& item : items_) keys.push_back(item.first);
  kiln::detail::fail("train.Logs", "no value '{}'; the logs have: {}", key, joined(keys));
}

const std::vector<double>& History::at(std::string_view key) const {
  if (key == "loss") return loss;
  if (key == "val_loss" && !val_loss.empty()) return val_loss;
  if (key == "learning_rate") return learning_rate;
  if (const auto it = metrics.find(std::string(key)); it != metrics.end()) return it->second;
  if (key.substr(0, 4) == "val_")
    if (const auto it = val_metrics.find(std::string(key.substr(4))); it != val_metrics.end())
      return it->second;
  std::vector<std::string> keys{"loss"};
  for (const auto& [name, values] : metrics) keys.push_back(name);
  if (!val_loss.empty()) keys.emplace_back("val_loss");
  for (const auto& [name, values] : val_metrics) keys.push_back("val_" + name);
  keys.emplace_back("learning_rate");
  kiln::detail::fail("train.History", "no values '{}'; the history has: {}", key, joined(keys));
}

void FitState::require_key(std::string_view who, std::string_view key) const {
  for (const std::string& k : epoch_keys_)
    if (k == key) return;
  kiln::detail::fail(who, "monitors '{}', which this fit does not log; it logs: {}{}", key,
                     joined(epoch_keys_),
                     key.substr(0, 4) == "val_" && !has_validation
                         ? " (val_ values need validation_data or validation_split)"
                         : "");
}

FitState& Callback::fit() const {
  if (state_ == nullptr)
    kiln::detail::fail("train.Callback", "fit() is only available while train::fit runs it");
  return *state_;
}

namespace detail {

CallbackList::CallbackList(const std::vector<std::reference_wrapper<Callback>>& callbacks,
                           FitState& state)
    : callbacks_(callbacks) {
  for (std::size_t i = 0; i < callbacks_.size(); ++i) {
    Callback& c = callbacks_[i].get();
    for (std::size_t j = 0; j < i; ++j)
      if (&callbacks_[j].get() == &c)
        kiln::detail::fail("train.fit", "callback {} is also callback {}: pass each once", i, j);
    if (c.state_ != nullptr)
      kiln::detail::fail("train.fit", "callback {} is already running in another fit", i);
  }
  for (auto& c : callbacks_) c.get().state_ = &state;
}

CallbackList::~CallbackList() {
  for (auto& c : callbacks_) c.get().state_ = nullptr;
}

template <class Hook>
void CallbackList::run(const Hook& hook) {
  if (callbacks_.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  for (auto& c : callbacks_) hook(c.get());
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CallbackList::train_begin(const Logs& logs) {
  run([&](Callback& c) { c.on_train_begin(logs); });
}
void CallbackList::train_end(const Logs& logs) {
  run([&](Callback& c) { c.on_train_end(logs); });
}
void CallbackList::epoch_begin(int epoch, const Logs& logs) {
  run([&](Callback& c) { c.on_epoch_begin(epoch, logs); });
}
void CallbackList::epoch_end(int epoch, const Logs& logs) {
  run([&](Callback& c) { c.on_epoch_end(epoch, logs); });
}
void CallbackList::batch_begin(std::int64_t batch, const Logs& logs) {
  run([&](Callback& c) { c.on_batch_begin(batch, logs); });
}
void CallbackList::batch_end(std::int64_t batch, const Logs& logs) {
  run([&](Callback& c) { c.on_batch_end(batch, logs); });
}

double CallbackList::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

}  // namespace detail

// ModelCheckpoint

namespace {

std::filesystem::path format_path(std::string_view who, const std::string& pattern, int epoch,
                                  const Logs& logs) {
  fmt::dynamic_format_arg_store<fmt::format_context> args;
  args.push_back(fmt::arg("epoch", epoch + 1));
  for (const auto& [key, value] : logs.items()) args.push_back(fmt::arg(key.c_str(), value));
  try {
    return fmt::vformat(pattern, args);
  } catch (const fmt::format_error& e) {
    std::vector<std::string> names{"epoch"};
    for (const auto& item : logs.items()) names.push_back(item.first);
    kiln::detail::fail(who, "the path '{}' does not format ({}); it may name: {}", pattern,
                       e.what(), joined(names));
  }
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string filepath, ModelCheckpointOptions options)
    : filepath_(std::move(filepath)), options_(std::move(options)) {
  if (filepath_.empty()) kiln::detail::fail("train.ModelCheckpoint", "the path is empty");
  if (options_.save_freq < 1)
    kiln::detail::fail("train.ModelCheckpoint", "save_freq must be >= 1 epoch, got {}",
                       options_.save_freq);
}

void ModelCheckpoint::on_train_begin(const Logs&) {
  constexpr std::string_view who = "train.ModelCheckpoint";
  if (writing_.valid()) writing_.wait();  // left by a fit that threw (which reported its error)
  writing_ = {};
  if (options_.save_best_only) fit().require_key(who, options_.monitor);
  maximize_ = maximizes(options_.mode, options_.monitor);
  best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  saved_.clear();
  // The path formats with every value fit will log, and its folder takes files.
  Logs sample;
  for (const std::string& key : fit().epoch_keys()) sample.set(key, 0.0);
  check_writable_folder(who, format_path(who, filepath_, 0, sample).parent_path());
}

void ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  constexpr std::string_view who = "train.ModelCheckpoint";
  if ((epoch + 1) % options_.save_freq != 0) return;
  if (options_.save_best_only) {
    if (!logs.contains(options_.monitor)) return;  // an epoch without validation
    const double value = logs.at(options_.monitor);
    if (std::isnan(value) || !(maximize_ ? value > best_ : value < best_)) return;
    best_ = value;
  }
  const std::filesystem::path path = format_path(who, filepath_, epoch, logs);
  wait_for_write();
  if (!path.parent_path().empty()) std::filesystem::create_directories(path.parent_path());
  std::map<std::string, Tensor> values;
  for (const auto& [name, variable] : kiln::detail::relative_variables(fit().model))
    values[name] = variable.value();
  writing_ = std::async(std::launch::async, [path, values = std::move(values)] {
    io::detail::write_weights_file(path, values, {}, "train.ModelCheckpoint");
  });
  saved_.push_back(path);
  if (options_.verbose > 0)
    fmt::print("epoch {}: saved {}{}\n", epoch + 1, path.string(),
               options_.save_best_only ? fmt::format(" ({} {:.5g})", options_.monitor, best_)
                                       : std::string());
}

void ModelCheckpoint::wait_for_write() {
  if (writing_.valid()) writing_.get();  // rethrows the write's error
}

void ModelCheckpoint::on_train_end(const Logs&) { wait_for_write(); }

ModelCheckpoint::~ModelCheckpoint() {
  if (writing_.valid()) writing_.wait();  // a fit that threw: its error is already on its way
}

// EarlyStopping

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  if (options_.patience < 0)
    kiln::detail::fail("train.EarlyStopping", "patience must be >= 0, got {}", options_.patience);
  if (!(options_.min_delta >= 0) || !std::isfinite(options_.min_delta))
    kiln::detail::fail("train.EarlyStopping",
                       "min_delta must be >= 0 (its sign follows the "
                       "mode), got {}",
                       options_.min_delta);
}

bool EarlyStopping::improved(double value, double reference) const {
  return maximize_ ? value - options_.min_delta > reference
                   : value + options_.min_delta < reference;
}

void EarlyStopping::on_train_begin(const Logs&) {
  fit().require_key("train.EarlyStopping", options_.monitor);
  maximize_ = maximizes(options_.mode, options_.monitor);
  best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  best_epoch_ = -1;
  wait_ = 0;
  stopped_epoch_ = -1;
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  if (!logs.contains(options_.monitor) || epoch < options_.start_from_epoch) return;
  const double value = logs.at(options_.monitor);
  const auto snapshot = [this] {
    best_weights_.clear();
    for (const Variable& v : fit().model.variables()) best_weights_.emplace_back(v, v.value());
  };
  if (options_.restore_best_weights && best_weights_.empty()) snapshot();
  ++wait_;
  if (improved(value, best_)) {
    best_ = value;
    best_epoch_ = epoch;
    if (options_.restore_best_weights) snapshot();
    // The count restarts only when the value also beats the baseline.
    if (!options_.baseline || improved(value, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    fit().stop_training = true;
    if (options_.restore_best_weights && !best_weights_.empty()) {
      for (const auto& [variable, value_at_best] : best_weights_) variable.assign(value_at_best);
      if (options_.verbose > 0)
        fmt::print("restored the weights of epoch {} ({} {:.5g})\n", best_epoch_ + 1,
                   options_.monitor, best_);
    }
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  best_weights_.clear();  // the snapshot holds tensors as large as the model
  if (stopped_epoch_ >= 0 && options_.verbose > 0)
    fmt::print("epoch {}: early stopping ({} has not improved for {} epochs)\n", stopped_epoch_ + 1,
               options_.monitor, options_.patience);
}

// LearningRateScheduler

double detail::learning_rate_value(const optim::Optimizer& optimizer) {
  return cast(optimizer.learning_rate(), f64).item<double>();
}

LearningRateScheduler::LearningRateScheduler(Rule schedule, int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_) kiln::detail::fail("train.LearningRateScheduler", "the schedule is empty");
}

void LearningRateScheduler::on_train_begin(const Logs&) {
  optim::Optimizer& optimizer = fit().optimizer;
  try {
    optimizer.set_learning_rate(detail::learning_rate_value(optimizer));
  } catch (const Error& e) {
    kiln::detail::fail("train.LearningRateScheduler", "cannot set the learning rate of {}: {}",
                       optimizer.path(), e.what());
  }
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  optim::Optimizer& optimizer = fit().optimizer;
  const double rate = schedule_(epoch, detail::learning_rate_value(optimizer));
  if (!std::isfinite(rate) || rate < 0)
    kiln::detail::fail("train.LearningRateScheduler",
                       "the schedule returned {} for epoch {}; a rate must be finite and >= 0",
                       rate, epoch);
  optimizer.set_learning_rate(rate);
  if (verbose_ > 0) fmt::print("epoch {}: learning rate {:.6g}\n", epoch + 1, rate);
}

// CSVLogger

CSVLogger::CSVLogger(std::filesystem::path path, CSVLoggerOptions options)
    : path_(std::move(path)), options_(options) {
  if (path_.empty()) kiln::detail::fail("train.CSVLogger", "the path is empty");
}

CSVLogger::~CSVLogger() {
  if (file_ != nullptr) std::fclose(file_);
}

void CSVLogger::on_train_begin(const Logs&) {
  if (file_ != nullptr) std::fclose(file_);
  std::error_code ec;
  const bool has_rows = options_.append && std::filesystem::exists(path_, ec) &&
                        std::filesystem::file_size(path_, ec) > 0;
  file_ = std::fopen(path_.c_str(), options_.append ? "a" : "w");
  if (file_ == nullptr)
    kiln::detail::fail("train.CSVLogger", "cannot open '{}' for writing: {}", path_.string(),
                       std::strerror(errno));
  columns_ = fit().epoch_keys();
  if (!has_rows) {
    std::string header = "epoch";
    for (const std::string& c : columns_) header += options_.separator + c;
    fmt::print(file_, "{}\n", header);
    std::fflush(file_);
  }
}

void CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (file_ == nullptr) return;
  std::string row = fmt::format("{}", epoch);
  for (const std::string& c : columns_)
    row += options_.separator + (logs.contains(c) ? fmt::format("{}", logs.at(c)) : "NA");
  fmt::print(file_, "{}\n", row);
  if (std::fflush(file_) != 0)
    kiln::detail::fail("train.CSVLogger", "writing '{}': {}", path_.string(), std::strerror(errno));
}

void CSVLogger::on_train_end(const Logs&) {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace kiln::train

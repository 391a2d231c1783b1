// train::fit with validation and callbacks: the values logged, the hooks' order, each built-in
// callback's Keras semantics, their errors before training, one trace for the whole fit, and
// TensorBoard's reader on the TensorBoard callback's files.
#include <fmt/format.h>
#include <sys/wait.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include <kiln/kiln.hpp>

#include "io_test_support.hpp"
#include "train/progress.hpp"

using kiln::Tensor;
using kiln::Variable;
namespace nn = kiln::nn;
namespace train = kiln::train;
namespace fs = std::filesystem;

namespace {

struct Data {
  Tensor x, y;
};

/// A linearly separable problem.
Data separable(std::int64_t n, std::uint64_t seed) {
  const Tensor x = kiln::random::normal({n, 4}, 0, 1, seed);
  const Tensor y =
      kiln::cast(kiln::matmul(x, kiln::tensor({1.f, -2.f, 0.5f, 1.f}, {4, 1})) > 0.f, kiln::f32);
  return {x, y};
}

nn::Sequential small_model() {
  return nn::Sequential(
      {nn::Dense(8, nn::Activation::relu), nn::Dense(1, nn::Activation::sigmoid)});
}

std::vector<Tensor> values_of(const kiln::Module& m) {
  std::vector<Tensor> out;
  for (const Variable& v : m.variables()) out.push_back(v.value());
  return out;
}

bool same_values(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].to_vector<float>() != b[i].to_vector<float>()) return false;
  return true;
}

std::vector<std::string> keys_of(const train::Logs& logs) {
  std::vector<std::string> out;
  for (const auto& item : logs.items()) out.push_back(item.first);
  return out;
}

/// A metric whose value the test scripts per epoch: it reads a variable that a callback sets
/// at each epoch's start (read at call time, so the traced step sees each new value).
struct Scripted {
  Variable value{kiln::scalar(0.f), "scripted_value", false};
  std::vector<double> per_epoch;
  train::LambdaCallback setter;
  explicit Scripted(std::vector<double> values) : per_epoch(std::move(values)) {
    setter.epoch_begin = [this](int epoch, const train::Logs&) {
      value.assign(kiln::scalar(static_cast<float>(per_epoch.at(static_cast<std::size_t>(epoch)))));
    };
  }
  train::Metric metric(std::string name = "scripted") {
    return {std::move(name), [this](const Tensor&, const Tensor& y_pred) {
              return value.value() + 0.f * kiln::mean(y_pred);
            }};
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("fit validates on validation_data after every epoch, with one trace each",
          "[train][callbacks]") {
  kiln::clear_session();
  const Data train_data = separable(64, 1), val = separable(24, 2);
  auto model = small_model();
  kiln::optim::Adam opt({.learning_rate = 0.05});
  std::vector<std::vector<std::string>> epoch_keys;
  train::LambdaCallback spy;
  spy.epoch_end = [&](int, const train::Logs& logs) { epoch_keys.push_back(keys_of(logs)); };
  const auto h = train::fit(model, opt, nn::losses::binary_crossentropy, train_data.x, train_data.y,
                            {.epochs = 4,
                             .batch_size = 16,
                             .seed = 3,
                             .verbose = 0,
                             .metrics = {train::metrics::binary_accuracy()},
                             .validation_data = train::ValidationData{val.x, val.y},
                             .validation_batch_size = 10,
                             .callbacks = {spy}});
  CHECK(h.traces == 1);
  CHECK(h.validation_traces == 1);  // 24 samples in batches of 10: the last has 4
  REQUIRE(h.val_loss.size() == 4);
  REQUIRE(h.val_metrics.at("binary_accuracy").size() == 4);
  CHECK(h.at("val_binary_accuracy") == h.val_metrics.at("binary_accuracy"));
  CHECK(h.at("loss") == h.loss);
  CHECK(h.epochs == std::vector<int>{0, 1, 2, 3});
  REQUIRE(epoch_keys.size() == 4);
  CHECK(epoch_keys[0] == std::vector<std::string>{"loss", "binary_accuracy", "val_loss",
                                                  "val_binary_accuracy", "learning_rate"});
  // The last validation saw the final weights: it is evaluate's result.
  const auto e =
      train::evaluate(model, nn::losses::binary_crossentropy, val.x, val.y,
                      {.batch_size = 10, .metrics = {train::metrics::binary_accuracy()}});
  CHECK(h.val_loss.back() == Approx(e.loss).epsilon(1e-6));
  CHECK(h.val_metrics.at("binary_accuracy").back() == Approx(e.metrics.at("binary_accuracy")));
  CHECK(h.learning_rate == std::vector<double>(4, static_cast<double>(0.05f)));
  CHECK_THROWS_WITH(h.at("val_los"), Catch::Contains("no values 'val_los'") &&
                                         Catch::Contains("val_loss, val_binary_accuracy"));
}

TEST_CASE("validation_split holds out the last samples; validation_freq skips epochs",
          "[train][callbacks]") {
  kiln::clear_session();
  const Data d = separable(40, 4);
  auto model = small_model();
  kiln::optim::SGD opt({.learning_rate = 0.1});
  std::int64_t steps = 0;
  train::LambdaCallback spy;
  spy.train_begin = [&](const train::Logs&) {};
  spy.batch_end = [&](std::int64_t, const train::Logs& logs) {
    ++steps;
    CHECK(keys_of(logs) == std::vector<std::string>{"loss"});
  };
  const auto h = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                            {.epochs = 3,
                             .batch_size = 10,
                             .verbose = 0,
                             .validation_split = 0.25,
                             .validation_freq = 2,
                             .callbacks = {spy}});
  CHECK(steps == 9);  // 30 training samples, 3 batches per epoch
  REQUIRE(h.val_loss.size() == 3);
  CHECK(std::isnan(h.val_loss[0]));  // epoch 1 is not a multiple of 2
  CHECK(!std::isnan(h.val_loss[1]));
  CHECK(!std::isnan(h.val_loss[2]));  // the last epoch always validates
  const auto e = train::evaluate(model, nn::losses::binary_crossentropy,
                                 kiln::slice(d.x, 0, 30, 40), kiln::slice(d.y, 0, 30, 40));
  CHECK(h.val_loss[2] == Approx(e.loss).epsilon(1e-6));
}

TEST_CASE("callbacks run in Keras's order with fit's state", "[train][callbacks]") {
  kiln::clear_session();
  const Data d = separable(20, 5);
  nn::Dense model(1, nn::Activation::sigmoid);
  kiln::optim::SGD opt;
  std::vector<std::string> calls;
  struct Recorder : train::Callback {
    std::vector<std::string>* calls;
    explicit Recorder(std::vector<std::string>* c) : calls(c) {}
    void on_train_begin(const train::Logs&) override {
      calls->push_back(
          fmt::format("train_begin steps={} epochs={}", fit().steps_per_epoch, fit().epochs));
      CHECK(fit().train_function.graph().num_nodes() > 0);
    }
    void on_epoch_begin(int epoch, const train::Logs&) override {
      calls->push_back(fmt::format("epoch_begin {}", epoch));
    }
    void on_batch_begin(std::int64_t batch, const train::Logs&) override {
      calls->push_back(fmt::format("batch_begin {}", batch));
    }
    void on_batch_end(std::int64_t batch, const train::Logs&) override {
      calls->push_back(fmt::format("batch_end {} step={}", batch, fit().global_step));
    }
    void on_epoch_end(int epoch, const train::Logs&) override {
      calls->push_back(fmt::format("epoch_end {} history={}", epoch, fit().history.loss.size()));
    }
    void on_train_end(const train::Logs& logs) override {
      calls->push_back(fmt::format("train_end {}", logs.contains("loss")));
    }
  } recorder(&calls);
  train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
             {.epochs = 2, .batch_size = 12, .verbose = 0, .callbacks = {recorder}});
  CHECK(calls == std::vector<std::string>{"train_begin steps=2 epochs=2", "epoch_begin 0",
                                          "batch_begin 0", "batch_end 0 step=1", "batch_begin 1",
                                          "batch_end 1 step=2", "epoch_end 0 history=1",
                                          "epoch_begin 1", "batch_begin 0", "batch_end 0 step=3",
                                          "batch_begin 1", "batch_end 1 step=4",
                                          "epoch_end 1 history=2", "train_end true"});
  struct Outside : train::Callback {
    void poke() { (void)fit(); }
  } outside;
  CHECK_THROWS_WITH(outside.poke(), Catch::Contains("only available while train::fit runs it"));
  CHECK_THROWS_WITH(train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                               {.verbose = 0, .callbacks = {recorder, recorder}}),
                    Catch::Contains("callback 1 is also callback 0"));
}

TEST_CASE("EarlyStopping stops after patience epochs and restores the best weights",
          "[train][callbacks]") {
  kiln::clear_session();
  const Data d = separable(32, 6);
  auto model = small_model();
  kiln::optim::Adam opt({.learning_rate = 0.05});
  Scripted scripted({5, 4, 3, 3.5, 3.25, 2.0, 1.0, 0.5});
  train::EarlyStopping stop(
      {.monitor = "scripted", .patience = 2, .restore_best_weights = true, .verbose = 0});
  std::vector<Tensor> at_best;
  train::LambdaCallback keep;
  keep.epoch_end = [&](int epoch, const train::Logs&) {
    if (epoch == 2) at_best = values_of(model);
  };
  const auto h = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                            {.epochs = 8,
                             .batch_size = 8,
                             .verbose = 0,
                             .metrics = {scripted.metric()},
                             .callbacks = {scripted.setter, stop, keep}});
  CHECK(h.epochs == std::vector<int>{0, 1, 2, 3, 4});  // 3.5 and 3.25 do not beat 3
  CHECK(h.at("scripted") == std::vector<double>{5, 4, 3, 3.5, 3.25});
  CHECK(stop.stopped_epoch() == 4);
  CHECK(stop.best_epoch() == 2);
  CHECK(stop.best() == 3.0);
  CHECK(same_values(values_of(model), at_best));
  CHECK(h.traces == 1);

  // min_delta: steps smaller than it are no improvement.
  Scripted small_steps({1.0, 0.95, 0.9, 0.85, 0.8});
  train::EarlyStopping patient({.monitor = "scripted", .min_delta = 0.1, .patience = 1});
  const auto h2 = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                             {.epochs = 5,
                              .verbose = 0,
                              .metrics = {small_steps.metric()},
                              .callbacks = {small_steps.setter, patient}});
  CHECK(h2.epochs.size() == 2);
  CHECK(patient.stopped_epoch() == 1);

  // A baseline not reached: improvements do not reset the count (without the baseline, the
  // plateau from epoch 1 would stop it after epoch 3).
  Scripted above({1.0, 0.875, 0.875, 0.875, 0.875});
  train::EarlyStopping baseline({.monitor = "scripted", .patience = 2, .baseline = 0.5});
  const auto h3 = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                             {.epochs = 5,
                              .verbose = 0,
                              .metrics = {above.metric()},
                              .callbacks = {above.setter, baseline}});
  CHECK(h3.epochs.size() == 3);

  // Mode automatic maximizes a name with "acc"; start_from_epoch skips the first epochs.
  Scripted accuracy({0.5, 0.4, 0.3, 0.2, 0.1, 0.0});
  train::EarlyStopping acc({.monitor = "my_acc", .patience = 1, .start_from_epoch = 2});
  const auto h4 = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                             {.epochs = 6,
                              .verbose = 0,
                              .metrics = {accuracy.metric("my_acc")},
                              .callbacks = {accuracy.setter, acc}});
  CHECK(acc.best_epoch() == 2);
  CHECK(acc.stopped_epoch() == 3);
  CHECK(h4.epochs.size() == 4);
}

TEST_CASE("ModelCheckpoint saves the best epochs to formatted paths, atomically",
          "[train][callbacks]") {
  kiln::clear_session();
  io_test::TempDir dir;
  const Data d = separable(32, 7);
  auto model = small_model();
  kiln::optim::Adam opt({.learning_rate = 0.05});
  Scripted scripted({3, 2, 2.5, 1});
  const std::string pattern = (dir / "ckpt/w.{epoch:02d}-{scripted:.1f}.safetensors").string();
  train::ModelCheckpoint best(pattern, {.monitor = "scripted", .save_best_only = true});
  train::ModelCheckpoint every((dir / "every.safetensors").string(), {.save_freq = 2});
  std::vector<Tensor> last;
  train::LambdaCallback keep;
  keep.epoch_end = [&](int, const train::Logs&) { last = values_of(model); };
  train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
             {.epochs = 4,
              .batch_size = 8,
              .verbose = 0,
              .metrics = {scripted.metric()},
              .callbacks = {scripted.setter, best, every, keep}});
  REQUIRE(best.saved().size() == 3);
  CHECK(best.saved()[0].filename() == "w.01-3.0.safetensors");
  CHECK(best.saved()[1].filename() == "w.02-2.0.safetensors");
  CHECK(best.saved()[2].filename() == "w.04-1.0.safetensors");
  CHECK(best.best() == 1.0);
  CHECK(every.saved().size() == 2);
  for (const auto& e : fs::directory_iterator(dir / "ckpt"))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  auto copy = small_model();
  copy(d.x);
  kiln::load_weights(copy, best.saved().back());
  CHECK(same_values(values_of(copy), last));
}

TEST_CASE("LearningRateScheduler sets the rate per epoch without retracing", "[train][callbacks]") {
  kiln::clear_session();
  const Data d = separable(16, 8);
  nn::Dense model(1, nn::Activation::sigmoid);
  kiln::optim::SGD opt({.learning_rate = 0.1});
  train::LearningRateScheduler schedule(
      [](int epoch, double rate) { return epoch == 0 ? rate : rate * 0.5; });
  const auto h = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                            {.epochs = 3, .verbose = 0, .callbacks = {schedule}});
  REQUIRE(h.learning_rate.size() == 3);
  CHECK(h.learning_rate[0] == Approx(0.1));
  CHECK(h.learning_rate[1] == Approx(0.05));
  CHECK(h.learning_rate[2] == Approx(0.025));
  CHECK(h.traces == 1);

  kiln::optim::SGD scheduled(
      {.learning_rate = kiln::optim::schedules::exponential_decay(0.1, 10, 0.5)});
  CHECK_THROWS_WITH(train::fit(model, scheduled, nn::losses::binary_crossentropy, d.x, d.y,
                               {.verbose = 0, .callbacks = {schedule}}),
                    Catch::Contains("[train.LearningRateScheduler] cannot set the learning rate"));
  train::LearningRateScheduler broken([](int, double) { return -1.0; });
  CHECK_THROWS_WITH(train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                               {.verbose = 0, .callbacks = {broken}}),
                    Catch::Contains("a rate must be finite and >= 0"));
}

TEST_CASE("CSVLogger writes a header and a row per epoch, and appends", "[train][callbacks]") {
  kiln::clear_session();
  io_test::TempDir dir;
  const Data d = separable(20, 9);
  nn::Dense model(1, nn::Activation::sigmoid);
  kiln::optim::SGD opt;
  train::CSVLogger csv(dir / "log.csv");
  train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
             {.epochs = 2,
              .verbose = 0,
              .metrics = {train::metrics::binary_accuracy()},
              .validation_split = 0.2,
              .validation_freq = 2,
              .callbacks = {csv}});
  std::string text = read_text(dir / "log.csv");
  CHECK_THAT(text,
             Catch::StartsWith(
                 "epoch,loss,binary_accuracy,val_loss,val_binary_accuracy,learning_rate\n0,"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
  CHECK_THAT(text, Catch::Contains(",NA,NA,"));  // epoch 0 did not validate
  train::CSVLogger more(dir / "log.csv", {.separator = ';', .append = true});
  train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
             {.epochs = 1,
              .verbose = 0,
              .metrics = {train::metrics::binary_accuracy()},
              .validation_split = 0.2,
              .callbacks = {more}});
  text = read_text(dir / "log.csv");
  CHECK(std::count(text.begin(), text.end(), '\n') == 4);  // no second header
}

TEST_CASE("bad validation data and callback settings fail before training starts",
          "[train][callbacks]") {
  kiln::clear_session();
  io_test::TempDir dir;
  std::ofstream(dir / "plain") << "x";
  const Data d = separable(20, 10);
  auto model = small_model();
  model(d.x);
  const auto before = values_of(model);
  kiln::optim::SGD opt({.learning_rate = 0.5});
  const auto fails = [&](train::FitOptions options, const std::string& message) {
    options.verbose = 0;
    INFO(message);
    CHECK_THROWS_WITH(train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y, options),
                      Catch::Contains(message));
    CHECK(same_values(values_of(model), before));  // nothing trained
  };
  fails({.validation_data = train::ValidationData{kiln::ones({5, 3}), kiln::ones({5, 1})}},
        "validation_data.x must match x in dtype and in every dim after the first: "
        "validation_data.x is f32 [5,3], x is f32 [20,4]");
  fails(
      {.validation_data = train::ValidationData{kiln::ones({5, 4}), kiln::ones({5, 1}, kiln::f64)}},
      "validation_data.y must match y");
  fails({.validation_data = train::ValidationData{kiln::ones({5, 4}), kiln::ones({4, 1})}},
        "x has 5 samples but y has 4");
  fails({.validation_data = train::ValidationData{d.x, d.y}, .validation_split = 0.5},
        "give validation_data or validation_split, not both");
  fails({.validation_split = 1.0}, "validation_split must be in [0, 1), got 1");
  fails({.validation_split = 0.96}, "leaves 0 to train on and 20 to validate on");
  fails({.validation_freq = 0}, "validation_freq must be >= 1");
  train::EarlyStopping typo({.monitor = "val_los"});
  fails({.validation_split = 0.5, .callbacks = {typo}},
        "[train.EarlyStopping] monitors 'val_los', which this fit does not log; it logs: loss, "
        "val_loss, learning_rate");
  train::EarlyStopping no_validation;
  fails({.callbacks = {no_validation}}, "(val_ values need validation_data or validation_split)");
  train::ModelCheckpoint unwritable((dir / "plain/ckpt/w.safetensors").string());
  fails({.callbacks = {unwritable}}, "[train.ModelCheckpoint] cannot create the folder");
  train::ModelCheckpoint bad_name((dir / "w-{val_loss}.safetensors").string());
  fails({.callbacks = {bad_name}}, "does not format");
  train::CSVLogger bad_csv(dir / "plain/log.csv");
  fails({.callbacks = {bad_csv}}, "[train.CSVLogger] cannot open");
  train::TensorBoard bad_logs({.log_dir = dir / "plain/logs"});
  fails({.callbacks = {bad_logs}}, "[summary.FileWriter] cannot create the log folder");
  CHECK_THROWS_WITH(train::EarlyStopping({.patience = -1}), Catch::Contains("patience"));
  CHECK_THROWS_WITH(train::ModelCheckpoint("w.safetensors", {.save_freq = 0}),
                    Catch::Contains("save_freq"));
}

TEST_CASE(
    "TensorBoard writes epoch and batch scalars, histograms and the graph, read back by "
    "TensorBoard's EventAccumulator",
    "[train][callbacks][summary]") {
  kiln::clear_session();
  io_test::TempDir dir;
  const Data d = separable(40, 11);
  auto model = small_model();
  kiln::optim::Adam opt({.learning_rate = 0.05});
  train::TensorBoard board({.log_dir = dir / "logs", .histogram_freq = 1, .update_freq = 2});
  const auto h = train::fit(model, opt, nn::losses::binary_crossentropy, d.x, d.y,
                            {.epochs = 3,
                             .batch_size = 8,
                             .verbose = 0,
                             .metrics = {train::metrics::binary_accuracy()},
                             .validation_split = 0.2,
                             .callbacks = {board}});
  CHECK(h.traces == 1);
  REQUIRE(fs::is_directory(dir / "logs/train"));
  REQUIRE(fs::is_directory(dir / "logs/validation"));

  const std::string python = io_test::test_python("tensorboard");
  if (python.empty()) {
    WARN("skipped: no Python with tensorboard (run scripts/python-env.sh, or set KILN_PYTHON)");
    return;
  }
  nlohmann::json expected;
  expected["kind"] = "fit";
  const auto points = [](const std::vector<double>& values) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < values.size(); ++i)
      out.push_back({i, static_cast<float>(values[i])});
    return out;
  };
  expected["runs"]["train"]["scalars"] = {
      {"epoch_loss", points(h.loss)},
      {"epoch_binary_accuracy", points(h.metrics.at("binary_accuracy"))},
      {"epoch_learning_rate", points(h.learning_rate)}};
  expected["runs"]["validation"]["scalars"] = {
      {"epoch_loss", points(h.val_loss)},
      {"epoch_binary_accuracy", points(h.val_metrics.at("binary_accuracy"))}};
  // 32 training samples in batches of 8: 4 steps per epoch, batch scalars at steps 2, 4, ... 12.
  expected["runs"]["train"]["batch_steps"] = {{"batch_loss", {2, 4, 6, 8, 10, 12}}};
  nlohmann::json histograms = nlohmann::json::array();
  for (const auto& [path, v] : model.named_variables()) histograms.push_back(path);
  expected["runs"]["train"]["histograms"] = histograms;
  expected["runs"]["train"]["histogram_steps"] = {0, 1, 2};
  expected["runs"]["train"]["graph"] = true;
  expected["runs"]["validation"]["graph"] = false;
  std::ofstream(dir / "logs/expected.json") << expected.dump(1);
  const std::string command = fmt::format("'{}' '{}/check_tensorboard.py' --fit '{}'", python,
                                          test_paths::data_dir(), (dir / "logs").string());
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a whole fit of scenario 2's model with validation and every callback traces once",
          "[train][callbacks]") {
  kiln::clear_session();
  io_test::TempDir dir;
  const Tensor x = kiln::random::normal({48, 5, 10}, 0, 1, 12);
  const Tensor y = kiln::cast(kiln::sum(kiln::slice(x, 2, 0, 1), {1}) > 0.f, kiln::f32);
  struct Net : kiln::Module {
    nn::LSTM l1{16, {.return_sequences = true}}, l2{8};
    nn::Dense out{1, nn::Activation::sigmoid};
    Net() : Module("net") {
      add_module("l1", l1);
      add_module("l2", l2);
      add_module("out", out);
    }
    Tensor operator()(const Tensor& t) { return out(l2(l1(t))); }
  } net;
  kiln::optim::Adam opt({.learning_rate = 0.01});
  train::TensorBoard board({.log_dir = dir / "logs", .histogram_freq = 1, .update_freq = 1});
  train::ModelCheckpoint ckpt((dir / "best.safetensors").string(), {.save_best_only = true});
  train::EarlyStopping stop({.patience = 10, .restore_best_weights = true});
  train::LearningRateScheduler schedule([](int, double rate) { return rate * 0.9; });
  train::CSVLogger csv(dir / "log.csv");
  const auto h = train::fit(net, opt, nn::losses::binary_crossentropy, x, y,
                            {.epochs = 3,
                             .batch_size = 16,
                             .verbose = 0,
                             .metrics = {train::metrics::binary_accuracy()},
                             .validation_split = 0.25,
                             .callbacks = {board, ckpt, stop, schedule, csv}});
  CHECK(h.epochs.size() == 3);
  CHECK(h.traces == 1);
  CHECK(h.validation_traces == 1);
  CHECK(!ckpt.saved().empty());
}

TEST_CASE("progress shows validation values, and the bar's ETA reads as a duration",
          "[train][callbacks]") {
  train::Logs logs;
  logs.set("loss", 0.5);
  logs.set("val_loss", 0.25);
  logs.set("learning_rate", 0.001);
  CHECK(train::detail::logs_text(logs) == "loss 0.5000 - val_loss 0.2500");
  CHECK(train::detail::duration_text(3.4) == "3s");
  CHECK(train::detail::duration_text(125) == "2m05s");
  CHECK(train::detail::duration_text(3725) == "1h02m");
  CHECK(train::detail::duration_text(-1) == "?");
  logs.set("loss", 0.75);  // set replaces, keeping the order
  CHECK(keys_of(logs) == std::vector<std::string>{"loss", "val_loss", "learning_rate"});
  CHECK(logs.at("loss") == 0.75);
  CHECK_THROWS_WITH(logs.at("accuracy"),
                    Catch::Contains("no value 'accuracy'; the logs have: loss, val_loss"));
}

TEST_CASE("a stateful model validates with its static batch size", "[train][callbacks]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({8, 4, 2}, 0, 1, 13);
  const Tensor y = kiln::reshape(kiln::sum(x, {1, 2}), {8, 1});
  nn::Sequential model({nn::LSTM(4, {.stateful = true}), nn::Dense(1)});
  kiln::optim::SGD opt({.learning_rate = 0.01});
  const Tensor vx = kiln::random::normal({8, 4, 2}, 0, 1, 14);
  const Tensor vy = kiln::reshape(kiln::sum(vx, {1, 2}), {8, 1});
  const auto h = train::fit(model, opt, nn::losses::mean_squared_error, x, y,
                            {.epochs = 2,
                             .batch_size = 4,
                             .shuffle = false,
                             .verbose = 0,
                             .validation_data = train::ValidationData{vx, vy}});
  CHECK(h.traces == 1);
  CHECK(h.validation_traces == 1);
  CHECK(h.val_loss.size() == 2);
  CHECK_THROWS_WITH(train::fit(model, opt, nn::losses::mean_squared_error, x, y,
                               {.batch_size = 4,
                                .shuffle = false,
                                .verbose = 0,
                                .validation_data = train::ValidationData{vx, vy},
                                .validation_batch_size = 8}),
                    Catch::Contains("validation batches must have the training batch_size 4"));
  CHECK_THROWS_WITH(
      train::fit(model, opt, nn::losses::mean_squared_error, x, y,
                 {.batch_size = 4,
                  .shuffle = false,
                  .verbose = 0,
                  .validation_data =
                      train::ValidationData{kiln::slice(vx, 0, 0, 6), kiln::slice(vy, 0, 0, 6)}}),
      Catch::Contains("6 samples are not a multiple of it"));
}

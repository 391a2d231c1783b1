// kiln::train: fit / evaluate / predict, and the user scenarios of the variables issue that need
// layers and optimizers: (2) an LSTM model trained and rebuilt in a loop without growth, and
// (3) a two-scope model with a frozen layer (its collections and assign-without-retrace parts
// are in test_module.cpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace nn = kiln::nn;
namespace train = kiln::train;

namespace {

std::vector<std::string> names_of(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name());
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return kiln::max(kiln::abs(a - b)).item<float>();
}

/// Everything f writes to standard output.
std::string capture_stdout(const std::function<void()>& f) {
  std::fflush(stdout);
  FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = dup(fileno(stdout));
  dup2(fileno(file), fileno(stdout));
  f();
  std::fflush(stdout);
  dup2(saved, fileno(stdout));
  close(saved);
  std::rewind(file);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file)) > 0;) out.append(buffer, n);
  std::fclose(file);
  return out;
}

/// Resident set size of this process, in bytes.
std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

/// Synthetic binary sequences: the label says whether feature 0 sums to more than 0 over time.
struct Data {
  Tensor x, y;
};
Data binary_sequences(std::int64_t n, std::uint64_t seed) {
  Tensor x = kiln::random::normal({n, 5, 10}, 0, 1, seed);
  Tensor y = kiln::cast(kiln::sum(kiln::slice(x, 2, 0, 1), {1}) > 0.f, kiln::f32);  // [n, 1]
  return {x, y};
}

// User scenario 2's model.
struct Scenario2Net : kiln::Module {
  nn::LSTM l1{64, {.return_sequences = true}}, l2{32};
  nn::Dense out{1, nn::Activation::sigmoid};
  Scenario2Net() : Module("net") {
    add_module("l1", l1);
    add_module("l2", l2);
    add_module("out", out);
  }
  Tensor operator()(const Tensor& x) { return out(l2(l1(x))); }
};

}  // namespace

TEST_CASE("fit trains with one trace, returns the history, evaluate and predict agree",
          "[nn][train]") {
  kiln::clear_session();
  // A linearly separable problem; 70 samples in batches of 16: the last batch has 6.
  const Tensor x = kiln::random::normal({70, 4}, 0, 1, 1);
  const Tensor y =
      kiln::cast(kiln::matmul(x, kiln::tensor({1.f, -2.f, 0.5f, 1.f}, {4, 1})) > 0.f, kiln::f32);
  nn::Sequential model({nn::Dense(8, nn::Activation::relu), nn::Dense(1, nn::Activation::sigmoid)});
  kiln::optim::Adam opt({.learning_rate = 0.05});
  const train::History h = train::fit(model, opt, nn::losses::binary_crossentropy, x, y,
                                      {.epochs = 10,
                                       .batch_size = 16,
                                       .seed = 3,
                                       .verbose = 0,
                                       .metrics = {train::metrics::binary_accuracy()}});
  REQUIRE(h.loss.size() == 10);
  CHECK(h.traces == 1);  // the dynamic batch dim covers the last, smaller batch
  CHECK(h.loss.back() < 0.5 * h.loss.front());
  REQUIRE(h.metrics.count("binary_accuracy") == 1);
  CHECK(h.metrics.at("binary_accuracy").back() > 0.9);
  CHECK(h.seconds.size() == 10);
  CHECK(opt.iterations().value().item<std::int64_t>() == 50);  // 5 batches per epoch
  CHECK(kiln::memory_stats().cached_functions == 0);           // fit's function died with it

  // predict is model(x) in batches; evaluate is the loss over all samples.
  const Tensor p = train::predict(model, x, {.batch_size = 32});
  CHECK(p.shape() == Shape{70, 1});
  CHECK(max_diff(p, model(x)) < 1e-6);
  const auto e =
      train::evaluate(model, nn::losses::binary_crossentropy, x, y,
                      {.batch_size = 16, .metrics = {train::metrics::binary_accuracy()}});
  CHECK(e.loss == Approx(nn::losses::binary_crossentropy(y, model(x)).item<float>()).epsilon(1e-5));
  CHECK(e.metrics.at("binary_accuracy") > 0.9);

  // The same seed gives the same run.
  kiln::random::set_global_seed(4);
  nn::Sequential a({nn::Dense(1, nn::Activation::sigmoid)});
  kiln::optim::SGD sgd_a({.learning_rate = 0.1});
  const auto ha = train::fit(a, sgd_a, nn::losses::binary_crossentropy, x, y,
                             {.epochs = 2, .batch_size = 8, .seed = 11, .verbose = 0});
  kiln::random::set_global_seed(4);
  nn::Sequential b({nn::Dense(1, nn::Activation::sigmoid)});
  kiln::optim::SGD sgd_b({.learning_rate = 0.1});
  const auto hb = train::fit(b, sgd_b, nn::losses::binary_crossentropy, x, y,
                             {.epochs = 2, .batch_size = 8, .seed = 11, .verbose = 0});
  CHECK(ha.loss == hb.loss);
  kiln::random::set_global_seed(0);
}

TEST_CASE("fit prints one line per epoch off a terminal, nothing when silent", "[nn][train]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({20, 3}, 0, 1, 5);
  const Tensor y = kiln::random::normal({20, 2}, 0, 1, 6);
  nn::Dense model(2);
  kiln::optim::SGD opt;
  const std::string lines = capture_stdout([&] {
    train::fit(model, opt, nn::losses::mean_squared_error, x, y, {.epochs = 2, .batch_size = 8});
  });
  CHECK_THAT(lines, Catch::StartsWith("epoch 1/2 - 20 samples in "));
  CHECK_THAT(lines, Catch::Contains("samples/s) - loss "));
  CHECK(std::count(lines.begin(), lines.end(), '\n') == 2);
  const std::string silent = capture_stdout([&] {
    train::fit(model, opt, nn::losses::mean_squared_error, x, y, {.epochs = 1, .verbose = 0});
  });
  CHECK(silent.empty());
  const std::string evaluation = capture_stdout(
      [&] { train::evaluate(model, nn::losses::mean_squared_error, x, y, {.verbose = 1}); });
  CHECK_THAT(evaluation, Catch::StartsWith("evaluate - 20 samples - loss "));

  CHECK_THROWS_WITH(train::fit(model, opt, nn::losses::mean_squared_error, x,
                               kiln::slice(y, 0, 0, 10), {.verbose = 0}),
                    "[train.fit] x has 20 samples but y has 10 (dim 0 must agree): x [20,3], y "
                    "[10,2]");
  CHECK_THROWS_WITH(
      train::fit(model, opt, nn::losses::mean_squared_error, x, y, {.batch_size = 0, .verbose = 0}),
      "[train.fit] batch_size must be positive, got 0");
  CHECK_THROWS_WITH(train::predict(model, kiln::scalar(1.f)),
                    "[train.predict] x must have a batch dim (dim 0); got a scalar");
}

TEST_CASE("Dropout is active in fit's step and inactive in evaluate and predict", "[nn][train]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({32, 6}, 0, 1, 7);
  const Tensor y = kiln::random::normal({32, 1}, 0, 1, 8);
  nn::Sequential model({nn::Dense(16, nn::Activation::relu), nn::Dropout(0.5, 1), nn::Dense(1)});
  kiln::optim::SGD opt({.learning_rate = 0.01});
  train::fit(model, opt, nn::losses::mean_squared_error, x, y,
             {.epochs = 2, .batch_size = 8, .verbose = 0});
  const Variable counter = model.layer(1).variable("rng_counter");
  CHECK(counter.value().item<std::int64_t>() == 8);  // one new mask per train step
  const Tensor p1 = train::predict(model, x), p2 = train::predict(model, x);
  CHECK(max_diff(p1, p2) == 0);
  CHECK(max_diff(p1, model(x)) < 1e-6);
  CHECK(counter.value().item<std::int64_t>() == 8);
}

TEST_CASE("scenario 2: a two-layer LSTM model learns a synthetic binary task",
          "[nn][train][scenario]") {
  kiln::clear_session();
  kiln::random::set_global_seed(1);
  const Data data = binary_sequences(72, 21);  // 4 full batches of 16 and one of 8
  Scenario2Net net;
  kiln::optim::Adam opt({.learning_rate = 1e-2});
  const auto h = train::fit(net, opt, nn::losses::binary_crossentropy, data.x, data.y,
                            {.epochs = 8,
                             .batch_size = 16,
                             .seed = 2,
                             .verbose = 0,
                             .metrics = {train::metrics::binary_accuracy()}});
  CHECK(h.traces == 1);
  CHECK(h.loss.back() < 0.7 * h.loss.front());
  CHECK(h.metrics.at("binary_accuracy").back() > h.metrics.at("binary_accuracy").front());
  CHECK(names_of(net.trainable_variables()) ==
        std::vector<std::string>{"net/l1/kernel", "net/l1/recurrent_kernel", "net/l1/bias",
                                 "net/l2/kernel", "net/l2/recurrent_kernel", "net/l2/bias",
                                 "net/out/kernel", "net/out/bias"});
  CHECK(net.l1.kernel().shape() == Shape{10, 256});
  CHECK(net.l2.recurrent_kernel().shape() == Shape{32, 128});
  CHECK(opt.variables().size() == 2 + 2 * 8);
  CHECK(opt.slot(net.l1.kernel(), "m").name() == "adam/net/l1/kernel/m");
  kiln::random::set_global_seed(0);
}

TEST_CASE("scenario 2: rebuilding and retraining in a loop leaves every counter where it was",
          "[nn][train][scenario]") {
  const Data data = binary_sequences(32, 22);
  for (const bool clear : {true, false}) {
    INFO("clear_session between rounds: " << clear);
    kiln::clear_session();
    const auto variables_before = kiln::global_variables().size();
    const auto bytes_before = kiln::memory_stats().live_bytes;
    kiln::MemoryStats after_round1{};
    std::size_t variables_round1 = 0;
    std::int64_t rss_round1 = 0;
    std::vector<double> first_losses;
    for (int round = 1; round <= 5; ++round) {
      if (clear) kiln::clear_session();
      {
        Scenario2Net net;
        kiln::optim::Adam opt({.learning_rate = 1e-3});
        const auto h = train::fit(net, opt, nn::losses::binary_crossentropy, data.x, data.y,
                                  {.epochs = 2, .batch_size = 16, .seed = 1, .verbose = 0});
        CHECK(h.traces == 1);
        first_losses.push_back(h.loss.front());
        const auto stats = kiln::memory_stats();
        const auto variables = kiln::global_variables().size();
        CHECK(variables == variables_before + 8 + 18);  // the model's and the optimizer's
        if (round == 1) {
          after_round1 = stats;
          variables_round1 = variables;
        } else {
          CHECK(stats.live_bytes == after_round1.live_bytes);
          CHECK(stats.live_tensors == after_round1.live_tensors);
          CHECK(stats.cached_functions == after_round1.cached_functions);
          CHECK(stats.live_graph_nodes == after_round1.live_graph_nodes);
          CHECK(variables == variables_round1);
        }
      }
      // The model and optimizer are gone: so are their variables and bytes.
      CHECK(kiln::global_variables().size() == variables_before);
      CHECK(kiln::memory_stats().live_bytes == bytes_before);
      CHECK(kiln::memory_stats().cached_functions == 0);
      if (round == 1) rss_round1 = resident_bytes();
    }
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer keeps freed memory in quarantine
    CHECK(resident_bytes() - rss_round1 < 8 * 1024 * 1024);
#else
    (void)rss_round1;
#endif
    // clear_session restarts the random stream: every round starts from the same weights.
    if (clear)
      for (double loss : first_losses) CHECK(loss == first_losses.front());
  }
}

TEST_CASE("scenario 3: a frozen scope is left alone by the optimizer", "[nn][train][scenario]") {
  kiln::clear_session();
  struct TwoScopes : kiln::Module {
    nn::Dense layer1{8, nn::Activation::tanh}, layer2{1};
    TwoScopes() : Module("model") {
      add_module("layer1", layer1);
      add_module("layer2", layer2);
    }
    Tensor operator()(const Tensor& x) { return layer2(layer1(x)); }
  } model;
  const Tensor x = kiln::random::normal({40, 3}, 0, 1, 31);
  const Tensor y = kiln::random::normal({40, 1}, 0, 1, 32);
  model(x);
  CHECK(names_of(kiln::global_variables("model/layer1")) ==
        std::vector<std::string>{"model/layer1/kernel", "model/layer1/bias"});
  model.layer1.freeze();
  CHECK(names_of(kiln::trainable_variables("model")) ==
        std::vector<std::string>{"model/layer2/kernel", "model/layer2/bias"});
  const auto layer1_before = model.layer1.get_weights();
  const auto layer2_before = model.layer2.get_weights();
  kiln::optim::Adam opt({.learning_rate = 0.05});
  const auto h = train::fit(model, opt, nn::losses::mean_squared_error, x, y,
                            {.epochs = 5, .batch_size = 8, .verbose = 0});
  CHECK(h.loss.back() < h.loss.front());
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(max_diff(model.layer1.get_weights()[i], layer1_before[i]) == 0);
    CHECK(max_diff(model.layer2.get_weights()[i], layer2_before[i]) > 0);
  }
  CHECK(names_of(opt.variables()) ==
        std::vector<std::string>{"adam/iterations", "adam/learning_rate",
                                 "adam/model/layer2/kernel/m", "adam/model/layer2/kernel/v",
                                 "adam/model/layer2/bias/m", "adam/model/layer2/bias/v"});

  // One traced assign function serves every variable of a shape: the variable is an argument
  // (keyed by identity), the value a placeholder-like tensor argument.
  auto assign = kiln::function([](const Variable& v, const Tensor& value) {
    v.assign(value);
    return v.value();
  });
  assign(model.layer2.kernel(), kiln::full({8, 1}, 0.5));
  assign(model.layer2.kernel(), kiln::full({8, 1}, 0.25));
  CHECK(assign.tracing_count() == 1);
  CHECK(max_diff(model.layer2.kernel().value(), kiln::full({8, 1}, 0.25)) == 0);
  assign(model.layer1.bias(), kiln::zeros({8}));  // another variable: its own trace
  CHECK(assign.tracing_count() == 2);
  const Tensor expected = kiln::matmul(kiln::tanh(kiln::matmul(x, model.layer1.kernel().value())),
                                       kiln::full({8, 1}, 0.25)) +
                          model.layer2.bias().value();
  CHECK(max_diff(train::predict(model, x), expected) < 1e-6);
}

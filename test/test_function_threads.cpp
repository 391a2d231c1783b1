// kiln::function called from several threads at once: traces that fail while others use what
// they created, the trace limit, one trace per signature, and consistent variable reads when
// calls run eagerly. Tagged [threads]: the ThreadSanitizer build runs these.
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;

namespace {

bool close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  return a.shape() == b.shape() && kiln::max(kiln::abs(a - b)).item<float>() <= tol;
}

/// Runs `call` on a new thread; join() tells whether it threw std::runtime_error. (Catch2's
/// assertions are not thread-safe: threads report, the main thread checks.)
class ThrowingThread {
 public:
  template <class F>
  explicit ThrowingThread(F call)
      : thread_([this, call] {
          try {
            call();
          } catch (const std::runtime_error&) {
            threw_ = true;
          }
        }) {}
  bool join() {
    thread_.join();
    return threw_;
  }

 private:
  bool threw_ = false;
  std::thread thread_;
};

/// A one-shot signal between threads.
class Signal {
 public:
  void raise() { promise_.set_value(); }
  void wait() { future_.wait(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_{promise_.get_future().share()};
};

struct Net : kiln::Module {
  kiln::nn::Dense l1{3};
  Net() : Module("net") { add_module("l1", l1); }
  Tensor operator()(const Tensor& x) { return l1(x); }
};

}  // namespace

TEST_CASE("a failed trace keeps the variables a successful trace used", "[function][threads]") {
  // Thread A's first trace creates the layer's variables, then fails; thread B's trace of
  // another shape uses them meanwhile and succeeds. The variables must stay, and B's cached
  // graph must keep working.
  Net net;
  Signal created, b_done;
  std::atomic<bool> fail_a{true};
  auto f = kiln::function([&](const Tensor& x) {
    if (x.dim(0) == 2) {  // thread A
      Tensor y = net(x);
      if (fail_a.load()) {
        created.raise();
        b_done.wait();
        throw std::runtime_error("A fails after creating the variables");
      }
      return y;
    }
    created.wait();  // thread B: the variables exist, made by A's unfinished trace
    return net(x);
  });
  const Tensor xa = kiln::ones({2, 4}), xb = kiln::ones({5, 4});
  ThrowingThread a([&] { f(xa); });
  const Tensor yb = f(xb);
  b_done.raise();
  CHECK(a.join());
  REQUIRE(net.variables().size() == 2);
  fail_a = false;
  for (int i = 0; i < 3; ++i) CHECK(close(f(xb), yb));
  CHECK(f(xa).shape() == Shape{2, 3});
  CHECK(close(f(xa), kiln::slice(yb, 0, 0, 2)));
  CHECK(net.variables().size() == 2);
}

TEST_CASE("variables of a failed trace are rolled back once no one used them",
          "[function][threads]") {
  SECTION("a second trace that used them and also failed") {
    Net net;
    Signal created, b_started_using;
    auto f = kiln::function([&](const Tensor& x) {
      if (x.dim(0) == 2) {
        net(x);
        created.raise();
        b_started_using.wait();
        throw std::runtime_error("A fails");
      }
      created.wait();
      net(x);
      b_started_using.raise();
      throw std::runtime_error("B fails too");
      return x;
    });
    ThrowingThread a([&] { f(kiln::ones({2, 4})); });
    CHECK_THROWS_AS(f(kiln::ones({5, 4})), std::runtime_error);
    CHECK(a.join());
    CHECK(net.variables().empty());
    CHECK(f.cache_size() == 0);
  }
  SECTION("eager code used them while the creating trace ran") {
    Net net;
    Signal created, eager_done;
    Tensor eager_result;
    auto f = kiln::function([&](const Tensor& x) {
      Tensor y = net(x);
      created.raise();
      eager_done.wait();
      throw std::runtime_error("fails after creating the variables");
      return y;
    });
    ThrowingThread a([&] { f(kiln::ones({2, 4})); });
    created.wait();
    eager_result = net(kiln::ones({1, 4}));  // eager: reads the variables A's trace created
    eager_done.raise();
    CHECK(a.join());
    REQUIRE(net.variables().size() == 2);
    CHECK(close(net(kiln::ones({1, 4})), eager_result));
  }
}

TEST_CASE("concurrent first calls trace each signature once, within max_traces",
          "[function][threads]") {
  constexpr int threads = 8;
  SECTION("one signature from every thread: one trace") {
    std::atomic<int> traces{0};
    auto f = kiln::function([&](const Tensor& x) {
      ++traces;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // others arrive meanwhile
      return x * 2.f;
    });
    std::barrier start(threads);
    std::atomic<int> wrong{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        start.arrive_and_wait();
        if (!close(f(kiln::ones({3})), kiln::full({3}, 2.0))) ++wrong;
      });
    for (auto& t : pool) t.join();
    CHECK(wrong == 0);
    CHECK(traces == 1);
    CHECK(f.tracing_count() == 1);
  }
  SECTION("a signature per thread: never more than max_traces graphs") {
    for (auto on_limit : {kiln::OnTraceLimit::run_eagerly, kiln::OnTraceLimit::throw_error}) {
      kiln::set_log_sink([](const std::string&) {});
      kiln::FunctionOptions options;
      options.max_traces = 2;
      options.on_limit = on_limit;
      auto f = kiln::function(
          [&](const Tensor& x) {
            if (kiln::detail::tracing()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return x * 2.f;
          },
          options);
      std::barrier start(threads);
      std::atomic<int> wrong{0}, refused{0};
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          start.arrive_and_wait();
          try {
            if (!close(f(kiln::ones({t + 1})), kiln::full({t + 1}, 2.0))) ++wrong;
          } catch (const kiln::Error& e) {
            if (std::string(e.what()).find("max_traces") != std::string::npos) ++refused;
          }
        });
      for (auto& t : pool) t.join();
      kiln::set_log_sink(nullptr);
      CHECK(wrong == 0);
      CHECK(f.tracing_count() <= 2);
      CHECK(f.cache_size() <= 2);
      if (on_limit == kiln::OnTraceLimit::throw_error)
        CHECK(refused == threads - f.tracing_count());
    }
  }
}

TEST_CASE("a call that runs eagerly sees one value of each variable", "[function][threads]") {
  kiln::Variable v(kiln::zeros({4}), "flipping");
  kiln::FunctionOptions options;
  options.max_traces = 1;
  kiln::set_log_sink([](const std::string&) {});
  // Each call reads v twice; a concurrent writer flips it between 0 and 1. Past the trace
  // limit the calls run eagerly, and must still see one value per call.
  auto f = kiln::function(
      [&](const Tensor& x) {
        Tensor first = v.value();
        std::this_thread::yield();
        Tensor second = v.value();
        return x + (first - second);
      },
      options);
  (void)f(kiln::zeros({1, 4}));  // the one trace
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) v.assign(kiln::full({4}, static_cast<double>(i % 2)));
  });
  int mixed = 0;
  for (int i = 0; i < 3000; ++i) {
    const Tensor out = f(kiln::zeros({2, 4}));  // a new signature: runs eagerly
    if (!close(out, kiln::zeros({2, 4}))) ++mixed;
  }
  stop = true;
  writer.join();
  kiln::set_log_sink(nullptr);
  CHECK(mixed == 0);
  CHECK(f.tracing_count() == 1);

  // Within one eager call, an assignment is seen by the reads after it.
  kiln::Variable counter(kiln::zeros({}), "counter");
  kiln::run_functions_eagerly(true);
  auto g = kiln::function([&](const Tensor& x) {
    counter.assign_add(kiln::ones({}));
    counter.assign_add(kiln::ones({}));
    return x + counter.value();
  });
  CHECK(g(kiln::zeros({})).item<float>() == 2.f);
  CHECK(g(kiln::zeros({})).item<float>() == 4.f);
  kiln::run_functions_eagerly(false);
  CHECK(counter.value().item<float>() == 4.f);
}

// kiln::function: one trace per signature, cached graphs, variables by reference, diagnostics.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <kiln/kiln.hpp>

#include "state/variable_impl.hpp"

using kiln::Shape;
using kiln::Tensor;

namespace {
bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && kiln::all(kiln::equal(a, b)).item<bool>();
}
bool close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  return a.shape() == b.shape() && kiln::max(kiln::abs(a - b)).item<float>() <= tol;
}
}  // namespace

TEST_CASE("a function traces once per signature and replays the cached graph", "[function]") {
  int python_calls = 0;
  auto f = kiln::function([&](const Tensor& x, const Tensor& y) {
    ++python_calls;
    return kiln::tanh(kiln::matmul(x, y) + 1.f);
  });
  Tensor x = kiln::random::normal({4, 3}, 0, 1, 1), y = kiln::random::normal({3, 2}, 0, 1, 2);
  Tensor expected = kiln::tanh(kiln::matmul(x, y) + 1.f);
  CHECK(close(f(x, y), expected));
  CHECK(close(f(x, y), expected));
  CHECK(f.tracing_count() == 1);
  CHECK(python_calls == 1);
  Tensor x2 = kiln::random::normal({5, 3}, 0, 1, 3);
  CHECK(close(f(x2, y), kiln::tanh(kiln::matmul(x2, y) + 1.f)));
  CHECK(f.tracing_count() == 2);
  CHECK(f.cache_size() == 2);
  auto cf = f.get_concrete_function(x, y);
  CHECK(f.tracing_count() == 2);
  // 2 parameters, the constant 1, matmul, and add + tanh fused into one kernel.
  CHECK(cf.graph().num_nodes() == 5);
  INFO(cf.graph().to_string());
  CHECK(cf.graph().to_string().find("matmul") != std::string::npos);
  CHECK(cf.graph().to_string().find("fused[tanh((in0 + in1))]") != std::string::npos);
  CHECK(cf.graph().to_dot().rfind("digraph kiln {", 0) == 0);
}

TEST_CASE("static arguments are part of the key by value; results may be structured",
          "[function]") {
  auto f = kiln::function([](const Tensor& x, int power, bool negate) {
    Tensor r = x;
    for (int i = 1; i < power; ++i) r = r * x;
    return std::make_pair(negate ? -r : r, std::vector<Tensor>{r, x});
  });
  Tensor x = kiln::tensor({1.f, 2.f, 3.f});
  auto [a, parts] = f(x, 3, false);
  CHECK(same(a, kiln::tensor({1.f, 8.f, 27.f})));
  REQUIRE(parts.size() == 2);
  CHECK(same(parts[1], x));
  f(x, 3, false);
  f(x, 2, false);
  f(x, 2, true);
  CHECK(f.tracing_count() == 3);
  auto [b, unused] = f(x, 2, true);
  CHECK(same(b, kiln::tensor({-1.f, -4.f, -9.f})));
  CHECK(f.tracing_count() == 3);
}

TEST_CASE("repeated calls add no nodes, tensors or bytes", "[function]") {
  kiln::Variable w(kiln::random::normal({10, 20}, 0, 0.3, 4), "rnn/w");
  kiln::Variable u(kiln::random::normal({20, 20}, 0, 0.3, 5), "rnn/u");
  kiln::Variable b(kiln::zeros({20}), "rnn/b");
  auto rnn = kiln::function([&](const Tensor& xs) {  // unrolled 5-step RNN
    Tensor h = kiln::zeros({32, 20});
    for (const Tensor& x : kiln::unstack(xs, 1))
      h = kiln::tanh(kiln::matmul(x, w.value()) + kiln::matmul(h, u.value()) + b.value());
    return h;
  });
  Tensor xs = kiln::random::normal({32, 5, 10}, 0, 1, 6);
  Tensor first = rnn(xs);
  const auto nodes = rnn.get_concrete_function(xs).graph().num_nodes();
  const auto before = kiln::memory_stats();
  for (int i = 0; i < 1000; ++i) rnn(xs);
  const auto after = kiln::memory_stats();
  CHECK(rnn.tracing_count() == 1);
  CHECK(rnn.get_concrete_function(xs).graph().num_nodes() == nodes);
  CHECK(after.live_tensors == before.live_tensors);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.live_graph_nodes == before.live_graph_nodes);
  CHECK(after.cached_functions == before.cached_functions);
  // Variables are read by reference: assigning outside changes the result, no retrace.
  b.assign(kiln::ones({20}));
  Tensor changed = rnn(xs);
  CHECK_FALSE(close(changed, first));
  CHECK(rnn.tracing_count() == 1);
  kiln::run_functions_eagerly(true);
  Tensor eager = rnn(xs);
  kiln::run_functions_eagerly(false);
  CHECK(close(eager, changed));
}

TEST_CASE("assignments inside a function are ordered side effects", "[function]") {
  kiln::Variable counter(kiln::zeros({}), "counter");
  kiln::Variable acc(kiln::zeros({2}), "acc");
  auto step = kiln::function([&](const Tensor& x) {
    counter.assign_add(kiln::ones({}));
    acc.assign(acc.value() * 2.f + x);
    return acc.value() + counter.value();  // reads see the assigned values
  });
  Tensor x = kiln::tensor({1.f, 2.f});
  CHECK(same(step(x), kiln::tensor({2.f, 3.f})));
  CHECK(same(step(x), kiln::tensor({5.f, 8.f})));
  CHECK(counter.value().item<float>() == 2.f);
  CHECK(same(acc.value(), kiln::tensor({3.f, 6.f})));
  CHECK(step.tracing_count() == 1);
}

TEST_CASE("variables may be created only in the first trace; failed traces leave nothing",
          "[function]") {
  std::vector<kiln::Variable> made;
  auto f = kiln::function([&](const Tensor& x) {
    if (made.size() < 2) made.emplace_back(kiln::ones({x.dim(-1)}), "scale");
    return x * made.back().value();
  });
  CHECK(same(f(kiln::tensor({1.f, 2.f})), kiln::tensor({1.f, 2.f})));
  CHECK_THROWS_WITH(f(kiln::tensor({1.f, 2.f, 3.f})),
                    Catch::Contains("tried to create variable 'scale' while retracing"));
  CHECK(f.tracing_count() == 1);

  int calls = 0;
  auto g = kiln::function([&](const Tensor& x) {
    if (++calls == 1) throw std::runtime_error("user error in the first trace");
    return x + 1.f;
  });
  CHECK_THROWS_AS(g(kiln::tensor({1.f})), std::runtime_error);
  CHECK(g.cache_size() == 0);
  CHECK(same(g(kiln::tensor({1.f})), kiln::tensor({2.f})));
  CHECK(g.tracing_count() == 1);
}

TEST_CASE("reading a symbolic value while tracing is a clear error", "[function]") {
  auto f = kiln::function([](const Tensor& x) {
    if (kiln::sum(x).item<float>() > 0) return x;
    return -x;
  });
  CHECK_THROWS_WITH(f(kiln::tensor({1.f})),
                    Catch::Contains("cannot read the value of a symbolic tensor") &&
                        Catch::Contains("kiln::where"));
  CHECK(f.cache_size() == 0);
}

TEST_CASE("max_traces: warn and run eagerly, or throw", "[function]") {
  std::vector<std::string> log;
  kiln::set_log_sink([&](const std::string& m) { log.push_back(m); });
  kiln::FunctionOptions opts;
  opts.name = "shapes";
  opts.max_traces = 2;
  auto f = kiln::function([](const Tensor& x) { return x * 2.f; }, opts);
  for (int n = 1; n <= 4; ++n) CHECK(same(f(kiln::zeros({n})), kiln::zeros({n})));
  CHECK(f.tracing_count() == 2);
  REQUIRE_FALSE(log.empty());
  CHECK(log.back().find("[shapes] reached max_traces=2") != std::string::npos);
  opts.on_limit = kiln::OnTraceLimit::throw_error;
  auto g = kiln::function([](const Tensor& x) { return x * 2.f; }, opts);
  g(kiln::zeros({1}));
  g(kiln::zeros({2}));
  CHECK_THROWS_WITH(g(kiln::zeros({3})),
                    Catch::StartsWith("[shapes] a new input signature after 2 traces") &&
                        Catch::Contains("argument 0: shape [2] dtype f32 -> shape [3] dtype f32"));
  kiln::set_log_sink(nullptr);
}

TEST_CASE("retracing warning names the changed argument", "[function]") {
  std::vector<std::string> log;
  kiln::set_log_sink([&](const std::string& m) { log.push_back(m); });
  kiln::FunctionOptions opts;
  opts.name = "batchy";
  opts.max_traces = 100;
  auto f = kiln::function([](const Tensor& x) { return x + 1.f; }, opts);
  for (int n = 1; n <= 4; ++n) f(kiln::zeros({n, 5}));
  CHECK(log.empty());  // 4 of 4 traced, but the rule needs 5 of the last 10
  f(kiln::zeros({5, 5}));
  REQUIRE(log.size() == 1);
  CHECK(log[0].find("[batchy] retracing: 5 of the last 5 calls") != std::string::npos);
  CHECK(log[0].find("argument 0: shape [4,5] dtype f32 -> shape [5,5] dtype f32") !=
        std::string::npos);
  for (int n = 6; n <= 30; ++n) f(kiln::zeros({n, 5}));
  CHECK(log.size() == 2);  // at most twice per function
  kiln::set_log_sink(nullptr);
}

TEST_CASE("a train step with a tape compiles to one graph", "[function]") {
  kiln::Variable w(kiln::tensor({0.5f}), "w"), b(kiln::tensor({0.f}), "b");
  Tensor x = kiln::tensor({1.f, 2.f, 3.f}), y = kiln::tensor({3.f, 5.f, 7.f});
  auto step = kiln::function([&](const Tensor& xs, const Tensor& ys) {
    kiln::GradientTape tape;
    tape.watch(w.value());
    tape.watch(b.value());
    Tensor wv = w.value(), bv = b.value();
    kiln::GradientTape t2;
    t2.watch(wv);
    t2.watch(bv);
    Tensor loss = kiln::mean(kiln::square(wv * xs + bv - ys));
    auto g = t2.gradient(loss, {wv, bv});
    w.assign_sub(g[0] * 0.05f);
    b.assign_sub(g[1] * 0.05f);
    return loss;
  });
  float first = step(x, y).item<float>();
  float last = first;
  for (int i = 0; i < 200; ++i) last = step(x, y).item<float>();
  CHECK(step.tracing_count() == 1);
  CHECK(last < first * 0.01f);
  CHECK(w.value().item<float>() == Approx(2.f).margin(0.05));
}

TEST_CASE("nested functions inline; threads share one cache", "[function][threads]") {
  auto inner = kiln::function([](const Tensor& x) { return x * 3.f; });
  auto outer = kiln::function([&](const Tensor& x) { return inner(x) + 1.f; });
  CHECK(same(outer(kiln::tensor({1.f, 2.f})), kiln::tensor({4.f, 7.f})));
  CHECK(inner.tracing_count() == 0);
  CHECK(outer.tracing_count() == 1);

  auto f = kiln::function([](const Tensor& x) { return kiln::sum(x * x, {1}); });
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::int64_t n = 1 + (i + t) % 3;
        Tensor x = kiln::full({n, 4}, 1.0 + t);
        if (!same(f(x), kiln::full({n}, 4.0 * (1.0 + t) * (1.0 + t)))) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(f.tracing_count() == 3);
}

TEST_CASE("a function called from a call that runs eagerly gets its own arguments", "[function]") {
  // Past its trace limit, outer runs its callable eagerly, and inner's call is a real call
  // (not inlined): it must see inner's arguments only, not outer's before them.
  kiln::set_log_sink([](const std::string&) {});
  auto inner = kiln::function([](const Tensor& a, const Tensor& b) { return a * 10.f + b; });
  kiln::FunctionOptions opts;
  opts.max_traces = 1;
  auto outer = kiln::function(
      [&](const Tensor& x, const Tensor& y) { return inner(y, x) + inner(x, y) * 100.f; }, opts);
  CHECK(same(outer(kiln::tensor({1.f}), kiln::tensor({2.f})), kiln::tensor({1221.f})));
  for (int n = 2; n <= 3; ++n) {
    const Tensor x = kiln::full({n}, 1.0), y = kiln::full({n}, 2.0);
    CHECK(same(outer(x, y), kiln::full({n}, 1221.0)));  // eagerly: inner runs compiled
  }
  CHECK(outer.tracing_count() == 1);
  CHECK(inner.tracing_count() == 2);
  kiln::set_log_sink(nullptr);
}

TEST_CASE("destroyed variables and escaped symbolic tensors are clear errors", "[function]") {
  auto v = std::make_unique<kiln::Variable>(kiln::ones({2}), "temp");
  auto f = kiln::function([&](const Tensor& x) { return x + v->value(); });
  Tensor x = kiln::ones({2});
  f(x);
  kiln::Variable keep_name_alive = *v;
  v.reset();
  keep_name_alive = kiln::Variable();
  CHECK_THROWS_WITH(f(x), Catch::Contains("variable 'temp' used by this function was destroyed"));

  Tensor leaked;
  auto g = kiln::function([&](const Tensor& x2) {
    leaked = x2 * 2.f;
    return x2;
  });
  g(x);
  CHECK_THROWS_WITH(leaked + 1.f, Catch::Contains("symbolic tensor"));
}

TEST_CASE("clear_caches drops every cached graph", "[function]") {
  auto f = kiln::function([](const Tensor& x) { return x - 1.f; });
  f(kiln::ones({3}));
  CHECK(f.cache_size() == 1);
  const auto before = kiln::memory_stats().cached_functions;
  kiln::clear_caches();
  CHECK(f.cache_size() == 0);
  CHECK(kiln::memory_stats().cached_functions == before - 1);
}

TEST_CASE("a failed first trace releases the variables it created", "[function]") {
  const auto before = kiln::memory_stats();
  int calls = 0;
  std::weak_ptr<kiln::detail::VariableImpl> created;
  auto f = kiln::function([&](const Tensor& x) {
    kiln::Variable v(kiln::zeros({1000}), "scratch");
    created = v.impl();
    if (++calls == 1) throw kiln::Error("[test] first trace fails after creating a variable");
    return x + 1.f;
  });
  CHECK_THROWS_WITH(f(kiln::ones({2})), "[test] first trace fails after creating a variable");
  CHECK(created.expired());
  CHECK(kiln::memory_stats().live_bytes == before.live_bytes);
  CHECK(same(f(kiln::ones({2})), kiln::full({2}, 2.0)));  // the retry is a first trace again
  CHECK(f.tracing_count() == 1);
  CHECK_FALSE(created.expired());  // owned by the concrete function that created it
}

TEST_CASE("variables passed as arguments are keyed by identity", "[function]") {
  auto scale =
      kiln::function([](const Tensor& x, const kiln::Variable& v) { return x * v.value(); });
  kiln::Variable a(kiln::full({2}, 2.0), "a"), b(kiln::full({2}, 3.0), "b");
  Tensor x = kiln::ones({2});
  CHECK(same(scale(x, a), kiln::full({2}, 2.0)));
  CHECK(same(scale(x, a), kiln::full({2}, 2.0)));
  CHECK(scale.tracing_count() == 1);
  CHECK(same(scale(x, b), kiln::full({2}, 3.0)));
  CHECK(scale.tracing_count() == 2);
  a.assign(kiln::full({2}, 5.0));
  CHECK(same(scale(x, a), kiln::full({2}, 5.0)));
  CHECK(scale.tracing_count() == 2);
  CHECK_THROWS_WITH(a.assign(kiln::ones({3})),
                    "[Variable.assign] variable 'a' is f32 [2]; the new value is f32 [3]");
}

TEST_CASE("a function that returns nothing runs for its side effects, traced once", "[function]") {
  kiln::Variable counter(kiln::zeros({}), "void_fn/counter");
  auto bump = kiln::function([&](const Tensor& by) { counter.assign_add(by); });
  static_assert(std::is_void_v<decltype(bump(kiln::ones({})))>);
  for (int i = 0; i < 3; ++i) bump(kiln::full({}, 2.0));
  CHECK(counter.value().item<float>() == 6.0f);
  CHECK(bump.tracing_count() == 1);
  CHECK(bump.get_concrete_function(kiln::ones({})).graph().num_nodes() > 0);
  // Nested in another function it inlines, as any function does.
  auto twice = kiln::function([&](const Tensor& by) {
    bump(by);
    bump(by);
    return counter.value();
  });
  CHECK(twice(kiln::ones({})).item<float>() == 8.0f);
  // The readable check on what a callable may return (a compile-time error, so shown here
  // only as the trait it is built on).
  static_assert(!kiln::detail::is_function_result<int>::value);
  static_assert(kiln::detail::is_function_result<std::pair<Tensor, std::vector<Tensor>>>::value);
  static_assert(!kiln::detail::is_function_result<std::tuple<Tensor, double>>::value);
}

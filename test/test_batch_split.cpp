// Batch splitting: which graphs have independent rows, and split calls that compute what an
// unsplit plan computes, on two threads, without growing anything.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <thread>

#include <kiln/kiln.hpp>

#include "graph_test_support.hpp"
#include "jit/batch_split.hpp"
#include "jit/graph.hpp"
#include "jit/plan.hpp"
#include "kernels/parallel.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::detail::GraphData;
using kiln::test::close;
using kiln::test::record;

namespace {

constexpr std::int64_t input = 10, hidden = 20;

struct LstmWeights {
  kiln::Variable w{kiln::random::normal({input, 4 * hidden}, 0, 0.3, 1), "w"};
  kiln::Variable u{kiln::random::normal({hidden, 4 * hidden}, 0, 0.3, 2), "u"};
  kiln::Variable b{kiln::random::normal({4 * hidden}, 0, 0.1, 3), "b"};
};

Tensor lstm(const LstmWeights& p, const Tensor& xs) {
  const std::int64_t batch = xs.shape()[0];
  Tensor h = kiln::zeros({batch, hidden}), c = kiln::zeros({batch, hidden});
  for (const Tensor& x : kiln::unstack(xs, 1)) {
    auto z = kiln::split(kiln::matmul(x, p.w.value()) + kiln::matmul(h, p.u.value()) + p.b.value(),
                         4, 1);
    c = kiln::sigmoid(z[1]) * c + kiln::sigmoid(z[0]) * kiln::tanh(z[2]);
    h = kiln::sigmoid(z[3]) * kiln::tanh(c);
  }
  return h;
}

}  // namespace

TEST_CASE("batch_rows splits graphs whose rows are independent and refuses the others") {
  kiln::Variable rows_var(kiln::ones({32, 8}), "per_row");
  kiln::Variable weight(kiln::ones({8, 4}), "weight");
  struct Case {
    const char* what;
    Shape x;
    std::function<Tensor(const Tensor&)> fn;
    bool independent;
  };
  const std::vector<Case> cases = {
      {"dense layer",
       {32, 8},
       [&](const Tensor& x) { return kiln::relu(kiln::matmul(x, weight.value()) + 1.F); },
       true},
      {"sum over features",
       {32, 8},
       [](const Tensor& x) { return x * kiln::sum(x, {1}, true); },
       true},
      {"transpose keeping rows first",
       {32, 4, 8},
       [](const Tensor& x) {
         return kiln::transpose(x, {0, 2, 1}) * 2.F;
       },
       true},
      {"concat along features",
       {32, 8},
       [](const Tensor& x) {
         return kiln::concat({x, kiln::exp(x)}, 1);
       },
       true},
      {"sum over the batch", {32, 8}, [](const Tensor& x) { return kiln::sum(x, {0}); }, false},
      {"mean of everything", {32, 8}, [](const Tensor& x) { return kiln::mean(x) * x; }, false},
      {"contraction over rows",
       {32, 8},
       [](const Tensor& x) { return kiln::matmul(kiln::transpose(x), x); },
       false},
      {"a variable with a value per row",
       {32, 8},
       [&](const Tensor& x) { return x + rows_var.value(); },
       false},
      {"concat along the batch",
       {32, 8},
       [](const Tensor& x) {
         return kiln::concat({x, x}, 0);
       },
       false},
      {"some of the rows",
       {32, 8},
       [](const Tensor& x) {
         return kiln::slice(x, {{0, 16}, {0, 8}});
       },
       false},
      {"random numbers drawn in the graph",
       {32, 8},
       [](const Tensor& x) {
         const Tensor key = kiln::tensor<std::int64_t>({1, 2});
         return x + kiln::random::stateless_uniform({32, 8}, key);
       },
       false},
      {"rows reversed into a transpose",
       {32, 8},
       [](const Tensor& x) { return kiln::transpose(x) * 2.F; },
       false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const GraphData g = record(
        {c.x}, [&](const std::vector<Tensor>& p) { return std::vector<Tensor>{c.fn(p[0])}; });
    const auto rows = kiln::detail::batch_rows(g);
    CHECK(rows.has_value() == c.independent);
    if (rows) {
      CHECK((*rows)[static_cast<std::size_t>(g.outputs[0])] == 1);
      for (std::size_t i = 0; i < g.nodes.size(); ++i)
        if (g.nodes[i].kind == kiln::detail::Node::Kind::variable) CHECK((*rows)[i] == 0);
    }
  }
}

TEST_CASE("a batch-split plan computes what the whole plan computes") {
  if (kiln::detail::num_threads() < 2) {
    WARN("one thread (KILN_NUM_THREADS=1?): nothing is split");
    return;
  }
  const LstmWeights weights;
  for (std::int64_t batch : {32, 33, 64}) {
    CAPTURE(batch);
    const Tensor xs = kiln::random::normal({batch, 5, input}, 0, 1, 7);
    // A captured constant with a different value in every row: each half reads its own rows.
    const Tensor per_row =
        kiln::reshape(kiln::cast(kiln::arange(batch * hidden), kiln::f32), {batch, hidden}) * 0.01F;
    GraphData g = record({xs.shape()}, [&](const std::vector<Tensor>& p) {
      return std::vector<Tensor>{lstm(weights, p[0]) + per_row, kiln::tanh(p[0])};
    });
    kiln::detail::fuse_elementwise(g);
    const auto split = kiln::detail::plan_batch_split(g);
    REQUIRE(split != nullptr);
    CHECK(split->rows == batch);
    CHECK(split->first_row[1] == batch / 2);
    CHECK(split->halves[1].values[static_cast<std::size_t>(g.outputs[0])].shape[0] ==
          batch - batch / 2);
    const kiln::detail::Plan whole = kiln::detail::build_plan(g);
    const std::vector<const Tensor*> args = {&xs};
    std::vector<Tensor> expected, got;
    kiln::detail::run_plan(whole, g, args, "test", expected);
    for (int call = 0; call < 3; ++call) {
      kiln::detail::run_batch_split(*split, g, args, "test", got);
      REQUIRE(got.size() == 2);
      CHECK(close(got[0], expected[0]));
      CHECK(close(got[1], expected[1]));
    }
    CHECK(close(got[0], lstm(weights, xs) + per_row));
  }
}

TEST_CASE("small or unsplittable work runs one plan") {
  const LstmWeights weights;
  struct Case {
    const char* what;
    Shape x;
    bool split;
  };
  const Case cases[] = {
      {"the LSTM over 32 rows", {32, 5, input}, true},
      {"the LSTM over 4 rows: too few rows", {4, 5, input}, false},
      {"one step of it: too little work", {32, 1, input}, false},
      {"4,096 rows: kernels large enough to use the cores themselves", {4096, 5, input}, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    GraphData g = record({c.x}, [&](const std::vector<Tensor>& p) {
      return std::vector<Tensor>{lstm(weights, p[0])};
    });
    kiln::detail::fuse_elementwise(g);
    CHECK((kiln::detail::plan_batch_split(g) != nullptr) ==
          (c.split && kiln::detail::num_threads() > 1));
  }
  // An output that is the argument itself is handed out whole, never joined from halves.
  const GraphData identity = record({{64, 1000}}, [](const std::vector<Tensor>& p) {
    return std::vector<Tensor>{p[0], kiln::matmul(p[0], kiln::ones({1000, 8}))};
  });
  CHECK(kiln::detail::plan_batch_split(identity) == nullptr);
}

TEST_CASE("split functions: threads, memory and errors") {
  auto weights = std::make_unique<LstmWeights>();
  auto f = kiln::function([&](const Tensor& xs) { return lstm(*weights, xs); });
  const Tensor xs = kiln::random::normal({32, 5, input}, 0, 1, 9);
  const Tensor want = lstm(*weights, xs);
  CHECK(close(f(xs), want));

  SECTION("four threads at once") {
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 50; ++i)
          if (!close(f(xs), want)) ++wrong;
      });
    for (auto& t : threads) t.join();
    CHECK(wrong.load() == 0);
    CHECK(f.tracing_count() == 1);
  }
  SECTION("nothing grows over calls") {
    f(xs);
    const auto before = kiln::memory_stats();
    for (int i = 0; i < 200; ++i) f(xs);
    const auto after = kiln::memory_stats();
    CHECK(after.live_tensors == before.live_tensors);
    CHECK(after.live_bytes == before.live_bytes);
  }
  SECTION("a destroyed variable fails the call in both halves, cleanly") {
    weights.reset();
    CHECK_THROWS_WITH(f(xs), Catch::Contains("was destroyed"));
  }
}

TEST_CASE("a function traced with a dynamic batch splits each large enough size") {
  const LstmWeights weights;
  kiln::FunctionOptions options;
  options.input_signature = {kiln::TensorSpec{{-1, 5, input}}};
  auto f = kiln::function([&](const Tensor& xs) { return lstm(weights, xs); }, options);
  for (std::int64_t batch : {1, 7, 32, 33, 64, 16, 32}) {
    CAPTURE(batch);
    const Tensor xs =
        kiln::random::normal({batch, 5, input}, 0, 1, static_cast<std::uint64_t>(batch));
    CHECK(close(f(xs), lstm(weights, xs)));
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("parallel_pair runs both parts and rethrows") {
  // Catch's assertions are not thread-safe: the parts only count, the checks run here.
  std::atomic<int> first_ran{0}, second_ran{0}, wrong_range{0};
  auto first = [&](std::int64_t begin, std::int64_t end) {
    if (begin != 0 || end != 1) ++wrong_range;
    ++first_ran;
  };
  auto second = [&](std::int64_t begin, std::int64_t end) {
    if (begin != 1 || end != 2) ++wrong_range;
    ++second_ran;
  };
  for (int i = 0; i < 100; ++i) kiln::detail::parallel_pair(first, second);
  CHECK(first_ran.load() == 100);
  CHECK(second_ran.load() == 100);
  auto throws = [](std::int64_t, std::int64_t) { throw std::runtime_error("part failed"); };
  CHECK_THROWS_WITH(kiln::detail::parallel_pair(first, throws), "part failed");
  CHECK_THROWS_WITH(kiln::detail::parallel_pair(throws, second), "part failed");
  // Nested inside a parallel region: both parts run inline, one after the other.
  kiln::detail::parallel_for(
      2, 1, [&](std::int64_t, std::int64_t) { kiln::detail::parallel_pair(first, second); });
  CHECK(first_ran.load() >= 102);
  CHECK(second_ran.load() >= 102);
  CHECK(wrong_range.load() == 0);
}

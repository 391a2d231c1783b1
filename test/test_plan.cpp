// Memory planning of compiled functions: arena placement from value lifetimes, in-place steps,
// views resolved at plan time, and outputs that never alias the arena or each other's calls.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <thread>

#include <kiln/control_flow.hpp>
#include <kiln/kiln.hpp>

#include "core/environment.hpp"
#include "graph_test_support.hpp"
#include "jit/graph.hpp"
#include "jit/plan.hpp"
#include "jit/trace.hpp"
#include "kernels/fused.hpp"
#include "kernels/fused_loop.hpp"
#include "kernels/streaming.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::detail::GraphData;
using kiln::detail::Plan;
using kiln::test::close;
using kiln::test::record;

namespace {

std::size_t count_roots(const Plan& plan, Plan::Root::Kind kind) {
  std::size_t n = 0;
  for (const auto& r : plan.roots) n += r.kind == kind;
  return n;
}

}  // namespace

TEST_CASE("a chain of ops reuses arena blocks instead of one buffer per value") {
  // Ten matmuls in a row: at most two [64,64] intermediates are alive at once.
  const GraphData g = record({{64, 64}, {64, 64}}, [](const std::vector<Tensor>& p) {
    Tensor x = p[0];
    for (int i = 0; i < 10; ++i) x = kiln::matmul(x, p[1]);
    return std::vector<Tensor>{x};
  });
  const Plan plan = kiln::detail::build_plan(g);
  const std::int64_t block = 64 * 64 * 4;
  CHECK(count_roots(plan, Plan::Root::Kind::escape) == 1);  // the output
  CHECK(count_roots(plan, Plan::Root::Kind::arena) == 9);
  CHECK(plan.arena_bytes == 2 * block);
}

TEST_CASE("an elementwise step writes in place over an input that dies there") {
  const GraphData g = record({{1000}}, [](const std::vector<Tensor>& p) {
    Tensor a = kiln::exp(p[0]);  // arena
    Tensor b = kiln::tanh(a);    // a dies here: in place
    Tensor c = kiln::sin(b);     // b dies here: in place
    return std::vector<Tensor>{kiln::cos(c)};
  });
  const Plan plan = kiln::detail::build_plan(g);
  CHECK(plan.arena_bytes == 4000 + 32);  // one block of 1000 f32 rounded to 64 bytes
  CHECK(count_roots(plan, Plan::Root::Kind::arena) == 3);
}

TEST_CASE("views are layouts in the plan, not steps") {
  const GraphData g = record({{4, 6}}, [](const std::vector<Tensor>& p) {
    Tensor t = kiln::transpose(p[0]);                    // view of the argument
    Tensor s = kiln::slice(t, {{1, 5}, {0, 4}});         // view of the view
    return std::vector<Tensor>{kiln::reshape(s, {16})};  // not contiguous: a copy kernel
  });
  const Plan plan = kiln::detail::build_plan(g);
  std::size_t kernel_steps = 0;
  for (const auto& s : plan.steps) kernel_steps += s.kind == Plan::Step::Kind::kernel;
  CHECK(kernel_steps == 1);
  auto f = kiln::function([](const Tensor& x) {
    return kiln::reshape(kiln::slice(kiln::transpose(x), {{1, 5}, {0, 4}}), {16});
  });
  const Tensor x = kiln::reshape(kiln::cast(kiln::arange(24), kiln::f32), {4, 6});
  CHECK(f(x).to_vector<float>() ==
        kiln::reshape(kiln::slice(kiln::transpose(x), {{1, 5}, {0, 4}}), {16}).to_vector<float>());
}

TEST_CASE("outputs of one call are not overwritten by the next") {
  auto f = kiln::function([](const Tensor& x) {
    Tensor h = kiln::tanh(x) * 2.f;
    Tensor y = kiln::reshape(h + 1.f, {2, 2});  // an output that is a view of a computed value
    return std::make_pair(y, kiln::transpose(y));
  });
  const auto [y1, t1] = f(kiln::tensor({0.f, 1.f, 2.f, 3.f}));
  const std::vector<float> before = y1.to_vector<float>();
  const auto [y2, t2] = f(kiln::tensor({5.f, 6.f, 7.f, 8.f}));
  CHECK(y1.to_vector<float>() == before);
  CHECK(y2.to_vector<float>() != before);
  CHECK(t1.to_vector<float>() == kiln::transpose(y1).to_vector<float>());
  CHECK(y1.data() != y2.data());
}

TEST_CASE("outputs may be arguments, constants, variables or views of them") {
  const Tensor c = kiln::tensor({1.f, 2.f, 3.f});
  kiln::Variable v(kiln::tensor({4.f, 5.f, 6.f}), "plan_v");
  auto f = kiln::function([&](const Tensor& x) {
    return std::vector<Tensor>{x, c, v.value(), kiln::slice(x, {{1, 3}}), kiln::reshape(c, {3, 1})};
  });
  const Tensor x = kiln::tensor({7.f, 8.f, 9.f});
  const auto out = f(x);
  REQUIRE(out.size() == 5);
  CHECK(out[0].to_vector<float>() == std::vector<float>{7, 8, 9});
  CHECK(out[1].to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(out[2].to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(out[3].to_vector<float>() == std::vector<float>{8, 9});
  CHECK(out[4].shape() == Shape{3, 1});
  // A non-contiguous argument is read correctly too.
  const Tensor wide = kiln::reshape(kiln::tensor({1.f, 0.f, 2.f, 0.f, 3.f, 0.f}), {3, 2});
  const Tensor column = kiln::reshape(kiln::slice(wide, {{0, 3}, {0, 1}}), {3});
  CHECK(f(column)[3].to_vector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("a computed output is handed over whole, also when returned twice or assigned") {
  kiln::Variable last(kiln::zeros({3}), "plan_last");
  auto f = kiln::function([&](const Tensor& x) {
    Tensor y = x * 2.f;
    last.assign(y);
    return std::vector<Tensor>{y, y, kiln::reshape(y, {3, 1}), y + 1.f};
  });
  for (float base : {1.f, 10.f}) {
    const auto out = f(kiln::tensor({base, base + 1, base + 2}));
    REQUIRE(out.size() == 4);
    const std::vector<float> doubled{2 * base, 2 * base + 2, 2 * base + 4};
    CHECK(out[0].to_vector<float>() == doubled);
    CHECK(out[1].to_vector<float>() == doubled);
    CHECK(out[2].shape() == Shape{3, 1});
    CHECK(out[2].to_vector<float>() == doubled);
    CHECK(out[3].to_vector<float>() ==
          std::vector<float>{2 * base + 1, 2 * base + 3, 2 * base + 5});
    CHECK(last.value().to_vector<float>() == doubled);
  }
}

TEST_CASE("assigned values are copied out of the call's buffers") {
  kiln::Variable acc(kiln::zeros({3}), "plan_acc");
  auto step = kiln::function([&](const Tensor& x) {
    Tensor next = acc.value() + kiln::exp(x) * 0.f + x;
    acc.assign(next);
    return kiln::sum(next);
  });
  const Tensor x = kiln::tensor({1.f, 2.f, 3.f});
  step(x);
  step(x);
  CHECK(acc.value().to_vector<float>() == std::vector<float>{2, 4, 6});
}

TEST_CASE("threads calling one compiled function each get their own arena", "[threads]") {
  auto f = kiln::function([](const Tensor& x) {
    Tensor h = x;
    for (int i = 0; i < 4; ++i) h = kiln::tanh(kiln::matmul(h, h) * 0.1f + 1.f);
    return h;
  });
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(kiln::random::normal({16, 16}, 0, 1, 100 + t));
    kiln::run_functions_eagerly(true);
    expected.push_back(f(inputs.back()));
    kiln::run_functions_eagerly(false);
  }
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 200; ++i)
        all = all &&
              close(f(inputs[static_cast<std::size_t>(t)]), expected[static_cast<std::size_t>(t)]);
      ok[static_cast<std::size_t>(t)] = all;
    });
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>{1, 1, 1, 1});
}

TEST_CASE("a dynamic batch dim gets a plan per size with the right arena") {
  auto f = kiln::function([](const Tensor& x) { return kiln::sum(kiln::tanh(x) * 2.f + x, {1}); },
                          {.input_signature = {kiln::TensorSpec{{-1, 8}, kiln::f32}}});
  for (std::int64_t b : {1, 5, 64, 5}) {
    const Tensor x = kiln::random::normal({b, 8}, 0, 1, static_cast<std::uint64_t>(b));
    CHECK(close(f(x), kiln::sum(kiln::tanh(x) * 2.f + x, {1})));
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("matmul epilogues: products summed with a bias accumulate into one buffer",
          "[function]") {
  using Kind = Plan::Step::Kind;
  const auto run = [](const GraphData& g, const Plan& plan, const std::vector<Tensor>& args) {
    std::vector<const Tensor*> borrowed;
    for (const Tensor& t : args) borrowed.push_back(&t);
    std::vector<Tensor> out;
    kiln::detail::run_plan(plan, g, borrowed, "test", out);
    return out;
  };
  const auto count = [](const Plan& plan, Kind kind) {
    std::size_t n = 0;
    for (const auto& s : plan.steps) n += s.kind == kind;
    return n;
  };
  const std::vector<Tensor> args = {
      kiln::random::normal({8, 5}, 0, 1, 1), kiln::random::normal({5, 6}, 0, 1, 2),
      kiln::random::normal({8, 4}, 0, 1, 3), kiln::random::normal({4, 6}, 0, 1, 4),
      kiln::random::normal({6}, 0, 1, 5)};
  const std::vector<Shape> shapes = {{8, 5}, {5, 6}, {8, 4}, {4, 6}, {6}};
  const auto check_close = [](const Tensor& a, const Tensor& b) { CHECK(close(a, b)); };

  SECTION("x W + h U + b: a bias copy and two GEMMs, no add") {
    const auto f = [](const std::vector<Tensor>& p) {
      return std::vector<Tensor>{kiln::matmul(p[0], p[1]) + kiln::matmul(p[2], p[3]) + p[4]};
    };
    const GraphData g = record(shapes, f);
    const Plan plan = kiln::detail::build_plan(g);
    CHECK(count(plan, Kind::kernel) == 3);  // two GEMMs, the second accumulating; the bias add
    check_close(run(g, plan, args)[0], f(args)[0]);
    // Fused as kiln::function does it: the three-term sum is one fused step, gone entirely.
    auto traced = kiln::function([&](const std::vector<Tensor>& p) { return f(p)[0]; });
    check_close(traced(args), f(args)[0]);
  }
  SECTION("a product also read elsewhere keeps its own buffer") {
    const auto f = [](const std::vector<Tensor>& p) {
      const Tensor xw = kiln::matmul(p[0], p[1]);
      return std::vector<Tensor>{xw + p[4], kiln::tanh(xw)};
    };
    const GraphData g = record(shapes, f);
    const Plan plan = kiln::detail::build_plan(g);
    CHECK(count(plan, Kind::copy) == 0);
    const auto out = run(g, plan, args), expected = f(args);
    check_close(out[0], expected[0]);
    check_close(out[1], expected[1]);
  }
  SECTION("x W + b as the output of the function") {
    const auto f = [](const std::vector<Tensor>& p) {
      return std::vector<Tensor>{kiln::matmul(p[0], p[1]) + p[4]};
    };
    const GraphData g = record(shapes, f);
    const Plan plan = kiln::detail::build_plan(g);
    CHECK(count(plan, Kind::copy) == 1);  // the bias, broadcast into the output
    CHECK(count(plan, Kind::flat) + count(plan, Kind::fused) == 0);
    const auto first = run(g, plan, args);
    const auto second = run(g, plan, args);  // a fresh output buffer per call
    check_close(first[0], f(args)[0]);
    check_close(second[0], f(args)[0]);
  }
}

TEST_CASE("short rows are copied exactly: broadcast rows, column slices, every width and dtype") {
  // Row widths around the vector width of each instruction set (8, 16, 32 and 64 bytes), for
  // the copy step of a broadcast row and for the gathered slices of a fused step.
  for (std::int64_t width : {1, 2, 3, 5, 8, 13, 20, 33, 80, 257}) {
    CAPTURE(width);
    const Tensor row = kiln::random::normal({width}, 0, 1, static_cast<std::uint64_t>(width));
    const Tensor full = kiln::broadcast_to(row, {7, width}).contiguous();
    CHECK(kiln::broadcast_to(row, {0, width}).contiguous().shape() == Shape{0, width});
    const std::vector<float> row_values = row.to_vector<float>();
    const std::vector<float> copied = full.to_vector<float>();
    for (std::size_t i = 0; i < copied.size(); ++i)
      REQUIRE(copied[i] == row_values[i % row_values.size()]);
    for (kiln::DType dtype : {kiln::f64, kiln::i64, kiln::i32, kiln::boolean}) {
      const Tensor typed = kiln::cast(row, dtype);
      const Tensor copied_typed = kiln::broadcast_to(typed, {3, width}).contiguous();
      const Tensor expected = kiln::cast(kiln::broadcast_to(row, {3, width}), dtype);
      CHECK(kiln::cast(copied_typed, kiln::f64).to_vector<double>() ==
            kiln::cast(expected, kiln::f64).to_vector<double>());
    }

    const Tensor z = kiln::random::normal({9, 3 * width}, 0, 1, 5);
    auto gates = kiln::function([](const Tensor& zz) {
      const auto parts = kiln::split(zz, 3, 1);
      return kiln::sigmoid(parts[0]) * kiln::tanh(parts[1]) + parts[2];
    });
    const auto parts = kiln::split(z, 3, 1);
    CHECK(close(gates(z), kiln::sigmoid(parts[0]) * kiln::tanh(parts[1]) + parts[2]));
  }
}

TEST_CASE(
    "fused steps are laid out when the plan is built; long rows keep the row walk or a loop") {
  using kiln::detail::FusedLayout;
  struct Case {
    const char* what;
    Shape z_shape;  // split in 3 along dim 1: slices are gathered inputs
    FusedLayout::Mode mode;
    bool planned;
  };
  const Case cases[] = {
      {"gate slices of a matrix", {32, 60}, FusedLayout::Mode::whole_rows, true},
      {"slices of a 3-d tensor coalesce to rows", {4, 30, 5}, FusedLayout::Mode::whole_rows, true},
      {"rows of 1,500", {3, 4500}, FusedLayout::Mode::blocks, true},
      {"rows of 3,000", {3, 9000}, FusedLayout::Mode::long_rows, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const auto body = [](const Tensor& z) {
      const auto parts = kiln::split(z, 3, 1);
      return kiln::sigmoid(parts[0]) * kiln::tanh(parts[1]) + parts[2];
    };
    GraphData g = record(
        {c.z_shape}, [&](const std::vector<Tensor>& p) { return std::vector<Tensor>{body(p[0])}; });
    REQUIRE(kiln::detail::fuse_elementwise(g) == 1);
    const Plan plan = kiln::detail::build_plan(g);
    std::size_t fused = 0;
    for (const auto& s : plan.steps) {
      if (s.kind != Plan::Step::Kind::fused) continue;
      ++fused;
      // Without a plan-time layout the row walk runs from the refs; a long-row layout is kept
      // only with a generated loop (kernels/fused_loop.hpp) to run it.
      if (c.planned)
        CHECK(s.fused_layout != nullptr);
      else
        CHECK((s.fused_layout == nullptr || s.fused_layout->loop != nullptr));
      const FusedLayout layout =
          kiln::detail::layout_fused(std::span(s.refs).first(s.refs.size() - 1), s.refs.back());
      CHECK(layout.mode == c.mode);
      CHECK(layout.num_gathered == 3);
    }
    CHECK(fused == 1);
    auto f = kiln::function(body);
    const Tensor z = kiln::random::normal(c.z_shape, 0, 1, 11);
    for (int call = 0; call < 2; ++call) CHECK(close(f(z), body(z)));
  }
}

TEST_CASE("a scan's stacked results live in the arena, and its memory is reused after them") {
  // Two scans in a row over 64 steps of [32] rows; the first's stacked ys die when their sum is
  // taken, before the second runs, so the second's ys can take the same block.
  const auto body = [](const Tensor& c, const Tensor& x) {
    Tensor n = kiln::tanh(c + x);
    return std::pair<Tensor, Tensor>{n, n * 2.f};
  };
  const auto fn = [&](const std::vector<Tensor>& p) {
    auto [c1, ys1] = kiln::scan(body, p[0], p[1]);
    Tensor s1 = kiln::sum(ys1, {0});
    auto [c2, ys2] = kiln::scan(body, s1, p[1] * 3.f);
    return std::vector<Tensor>{kiln::sum(ys2, {0}) + c1 + c2};
  };
  const GraphData g = record({{32}, {64, 32}}, fn);
  const Plan plan = kiln::detail::build_plan(g);
  const std::int64_t stack = 64 * 32 * 4;
  std::size_t stacks_in_arena = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == kiln::detail::Node::Kind::output && g.nodes[i].shape == Shape{64, 32})
      stacks_in_arena +=
          plan.roots[plan.root_of(static_cast<std::int32_t>(i))].kind == Plan::Root::Kind::arena;
  CHECK(stacks_in_arena == 2);
  // Both stacks, the scaled xs and the small values fit in less than three stacks.
  CHECK(plan.arena_bytes < 3 * stack);

  const Tensor init = kiln::random::normal({32}, 0, 1, 3);
  const Tensor xs = kiln::random::normal({64, 32}, 0, 1, 4);
  auto f = kiln::function([&](const Tensor& a, const Tensor& b) { return fn({a, b})[0]; });
  for (int call = 0; call < 2; ++call) CHECK(close(f(init, xs), fn({init, xs})[0]));
}

namespace {

/// The steps of `plan` that start a group, as (first step, size).
std::vector<std::pair<std::size_t, std::int32_t>> groups_of(const Plan& plan) {
  std::vector<std::pair<std::size_t, std::int32_t>> groups;
  for (std::size_t s = 0; s < plan.steps.size(); ++s)
    if (plan.steps[s].group_size > 0) groups.emplace_back(s, plan.steps[s].group_size);
  return groups;
}

std::vector<Tensor> run_planned(const GraphData& g, const Plan& plan,
                                const std::vector<Tensor>& args) {
  std::vector<const Tensor*> borrowed;
  for (const Tensor& t : args) borrowed.push_back(&t);
  std::vector<Tensor> out;
  kiln::detail::run_plan(plan, g, borrowed, "test", out);
  return out;
}

}  // namespace

TEST_CASE("fused steps over the same elements run as one group: one loop, or chunk by chunk",
          "[function]") {
  using kiln::detail::fused_group_chunk;
  // x, y and z are outputs, so each is a fused step of its own; y reads x and z reads both,
  // element by element. The loop generator covers sigmoid but not exp. Without loops (SSE2)
  // the group runs chunk by chunk, and only where its buffers exceed the cache bound.
  const auto body = [](bool covered) {
    return [covered](const std::vector<Tensor>& p) {
      const Tensor x = kiln::tanh(p[0]) * p[1] + 1.0;
      const Tensor y = kiln::sqrt(kiln::abs(x)) * p[0] - p[1];
      const Tensor e = p[1] * 0.5;
      const Tensor z = x * y + (covered ? kiln::sigmoid(e) : kiln::exp(e));
      return std::vector<Tensor>{x, y, z};
    };
  };
  struct Case {
    const char* what;
    std::int64_t n;
    std::int64_t cache_bytes;  // the last-level cache's size as the plan sees it (0: the CPU's)
    bool chunked;              // whether a group without a loop forms
  };
  const Case cases[] = {
      {"one chunk", fused_group_chunk, 1024, false},
      {"two chunks and a part", 2 * fused_group_chunk + 37, 1024, true},
      {"enough for both threads", 20 * fused_group_chunk + 5, 1024, true},
      {"in the last-level cache", 2 * fused_group_chunk + 37, 0, false},
      {"beyond the L2 caches", 64 * fused_group_chunk + 3, 1024, true},
  };
  struct RestoreCacheBound {
    ~RestoreCacheBound() { kiln::detail::set_stream_output_bytes(0); }
  } restore_cache_bound;
  for (const bool covered : {true, false}) {
    for (const Case& c : cases) {
      CAPTURE(covered, c.what);
      kiln::detail::set_stream_output_bytes(c.cache_bytes);
      GraphData g = record({{c.n}, {c.n}}, body(covered));
      REQUIRE(kiln::detail::fuse_elementwise(g) == 3);
      const Plan plan = kiln::detail::build_plan(g);
      // Loops are generated at AVX2 and AVX-512 (KILN_SIMD), not at SSE2.
      bool loops = false;
      for (const auto& step : plan.steps) loops = loops || step.fused_layout->loop != nullptr;
      // With loops, x, y and z are one loop; with exp, x and y are (z runs on its own).
      const std::int32_t loop_steps = !loops ? 0 : covered ? 3 : 2;
      const auto groups = groups_of(plan);
      if (loop_steps == 0 && !c.chunked) {
        CHECK(groups.empty());
      } else {
        REQUIRE(groups.size() == 1);
        const std::int32_t size = loop_steps > 0 ? loop_steps : 3;
        CHECK(groups[0].second == size);
        const Plan::Step& first = plan.steps[groups[0].first];
        CHECK((first.group_loop != nullptr) == (loop_steps > 0));
        if (first.group_loop != nullptr) {
          CHECK(first.group_loop->program.num_extra_outputs == static_cast<std::size_t>(size - 1));
          // The loop asks ahead for its inputs and its outputs (the extra ones too) where they
          // come from beyond the L2 caches: 4 MiB and more moved.
          const bool asks = kiln::detail::switched_on_by_environment("KILN_LOOP_PREFETCH");
          CHECK(kiln::detail::fused_loop_prefetch_bytes(*first.group_loop->layout->loop) ==
                (asks && c.n * 4 * 3 >= (std::int64_t{4} << 20) ? kiln::detail::loop_prefetch_bytes
                                                                : 0));
        }
        // Outputs the cache bound would stream: not those a later step of the group reads.
        for (std::int32_t m = 0; m < size; ++m)
          CHECK(plan.steps[groups[0].first + static_cast<std::size_t>(m)]
                    .fused_layout->stream_output ==
                (c.n * 4 > kiln::detail::stream_output_bytes() && m == size - 1));
      }
      const std::vector<Tensor> args = {kiln::random::normal({c.n}, 0, 1, 1),
                                        kiln::random::normal({c.n}, 0, 1, 2)};
      const auto expected = body(covered)(args);
      for (int call = 0; call < 2; ++call) {
        const auto out = run_planned(g, plan, args);
        for (std::size_t i = 0; i < 3; ++i) CHECK(close(out[i], expected[i], 1e-6));
      }
    }
  }
}

TEST_CASE("a step that reads a group's output other than element by element is not in it",
          "[function]") {
  // 256 x 256: four chunks, beyond a cache bound of 1 KiB. y reads x's last element broadcast
  // (chunk 0 of y would run before the last chunk of x writes it), or x transposed (a gathered
  // read): neither can run chunk by chunk with x.
  const Shape shape{256, 256};
  struct RestoreCacheBound {
    ~RestoreCacheBound() { kiln::detail::set_stream_output_bytes(0); }
  } restore_cache_bound;
  kiln::detail::set_stream_output_bytes(1024);
  const std::function<Tensor(const Tensor&)> reads_of_x[] = {
      [](const Tensor& x) {
        return kiln::slice(kiln::reshape(x, {256 * 256}), 0, 256 * 256 - 1, 256 * 256);
      },
      [](const Tensor& x) { return kiln::transpose(x); },
  };
  for (std::size_t r = 0; r < std::size(reads_of_x); ++r) {
    CAPTURE(r);
    const auto body = [&](const std::vector<Tensor>& p) {
      const Tensor x = kiln::tanh(p[0]) * p[1] + 1.0;
      const Tensor y = kiln::exp(reads_of_x[r](x) * p[0]) - p[1];
      return std::vector<Tensor>{x, y};
    };
    GraphData g = record({shape, shape}, body);
    REQUIRE(kiln::detail::fuse_elementwise(g) == 2);
    const Plan plan = kiln::detail::build_plan(g);
    CHECK(groups_of(plan).empty());
    const std::vector<Tensor> args = {kiln::random::normal(shape, 0, 1, 3),
                                      kiln::random::normal(shape, 0, 1, 4)};
    const auto out = run_planned(g, plan, args), expected = body(args);
    CHECK(close(out[0], expected[0], 1e-6));
    CHECK(close(out[1], expected[1], 1e-6));
  }
}

TEST_CASE("a group whose step writes bools runs them right", "[function]") {
  // b is a comparison's result (a bool per element), read by y element by element: the group's
  // one loop writes f32 outputs only, so b's step is not merged into one.
  const auto body = [](const std::vector<Tensor>& p) {
    const Tensor b = kiln::tanh(p[0]) * p[1] > 0.1;
    const Tensor y = kiln::where(b, p[0] * 2.0, p[1]) + 1.0;
    return std::vector<Tensor>{b, y};
  };
  for (const std::int64_t n : {std::int64_t{37}, 3 * kiln::detail::fused_group_chunk + 5}) {
    CAPTURE(n);
    GraphData g = record({{n}, {n}}, body);
    kiln::detail::fuse_elementwise(g);
    const Plan plan = kiln::detail::build_plan(g);
    for (const auto& step : plan.steps) CHECK(step.group_loop == nullptr);
    const std::vector<Tensor> args = {kiln::random::normal({n}, 0, 1, 5),
                                      kiln::random::normal({n}, 0, 1, 6)};
    const auto out = run_planned(g, plan, args), expected = body(args);
    CHECK(out[0].to_vector<bool>() == expected[0].to_vector<bool>());
    CHECK(close(out[1], expected[1], 1e-6));
  }
}

TEST_CASE("an op of its own after a fused step joins its group as a fused step", "[function]") {
  // x is an output, so y, one primitive on x, is a step of its own: a flat row call for few
  // elements, a kernel step for many. Read element by element it joins x's group (SGD with
  // momentum: the new momentum, then the variable plus it); read otherwise it stays as it was.
  using Kind = Plan::Step::Kind;
  const std::function<Tensor(const Tensor&, const Tensor&)> ops_on_x[] = {
      [](const Tensor& x, const Tensor& p) { return x * p; },
      [](const Tensor& x, const Tensor&) { return kiln::abs(x); },
      [](const Tensor& x, const Tensor& p) { return x - kiln::slice(p, 0, 0, 1); },
      [](const Tensor& x, const Tensor& p) {
        return kiln::slice(x, {kiln::Slice{kiln::Slice::none, kiln::Slice::none, -1}}) * p;
      },
  };
  const bool joins[] = {true, true, true, false};
  struct RestoreCacheBound {
    ~RestoreCacheBound() { kiln::detail::set_stream_output_bytes(0); }
  } restore_cache_bound;
  kiln::detail::set_stream_output_bytes(1024);
  for (std::size_t k = 0; k < std::size(ops_on_x); ++k) {
    for (const std::int64_t n : {std::int64_t{37}, 3 * kiln::detail::fused_group_chunk + 5}) {
      CAPTURE(k, n);
      const auto body = [&](const std::vector<Tensor>& p) {
        const Tensor x = kiln::tanh(p[0]) * p[1] + 1.0;
        return std::vector<Tensor>{x, ops_on_x[k](x, p[1])};
      };
      GraphData g = record({{n}, {n}}, body);
      REQUIRE(kiln::detail::fuse_elementwise(g) == 1);
      const Plan plan = kiln::detail::build_plan(g);
      const bool loops = plan.steps.front().fused_layout->loop != nullptr;
      // Without loops (SSE2) a group runs chunk by chunk, and only over two chunks or more.
      const bool grouped = joins[k] && (loops || n > 2 * kiln::detail::fused_group_chunk);
      const auto groups = groups_of(plan);
      REQUIRE(groups.size() == (grouped ? 1U : 0U));
      const Plan::Step& last = plan.steps.back();
      if (grouped) {
        CHECK(groups[0].second == 2);
        CHECK((plan.steps[groups[0].first].group_loop != nullptr) == loops);
        CHECK(last.kind == Kind::fused);
        CHECK(last.own_program != nullptr);
      } else {
        // As it was planned: a flat call or a kernel step (reverse: a view, then one of those).
        CHECK(last.own_program == nullptr);
        CHECK((last.kind == Kind::flat || last.kind == Kind::kernel));
      }
      const std::vector<Tensor> args = {kiln::random::normal({n}, 0, 1, 7),
                                        kiln::random::normal({n}, 0, 1, 8)};
      const auto expected = body(args);
      for (int call = 0; call < 2; ++call) {
        const auto out = run_planned(g, plan, args);
        CHECK(close(out[0], expected[0], 1e-6));
        CHECK(close(out[1], expected[1], 1e-6));
      }
    }
  }
}

TEST_CASE("a group may start with an op of its own, and stores only what is read after it",
          "[function]") {
  // y is read by two steps, so fusion leaves it a step of its own (Nesterov momentum's
  // gradient times the rate); x and z read it element by element. Its value is needed after
  // the group only where it is an output too.
  struct RestoreCacheBound {
    ~RestoreCacheBound() { kiln::detail::set_stream_output_bytes(0); }
  } restore_cache_bound;
  kiln::detail::set_stream_output_bytes(1024);
  for (const bool y_out : {false, true}) {
    for (const std::int64_t n : {std::int64_t{37}, 3 * kiln::detail::fused_group_chunk + 5}) {
      CAPTURE(y_out, n);
      const auto body = [&](const std::vector<Tensor>& p) {
        const Tensor y = p[0] * p[1];
        const Tensor x = y * 2.0 + p[1];
        const Tensor z = (x + y) * 3.0;
        if (y_out) return std::vector<Tensor>{x, z, y};
        return std::vector<Tensor>{x, z};
      };
      GraphData g = record({{n}, {n}}, body);
      REQUIRE(kiln::detail::fuse_elementwise(g) == 2);
      const Plan plan = kiln::detail::build_plan(g);
      const auto groups = groups_of(plan);
      const bool loops = plan.steps.back().fused_layout->loop != nullptr;
      if (loops) {
        REQUIRE(groups.size() == 1);
        CHECK(groups[0].second == 3);
        const Plan::Step& first = plan.steps[groups[0].first];
        CHECK(first.own_program != nullptr);
        REQUIRE(first.group_loop != nullptr);
        std::size_t stores = 0;
        for (const auto& op : first.group_loop->program.ops) stores += op.store >= 0;
        CHECK(stores == (y_out ? 2U : 1U));
      } else {  // SSE2: chunk by chunk, over two chunks or more
        CHECK(groups.size() == (n > 2 * kiln::detail::fused_group_chunk ? 1U : 0U));
      }
      const std::vector<Tensor> args = {kiln::random::normal({n}, 0, 1, 9),
                                        kiln::random::normal({n}, 0, 1, 10)};
      const auto expected = body(args);
      for (int call = 0; call < 2; ++call) {
        const auto out = run_planned(g, plan, args);
        for (std::size_t i = 0; i < expected.size(); ++i) CHECK(close(out[i], expected[i], 1e-6));
      }
    }
  }
}

TEST_CASE("independent updates in a group run as one loop each, other sizes after it",
          "[function]") {
  // Nesterov momentum's form for three variables: each gradient times the rate first (read by
  // two steps: a step of its own), then each variable's momentum and value. a and b have n
  // elements, c has 7 and is updated between them. The group of a and b orders each variable's
  // steps together (one loop each, its product kept in registers) and c's updates run after.
  const std::int64_t n = 3 * kiln::detail::fused_group_chunk + 5;
  const std::vector<Shape> shapes = {{n}, {n}, {7}};
  std::vector<kiln::Variable> vars, moments;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    vars.emplace_back(kiln::random::normal(shapes[i], 0, 1, 20 + i));
    moments.emplace_back(kiln::random::normal(shapes[i], 0, 1, 30 + i));
  }
  const auto update = [&](const std::vector<Tensor>& grads) {
    std::vector<Tensor> scaled;
    for (const Tensor& g : grads) scaled.push_back(g * 0.1);
    for (const std::size_t i : {0, 2, 1}) {
      const Tensor m = moments[i].value() * 0.9 - scaled[i];
      moments[i].assign(m);
      vars[i].assign(vars[i].value() + (m * 0.9 - scaled[i]));
    }
    return std::vector<Tensor>{};
  };
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    grads.push_back(kiln::random::normal(shapes[i], 0, 1, 40 + i));
  // The expected values, computed op by op on copies.
  std::vector<Tensor> expected_vars, expected_moments;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Tensor m = moments[i].value() * 0.9 - grads[i] * 0.1;
    expected_moments.push_back(m);
    expected_vars.push_back(vars[i].value() + (m * 0.9 - grads[i] * 0.1));
  }
  GraphData g = record(shapes, update);
  kiln::detail::fuse_elementwise(g);
  const Plan plan = kiln::detail::build_plan(g);
  if (plan.steps.back().fused_layout != nullptr &&
      plan.steps.back().fused_layout->loop != nullptr) {  // AVX2, AVX-512
    std::size_t loops = 0;
    for (const auto& [first, size] : groups_of(plan)) {
      const Plan::Step& step = plan.steps[first];
      if (step.fused_layout->total != n) continue;
      REQUIRE(step.group_loop != nullptr);
      CHECK(size == 3);
      std::size_t stores = 0;
      for (const auto& op : step.group_loop->program.ops) stores += op.store >= 0;
      CHECK(stores == 1);  // the momentum; the product stays in a register
      ++loops;
    }
    CHECK(loops == 2);
  }
  run_planned(g, plan, grads);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    CAPTURE(i);
    CHECK(close(moments[i].value(), expected_moments[i], 1e-6));
    CHECK(close(vars[i].value(), expected_vars[i], 1e-6));
  }
}

TEST_CASE("an update a later group step reads is not moved after the group", "[function]") {
  // s (one element) is updated between x's steps, and y reads it broadcast: moving s's update
  // after the group would give y the old value.
  const std::int64_t n = 3 * kiln::detail::fused_group_chunk + 5;
  kiln::Variable s(kiln::tensor(std::vector<float>{2.0F}));
  kiln::Variable w(kiln::random::normal({n}, 0, 1, 50));
  const auto body = [&](const std::vector<Tensor>& p) {
    const Tensor x = p[0] * 0.5;
    const Tensor m = x * 3.0 + w.value();
    w.assign(m);
    s.assign(s.value() * 4.0);
    w.assign(m + x * s.value());
    return std::vector<Tensor>{};
  };
  const Tensor p = kiln::random::normal({n}, 0, 1, 51);
  const Tensor x = p * 0.5;
  const Tensor expected = (x * 3.0 + w.value()) + x * 8.0;
  GraphData g = record({{n}}, body);
  kiln::detail::fuse_elementwise(g);
  const Plan plan = kiln::detail::build_plan(g);
  run_planned(g, plan, {p});
  CHECK(close(w.value(), expected, 1e-6));
  CHECK(s.value().item<float>() == 8.0F);
}

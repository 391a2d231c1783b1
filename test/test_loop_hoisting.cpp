// Loop hoisting (lib/jit/loop_hoisting.cpp): what moves out of scan and while_loop regions (on
// recorded graphs, optimized as kiln::function optimizes them), and that traced results and
// gradients stay those of the loop as written.
#include <catch2/catch.hpp>

#include <functional>

#include <kiln/kiln.hpp>

#include "graph_test_support.hpp"
#include "jit/graph.hpp"
#include "jit/passes.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::detail::GraphData;
using kiln::detail::Node;
using kiln::detail::Prim;
using Tensors = std::vector<Tensor>;
using Fn = std::function<Tensors(const Tensors&)>;

namespace {

constexpr std::int64_t steps = 6, batch = 4, features = 5, units = 3;

/// The graph fn records over f32 parameters of these shapes, optimized as kiln::function
/// optimizes it (with or without loop hoisting).
GraphData optimized(const std::vector<Shape>& shapes, const Fn& fn, bool hoist = true) {
  GraphData g = kiln::test::record(shapes, fn);
  kiln::FunctionOptions options;
  options.hoist_loop_invariants = hoist;
  kiln::detail::run_graph_passes(g, options);
  return g;
}

std::vector<const Node*> nodes_of(const GraphData& g, Node::Kind kind) {
  std::vector<const Node*> found;
  for (const Node& n : g.nodes)
    if (n.kind == kind) found.push_back(&n);
  return found;
}

std::vector<const Node*> matmuls(const GraphData& g) {
  std::vector<const Node*> found;
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::primitive && n.prim == Prim::matmul) found.push_back(&n);
  return found;
}

const GraphData& body_of(const Node& scan) { return *scan.regions[0]; }

const Node& only_scan(const GraphData& g) {
  const auto scans = nodes_of(g, Node::Kind::scan);
  REQUIRE(scans.size() == 1);
  return *scans[0];
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return kiln::max(kiln::abs(kiln::cast(a, kiln::f64) - kiln::cast(b, kiln::f64))).item<double>();
}

/// h' = tanh(x_t W + h U + b), the ys every h.
std::pair<Tensor, Tensor> rnn(const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u,
                              const Tensor& b, bool reverse = false) {
  return kiln::scan(
      [&](const Tensor& h, const Tensor& x) {
        Tensor next = kiln::tanh(kiln::matmul(x, w) + kiln::matmul(h, u) + b);
        return std::pair<Tensor, Tensor>{next, next};
      },
      h0, xs, {.reverse = reverse});
}

const std::vector<Shape> rnn_shapes{
    {batch, units}, {steps, batch, features}, {features, units}, {units, units}, {units}};

Tensors rnn_arguments(std::uint64_t seed) {
  return {kiln::random::normal({batch, units}, 0, 0.5, seed),
          kiln::random::normal({steps, batch, features}, 0, 1, seed + 1),
          kiln::random::normal({features, units}, 0, 0.5, seed + 2),
          kiln::random::normal({units, units}, 0, 0.5, seed + 3),
          kiln::random::normal({units}, 0, 0.1, seed + 4)};
}

/// fn traced as a kiln::function of the five RNN arguments (optimized, so hoisted), called on a.
Tensors traced(const Fn& fn, const Tensors& a) {
  auto f = kiln::function(
      [&](const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u, const Tensor& b) {
        return fn({h0, xs, w, u, b});
      });
  return f(a[0], a[1], a[2], a[3], a[4]);
}

const Fn rnn_fn = [](const Tensors& a) {
  auto [h, ys] = rnn(a[0], a[1], a[2], a[3], a[4]);
  return Tensors{h, ys};
};

}  // namespace

TEST_CASE("a scan RNN's input projection becomes one matmul over all steps", "[loop_hoisting]") {
  const GraphData g = optimized(rnn_shapes, rnn_fn);
  INFO(g.to_string());
  const Node& scan = only_scan(g);
  // The body keeps h @ U only; x_t @ W is read as a second x.
  const auto inside = matmuls(body_of(scan));
  REQUIRE(inside.size() == 1);
  CHECK(inside[0]->shape == Shape{batch, units});
  CHECK(scan.attrs.ints[1] == 2);
  // Outside: one matmul of the whole xs [T, b, f] by W [f, h].
  const auto outside = matmuls(g);
  REQUIRE(outside.size() == 1);
  CHECK(outside[0]->shape == Shape{steps, batch, units});
  const Node& lhs = g.nodes[static_cast<std::size_t>(outside[0]->inputs[0])];
  const Node& rhs = g.nodes[static_cast<std::size_t>(outside[0]->inputs[1])];
  CHECK((lhs.kind == Node::Kind::parameter && lhs.index == 1));
  CHECK((rhs.kind == Node::Kind::parameter && rhs.index == 2));
  CHECK(scan.inputs[2] == outside[0] - g.nodes.data());

  // Without the pass both matmuls stay in the body.
  const GraphData plain = optimized(rnn_shapes, rnn_fn, false);
  CHECK(matmuls(body_of(only_scan(plain))).size() == 2);
  CHECK(matmuls(plain).empty());
}

TEST_CASE("a hoisted scan RNN gives the eager values, forward and reverse", "[loop_hoisting]") {
  const Tensors a = rnn_arguments(50);
  for (bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    auto f = kiln::function([reverse](const Tensor& h0, const Tensor& xs, const Tensor& w,
                                      const Tensor& u,
                                      const Tensor& b) { return rnn(h0, xs, w, u, b, reverse); });
    const auto [h, ys] = f(a[0], a[1], a[2], a[3], a[4]);
    const auto [eh, eys] = rnn(a[0], a[1], a[2], a[3], a[4], reverse);
    CHECK(max_diff(h, eh) <= 1e-6);
    CHECK(max_diff(ys, eys) <= 1e-6);
    const GraphData g = optimized(rnn_shapes, [reverse](const Tensors& v) {
      auto [hh, yy] = rnn(v[0], v[1], v[2], v[3], v[4], reverse);
      return Tensors{hh, yy};
    });
    CHECK(matmuls(body_of(only_scan(g))).size() == 1);
    CHECK(only_scan(g).attrs.ints[2] == (reverse ? 1 : 0));
  }
}

TEST_CASE("gradients through a hoisted scan equal the unoptimized ones", "[loop_hoisting]") {
  const Tensors a = rnn_arguments(60);
  const auto loss_and_grads = [](const Tensor& h0, const Tensor& xs, const Tensor& w,
                                 const Tensor& u, const Tensor& b) {
    auto [loss, grads] = kiln::value_and_grad(
        [](const Tensor& h, const Tensor& x, const Tensor& ww, const Tensor& uu, const Tensor& bb) {
          auto [last, ys] = rnn(h, x, ww, uu, bb);
          return kiln::sum(ys * ys) + kiln::sum(last);
        })(h0, xs, w, u, b);
    grads.insert(grads.begin(), loss);
    return grads;
  };
  kiln::FunctionOptions plain;
  plain.optimize = false;
  kiln::FunctionOptions no_hoist;
  no_hoist.hoist_loop_invariants = false;
  auto hoisted = kiln::function(loss_and_grads);
  auto unoptimized = kiln::function(loss_and_grads, plain);
  auto unhoisted = kiln::function(loss_and_grads, no_hoist);
  const Tensors r = hoisted(a[0], a[1], a[2], a[3], a[4]);
  const Tensors p = unoptimized(a[0], a[1], a[2], a[3], a[4]);
  const Tensors q = unhoisted(a[0], a[1], a[2], a[3], a[4]);
  REQUIRE(r.size() == 6);
  for (std::size_t i = 0; i < r.size(); ++i) {
    INFO("result " << i);
    CHECK(max_diff(r[i], p[i]) <= 1e-5);
    CHECK(max_diff(r[i], q[i]) <= 1e-5);
  }
  // The forward scan lost its matmul by W. The backward one (which replays the body at each
  // saved carry) keeps its per-step work: stacking the recomputed h @ U over all steps would
  // hold a [T, b, h] value the forward never kept (StepWorkStaysInside, core/hooks.hpp).
  const GraphData g = optimized(
      rnn_shapes, [&](const Tensors& v) { return loss_and_grads(v[0], v[1], v[2], v[3], v[4]); });
  INFO(g.to_string());
  const auto scans = nodes_of(g, Node::Kind::scan);
  REQUIRE(scans.size() == 2);
  const GraphData plain_graph = optimized(
      rnn_shapes, [&](const Tensors& v) { return loss_and_grads(v[0], v[1], v[2], v[3], v[4]); },
      false);
  const auto unhoisted_scans = nodes_of(plain_graph, Node::Kind::scan);
  REQUIRE(unhoisted_scans.size() == 2);
  CHECK(matmuls(body_of(*scans[0])).size() < matmuls(body_of(*unhoisted_scans[0])).size());
  CHECK(matmuls(body_of(*scans[1])).size() == matmuls(body_of(*unhoisted_scans[1])).size());
  CHECK(!matmuls(g).empty());
}

TEST_CASE("invariant work in a body runs once, before the loop", "[loop_hoisting]") {
  // W * 2, its transpose times 3 and U's row sums do not depend on the carry or the step.
  const Fn fn = [](const Tensors& a) {
    auto [h, ys] = kiln::scan(
        [&](const Tensor& c, const Tensor& x) {
          const Tensor w2 = a[2] * 2.f;
          const Tensor wt = kiln::transpose(a[2]) * 3.f;  // [units, features]
          const Tensor s = kiln::sum(a[3], {1});
          Tensor next = kiln::tanh(c * s + kiln::matmul(kiln::matmul(c, wt), w2));
          return std::pair<Tensor, Tensor>{next, next + kiln::sum(x)};
        },
        a[0], a[1]);
    return Tensors{h, ys};
  };
  const GraphData g = optimized(rnn_shapes, fn);
  INFO(g.to_string());
  const Node& scan = only_scan(g);
  const GraphData& body = body_of(scan);
  CHECK(matmuls(body).size() == 2);  // both read the carry
  std::size_t reductions = 0, body_constants = 0;
  for (const Node& n : body.nodes) {
    reductions += n.kind == Node::Kind::primitive && n.prim == Prim::reduce_sum;
    body_constants += n.kind == Node::Kind::constant;
  }
  CHECK(reductions == 1);      // sum(x) is per step (and not worth moving alone)
  CHECK(body_constants == 0);  // the 2 and 3 went out with their products
  CHECK(nodes_of(body, Node::Kind::fused).size() + nodes_of(body, Node::Kind::primitive).size() ==
        5);  // 2 matmuls, the fused c * s + ... tanh, sum(x) and next + sum(x)
  CHECK(scan.inputs.size() == 2 + 3);  // carry, x, then W*2, W^T*3 and U's sums as captures

  const Tensors a = rnn_arguments(70);
  const Tensors r = traced(fn, a);
  const Tensors e = fn(a);
  CHECK(max_diff(r[0], e[0]) <= 1e-6);
  CHECK(max_diff(r[1], e[1]) <= 1e-6);
}

TEST_CASE("nothing moves when everything depends on the carry", "[loop_hoisting]") {
  const Fn fn = [](const Tensors& a) {
    auto [h, ys] = kiln::scan(
        [&](const Tensor& c, const Tensor& x) {
          // x alone only meets elementwise work (not worth a stacked buffer); U only meets c.
          Tensor next =
              kiln::tanh(kiln::matmul(c + 1.f, a[3]) + kiln::sum(x * 2.f, {1}, /*keepdims*/ true));
          return std::pair<Tensor, Tensor>{next, next};
        },
        a[0], a[1]);
    return Tensors{h, ys};
  };
  const GraphData hoisted = optimized(rnn_shapes, fn);
  const GraphData plain = optimized(rnn_shapes, fn, false);
  CHECK(hoisted.to_string() == plain.to_string());
  CHECK(kiln::detail::hoist_loop_invariants(*std::make_shared<GraphData>(plain)) == 0);
}

TEST_CASE("a dynamic step count keeps one trace, with the product over all steps",
          "[loop_hoisting][dynamic]") {
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({batch, units}), kiln::TensorSpec({-1, batch, features}),
                       kiln::TensorSpec({features, units}), kiln::TensorSpec({units, units}),
                       kiln::TensorSpec({units})};
  auto f = kiln::function([](const Tensor& h0, const Tensor& xs, const Tensor& w, const Tensor& u,
                             const Tensor& b) { return rnn(h0, xs, w, u, b); },
                          o);
  const Tensors a = rnn_arguments(80);
  for (std::int64_t t : {1, 6, 13, 0}) {
    INFO("T = " << t);
    const Tensor xs = kiln::random::normal({t, batch, features}, 0, 1, 81);
    const auto [h, ys] = f(a[0], xs, a[2], a[3], a[4]);
    const auto [eh, eys] = rnn(a[0], xs, a[2], a[3], a[4]);
    CHECK(max_diff(h, eh) <= 1e-6);
    CHECK(ys.shape() == Shape{t, batch, units});
    if (t > 0) CHECK(max_diff(ys, eys) <= 1e-6);
  }
  CHECK(f.tracing_count() == 1);
  const std::string listing =
      f.get_concrete_function(a[0], a[1], a[2], a[3], a[4]).graph().to_string();
  INFO(listing);
  CHECK(listing.find("f32[?0,4,3] = matmul") != std::string::npos);
  std::size_t products = 0;
  for (auto at = listing.find("= matmul"); at != std::string::npos;
       at = listing.find("= matmul", at + 1))
    ++products;
  CHECK(products == 2);  // x W over all steps outside, h U in the body
}

TEST_CASE("work hoisted out of an inner scan moves out of the outer one too", "[loop_hoisting]") {
  constexpr std::int64_t outer_steps = 3;
  // xs [T1, T2, b, f]: each outer step runs the RNN over its T2 steps from h, and carries on
  // from the inner scan's last h.
  const Fn fn = [](const Tensors& a) {
    auto [h, ys] = kiln::scan(
        [&](const Tensor& c, const Tensor& x) {
          auto [last, inner_ys] = rnn(c, x, a[2], a[3], a[4]);
          return std::pair<Tensor, Tensor>{last, kiln::sum(inner_ys, {0})};
        },
        a[0], a[1]);
    return Tensors{h, ys};
  };
  std::vector<Shape> shapes = rnn_shapes;
  shapes[1] = Shape{outer_steps, steps, batch, features};
  const GraphData g = optimized(shapes, fn);
  INFO(g.to_string());
  const auto outside = matmuls(g);
  REQUIRE(outside.size() == 1);
  CHECK(outside[0]->shape == Shape{outer_steps, steps, batch, units});
  const GraphData& outer_body = body_of(only_scan(g));
  CHECK(matmuls(outer_body).empty());
  const GraphData& inner_body = body_of(only_scan(outer_body));
  CHECK(matmuls(inner_body).size() == 1);

  Tensors a = rnn_arguments(90);
  a[1] = kiln::random::normal({outer_steps, steps, batch, features}, 0, 1, 91);
  const Tensors r = traced(fn, a);
  const Tensors e = fn(a);
  CHECK(max_diff(r[0], e[0]) <= 1e-6);
  CHECK(max_diff(r[1], e[1]) <= 1e-5);
}

TEST_CASE("a while_loop's invariant work runs once, before the loop", "[loop_hoisting]") {
  const Fn fn = [](const Tensors& a) {
    return kiln::while_loop(
        [&](const Tensors& v) { return kiln::less(v[0], kiln::sum(a[4]) * 0.f + 5.f); },
        [&](const Tensors& v) {
          return Tensors{v[0] + 1.f, kiln::tanh(kiln::matmul(v[1], a[3] * 0.5f))};
        },
        {kiln::scalar(0.f), a[0]});
  };
  const GraphData g = optimized(rnn_shapes, fn);
  INFO(g.to_string());
  const auto loops = nodes_of(g, Node::Kind::while_loop);
  REQUIRE(loops.size() == 1);
  const GraphData& cond = *loops[0]->regions[0];
  const GraphData& body = *loops[0]->regions[1];
  CHECK(matmuls(body).size() == 1);
  CHECK(nodes_of(cond, Node::Kind::constant).size() == 0);  // the bound moved out whole
  CHECK(nodes_of(body, Node::Kind::primitive).size() + nodes_of(body, Node::Kind::fused).size() ==
        3);  // v + 1, the matmul, tanh
  CHECK(loops[0]->attrs.ints[1] == 1);
  CHECK(loops[0]->attrs.ints[2] == 1);

  const Tensors a = rnn_arguments(100);
  const Tensors r = traced(fn, a);
  const Tensors e = fn(a);
  CHECK(r[0].item<float>() == 5.f);
  CHECK(max_diff(r[1], e[1]) <= 1e-6);
}

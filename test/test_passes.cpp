// Graph passes, each on its own (graph in, graph out, expected structure), and end to end:
// optimized and unoptimized functions give the same results.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include <kiln/kiln.hpp>

#include "graph_test_support.hpp"
#include "jit/graph.hpp"
#include "jit/passes.hpp"
#include "jit/trace.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::detail::GraphData;
using kiln::detail::Node;
using kiln::test::record;

namespace {

std::size_t count_kind(const GraphData& g, Node::Kind kind) {
  std::size_t n = 0;
  for (const Node& node : g.nodes) n += node.kind == kind ? 1 : 0;
  return n;
}

std::size_t count_prim(const GraphData& g, kiln::detail::Prim p) {
  std::size_t n = 0;
  for (const Node& node : g.nodes) n += node.kind == Node::Kind::primitive && node.prim == p;
  return n;
}

bool close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         kiln::max(kiln::abs(kiln::cast(a, kiln::f64) - kiln::cast(b, kiln::f64))).item<double>() <=
             tol;
}

}  // namespace

TEST_CASE("constant folding evaluates subgraphs of constants only", "[passes]") {
  const Tensor w = kiln::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  GraphData g = record({{2, 2}}, [&](const std::vector<Tensor>& p) {
    const Tensor folded = kiln::transpose(w) * 2.f + 1.f;  // constants only
    return std::vector<Tensor>{kiln::matmul(p[0], folded)};
  });
  REQUIRE(count_prim(g, kiln::detail::Prim::transpose) == 1);
  CHECK(kiln::detail::fold_constants(g) == 3);
  CHECK(count_prim(g, kiln::detail::Prim::transpose) == 0);
  CHECK(count_prim(g, kiln::detail::Prim::matmul) == 1);
  // The folded constant holds transpose(w) * 2 + 1.
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::constant && n.shape == Shape{2, 2})
      CHECK(n.constant.to_vector<float>() == std::vector<float>{3, 7, 5, 9});
}

TEST_CASE("common subexpressions: small constants merge by value, larger ones by tensor",
          "[passes]") {
  // Each `* 0.9` and `+ 0.5` makes a scalar constant of its own; equal values are one node, so
  // the two sums of p * 0.9 + 0.5 are one too. -0.0 and 0.0 differ in their bits: not merged.
  const Tensor big_a = kiln::ones({32}), big_b = kiln::ones({32});
  GraphData g = record({{32}}, [&](const std::vector<Tensor>& p) {
    return std::vector<Tensor>{p[0] * 0.9 + 0.5, p[0] * 0.9 + 0.5, p[0] * 0.25, p[0] + (-0.0),
                               p[0] + 0.0,       p[0] * big_a,     p[0] * big_b};
  });
  REQUIRE(count_kind(g, Node::Kind::constant) == 9);
  kiln::detail::eliminate_common_subexpressions(g);
  // 0.9, 0.5, 0.25, -0.0, 0.0 and the two 32-element tensors.
  CHECK(count_kind(g, Node::Kind::constant) == 7);
  CHECK(g.outputs[0] == g.outputs[1]);
  CHECK(g.outputs[3] != g.outputs[4]);
  CHECK(g.outputs[5] != g.outputs[6]);
  auto f = kiln::function([&](const Tensor& x) {
    return std::vector<Tensor>{x * 0.9 + 0.5, x * 0.25 + 0.5, x + (-0.0), x + 0.0};
  });
  const Tensor x = kiln::tensor({1.f, -2.f, 0.f, 3.f}, {4});
  const auto out = f(x);
  CHECK(close(out[0], x * 0.9 + 0.5));
  CHECK(close(out[1], x * 0.25 + 0.5));
  CHECK(close(out[2], x + (-0.0)));
}

TEST_CASE("algebraic simplification bypasses identities", "[passes]") {
  using kiln::detail::Prim;
  GraphData g = record({{2, 3}}, [](const std::vector<Tensor>& p) {
    const Tensor& x = p[0];
    Tensor y = (x * 1.f + -0.f) - 0.f;
    y = y / 1.f;
    y = kiln::neg(kiln::neg(y));
    y = kiln::transpose(kiln::transpose(y, {1, 0}), {1, 0});
    y = kiln::reshape(kiln::reshape(y, {3, 2}), {6});
    y = kiln::cast(y, kiln::f32);
    return std::vector<Tensor>{y, kiln::ones({2, 3}) * x};  // ones of x's shape: also x
  });
  kiln::detail::simplify_algebra(g);
  INFO(g.to_string());
  CHECK(count_prim(g, Prim::mul) == 0);
  CHECK(count_prim(g, Prim::add) == 0);
  CHECK(count_prim(g, Prim::sub) == 0);
  CHECK(count_prim(g, Prim::div) == 0);
  CHECK(count_prim(g, Prim::neg) == 0);
  CHECK(count_prim(g, Prim::transpose) == 0);
  CHECK(count_prim(g, Prim::reshape) == 1);  // [2,3] -> [6] directly
  // x * ones broadcasting to a larger shape is not an identity.
  GraphData h = record({{3}}, [](const std::vector<Tensor>& p) {
    return std::vector<Tensor>{p[0] * kiln::ones({2, 3})};
  });
  kiln::detail::simplify_algebra(h);
  CHECK(count_prim(h, Prim::mul) == 1);
  // x + 0 and x - (-0) are not x for x = -0 (they give +0); for integers they are.
  GraphData z = record({{3}}, [](const std::vector<Tensor>& p) {
    return std::vector<Tensor>{p[0] + 0.f, p[0] - -0.f, kiln::cast(p[0], kiln::i32) + 0};
  });
  kiln::detail::simplify_algebra(z);
  CHECK(count_prim(z, Prim::add) == 1);
  CHECK(count_prim(z, Prim::sub) == 1);
  const Tensor zeros = kiln::tensor({0.f, -0.f});
  const auto plus_zero = [](const Tensor& x) { return kiln::neg(x) + 0.f; };
  const auto traced = kiln::function(plus_zero)(zeros).to_vector<float>();
  const auto eager = plus_zero(zeros).to_vector<float>();
  CHECK((!std::signbit(eager[0]) && !std::signbit(eager[1])));
  CHECK((!std::signbit(traced[0]) && !std::signbit(traced[1])));
}

TEST_CASE("elementwise fusion makes one kernel per tree with one output shape", "[passes]") {
  GraphData g = record({{4, 8}, {8}}, [](const std::vector<Tensor>& p) {
    const Tensor z = kiln::tanh(p[0] * 2.f + p[1]);  // fused: mul, add, tanh
    const Tensor s = kiln::sum(z, {1});              // a reduction ends the group
    return std::vector<Tensor>{kiln::sigmoid(s) * 0.5f, z};
  });
  kiln::detail::eliminate_dead_code(g);
  CHECK(kiln::detail::fuse_elementwise(g) == 2);
  INFO(g.to_string());
  CHECK(count_kind(g, Node::Kind::fused) == 2);
  CHECK(g.to_string().find("fused[tanh(((in0 * in1) + in2))]") != std::string::npos);
  CHECK(g.to_string().find("fused[(sigmoid(in0) * in1)]") != std::string::npos);
  // A value used twice stays a separate node (it is an input of both users).
  GraphData shared = record({{4}}, [](const std::vector<Tensor>& p) {
    const Tensor e = kiln::exp(p[0]);
    return std::vector<Tensor>{e * e + 1.f};
  });
  kiln::detail::fuse_elementwise(shared);
  CHECK(count_kind(shared, Node::Kind::fused) == 1);
  CHECK(count_prim(shared, kiln::detail::Prim::exp) == 1);
}

TEST_CASE("fused kernels match unfused ones on every layout", "[passes]") {
  // Each layout is a new signature: keep the expected retracing warnings out of the output.
  kiln::set_log_sink([](const std::string&) {});
  struct RestoreSink {
    ~RestoreSink() { kiln::set_log_sink(nullptr); }
  } restore;
  kiln::FunctionOptions plain;
  plain.optimize = false;
  const auto expr = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    const Tensor gate = kiln::sigmoid(a) * kiln::tanh(b) + kiln::exp(-kiln::square(c));
    return kiln::where(gate > 0.5f, gate, kiln::relu(a - c)) / (1.f + kiln::abs(b));
  };
  auto fused = kiln::function(expr);
  auto unfused = kiln::function(expr, plain);
  struct Layout {
    std::string name;
    Tensor a, b, c;
  };
  const auto u = [](const Shape& s, std::uint64_t seed) {
    return kiln::random::uniform(s, -2, 2, seed);
  };
  const Tensor wide = u({32, 80}, 9);
  std::vector<Layout> layouts = {
      {"tiny", u({4}, 1), u({4}, 2), u({4}, 3)},
      {"several blocks", u({1000}, 1), u({1000}, 2), u({1000}, 3)},
      {"broadcast row and scalar", u({37, 65}, 4), u({65}, 5), u({}, 6)},
      {"broadcast column", u({300, 3}, 4), u({300, 1}, 5), u({3}, 6)},
      {"short strided rows", kiln::slice(wide, 1, 0, 20), kiln::slice(wide, 1, 20, 40),
       kiln::slice(wide, 1, 60, 80)},
      {"transposed", kiln::transpose(u({70, 90}, 7)), u({90, 70}, 8), u({90, 1}, 9)},
      {"threaded", u({600, 512}, 10), u({512}, 11), u({600, 512}, 12)},
      {"long rows", u({3, 5000}, 13), u({5000}, 14), u({3, 1}, 15)},
  };
  for (const Layout& l : layouts) {
    INFO(l.name);
    CHECK(close(fused(l.a, l.b, l.c), unfused(l.a, l.b, l.c)));
    CHECK(close(fused(l.a, l.b, l.c), expr(l.a, l.b, l.c)));
  }
  CHECK(fused.get_concrete_function(layouts[0].a, layouts[0].b, layouts[0].c)
            .graph()
            .to_string()
            .find("fused[") != std::string::npos);
}

TEST_CASE("fusion handles bool and integer values inside a group", "[passes]") {
  const auto expr = [](const Tensor& a, const Tensor& b) {
    return kiln::cast(a < b, kiln::i32) * 3 + kiln::cast(kiln::logical_not(a >= b), kiln::i32);
  };
  auto fused = kiln::function(expr);
  const Tensor a = kiln::tensor({3, -7, 0, 12, 5, -1}, {2, 3});
  const Tensor b = kiln::tensor({2, 3, -4, 5, 1, 7}, {2, 3});
  CHECK(kiln::all(kiln::equal(fused(a, b), expr(a, b))).item<bool>());
}

TEST_CASE("each pass can be switched off", "[passes]") {
  const Tensor w = kiln::tensor({1.f, 2.f}, {2});
  const auto fn = [&](const Tensor& x) { return kiln::tanh(x * (w * 1.f) - 0.f); };
  const auto nodes = [&](kiln::FunctionOptions o) {
    auto f = kiln::function(fn, o);
    return f.get_concrete_function(kiln::ones({3, 2})).graph().num_nodes();
  };
  kiln::FunctionOptions all;
  kiln::FunctionOptions none;
  none.optimize = false;
  kiln::FunctionOptions no_fusion;
  no_fusion.fuse_elementwise = false;
  kiln::FunctionOptions no_fold = no_fusion;
  no_fold.fold_constants = false;
  kiln::FunctionOptions no_simplify = no_fold;
  no_simplify.simplify = false;
  // param, constant, fused(x * c, tanh)
  CHECK(nodes(all) == 3);
  // param, constant, mul, tanh
  CHECK(nodes(no_fusion) == 4);
  // param, w, mul(w, 1) is simplified away: param, w, mul, tanh
  CHECK(nodes(no_fold) == 4);
  // param, w, 1, w*1, mul, 0, sub, tanh
  CHECK(nodes(no_simplify) == 8);
  CHECK(nodes(none) == 8);
}

TEST_CASE("a sum of zero-pads tiling an axis becomes one concat (split's gradient)",
          "[passes][nn]") {
  using kiln::detail::Prim;
  const auto pads = [](const std::vector<Tensor>& p) {
    // The parts of [4,8] along axis 1, summed in a scrambled order, plus a sum that leaves a gap.
    const auto part = [&](std::size_t i, std::int64_t at) {
      return kiln::pad(p[i], {{0, 0}, {at, 8 - at - 2}});
    };
    const Tensor tiled = part(2, 4) + part(0, 0) + (part(3, 6) + part(1, 2));
    const Tensor gap = part(0, 0) + part(1, 4);
    return std::vector<Tensor>{tiled, gap};
  };
  const std::vector<Shape> shapes(4, Shape{4, 2});
  GraphData g = record(shapes, pads);
  REQUIRE(count_prim(g, Prim::pad) == 6);
  CHECK(kiln::detail::simplify_algebra(g) >= 1);
  CHECK(count_prim(g, Prim::concat) == 1);
  CHECK(count_prim(g, Prim::pad) == 2);  // the sum with a gap stays as it was
  CHECK(count_prim(g, Prim::add) == 1);

  // End to end, and through a tape: the gradient of split is one concat and no pad.
  std::vector<Tensor> args;
  for (std::uint64_t i = 0; i < 4; ++i) args.push_back(kiln::random::normal({4, 2}, 0, 1, i));
  auto f = kiln::function([&](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
    return pads({a, b, c, d});
  });
  const auto traced = f(args[0], args[1], args[2], args[3]);
  const auto eager = pads(args);
  CHECK(close(traced[0], eager[0], 0));
  CHECK(close(traced[1], eager[1], 0));
  const auto grad_of_split = [](const Tensor& x) {
    kiln::GradientTape tape;
    tape.watch(x);
    const auto parts = kiln::split(x, 4, 1);
    const Tensor loss =
        kiln::sum(kiln::sigmoid(parts[0]) * kiln::tanh(parts[2]) + parts[1] * parts[3]);
    return tape.gradient(loss, x);
  };
  auto g_fn = kiln::function(grad_of_split);
  const Tensor x = kiln::random::normal({3, 8}, 0, 1, 5);
  CHECK(close(g_fn(x), grad_of_split(x)));
  const std::string listing = g_fn.get_concrete_function(x).graph().to_string();
  CHECK(listing.find("concat") != std::string::npos);
  CHECK(listing.find("pad") == std::string::npos);
}

namespace {

/// Scenario 2's model: LSTM(8, return_sequences) -> LSTM(4) -> Dense(1, sigmoid).
struct SmallNet : kiln::Module {
  kiln::nn::LSTM l1{8, {.return_sequences = true}}, l2{4};
  kiln::nn::Dense out{1, kiln::nn::Activation::sigmoid};
  SmallNet() : Module("net") {
    add_module("l1", l1);
    add_module("l2", l2);
    add_module("out", out);
  }
  Tensor operator()(const Tensor& x) { return out(l2(l1(x))); }
};

/// Losses of three traced Adam steps and the final weights, with the given options. The
/// random initializers are seeded, so every call starts from the same weights.
std::pair<std::vector<float>, std::vector<Tensor>> train_three_steps(
    kiln::FunctionOptions options) {
  kiln::clear_session();
  SmallNet net;
  kiln::optim::Adam opt{{.learning_rate = 1e-2}};
  auto step = kiln::function(
      [&](const Tensor& x, const Tensor& y) {
        std::vector<kiln::Variable> vars;
        std::vector<Tensor> grads;
        Tensor loss;
        {
          kiln::GradientTape tape;
          loss = kiln::nn::losses::binary_crossentropy(y, net(x));
          vars = net.trainable_variables();
          grads = tape.gradient(loss, vars);
        }
        opt.apply(grads, vars);
        return loss;
      },
      options);
  const Tensor x = kiln::random::normal({6, 5, 3}, 0, 1, 41);
  const Tensor y = kiln::cast(kiln::random::uniform({6, 1}, 0, 1, 42) > 0.5f, kiln::f32);
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i) losses.push_back(step(x, y).item<float>());
  return {losses, net.get_weights()};
}

}  // namespace

TEST_CASE("optimized and unoptimized plans agree on an LSTM and a whole train step",
          "[passes][nn]") {
  kiln::FunctionOptions plain;
  plain.optimize = false;
  // The LSTM forward alone.
  kiln::clear_session();
  SmallNet net;
  const Tensor x = kiln::random::normal({4, 5, 3}, 0, 1, 40);
  auto optimized = kiln::function([&](const Tensor& v) { return net(v); });
  auto unoptimized = kiln::function([&](const Tensor& v) { return net(v); }, plain);
  const Tensor a = optimized(x), b = unoptimized(x);
  CHECK(kiln::max(kiln::abs(a - b)).item<float>() <= 1e-5f);
  CHECK(optimized.get_concrete_function(x).graph().num_nodes() <
        unoptimized.get_concrete_function(x).graph().num_nodes());
  // Forward, backward and Adam updates, three steps.
  const auto [losses_opt, weights_opt] = train_three_steps({});
  const auto [losses_plain, weights_plain] = train_three_steps(plain);
  for (std::size_t i = 0; i < losses_opt.size(); ++i)
    CHECK(losses_opt[i] == Approx(losses_plain[i]).epsilon(1e-5));
  REQUIRE(weights_opt.size() == weights_plain.size());
  for (std::size_t i = 0; i < weights_opt.size(); ++i)
    CHECK(kiln::max(kiln::abs(weights_opt[i] - weights_plain[i])).item<float>() <= 1e-5f);
}

TEST_CASE("the pass pipeline is one list, in order, switched by FunctionOptions", "[passes]") {
  std::vector<std::string> names;
  for (const auto& pass : kiln::detail::graph_passes()) names.emplace_back(pass.name);
  CHECK(names == std::vector<std::string>{"eliminate_common_subexpressions", "simplify_algebra",
                                          "fold_constants", "eliminate_dead_code",
                                          "fuse_elementwise"});
  kiln::FunctionOptions options;
  options.simplify = false;
  options.fuse_elementwise = false;
  std::vector<std::string> enabled;
  for (const auto& pass : kiln::detail::graph_passes())
    if (pass.enabled(options)) enabled.emplace_back(pass.name);
  CHECK(enabled == std::vector<std::string>{"eliminate_common_subexpressions", "fold_constants",
                                            "eliminate_dead_code"});
}

TEST_CASE("slices of pads read the pad's input: inside it, or as a narrower pad", "[passes]") {
  // pad x [2,3] to [4,7] (1 and 1 rows, 0 and 4 columns), then slice: inside x, around x, and
  // a pad of a pad. Results checked against eager ops through kiln::function.
  const auto program = [](const std::vector<Tensor>& p) {
    const Tensor padded = kiln::pad(p[0], {{1, 1}, {0, 4}});
    return std::vector<Tensor>{kiln::slice(padded, {{1, 3}, {1, 3}}),  // inside x
                               kiln::slice(padded, {{0, 4}, {0, 5}}),  // x and less padding
                               kiln::pad(padded, {{2, 0}, {0, 1}})};   // pad of a pad
  };
  GraphData g = record({{2, 3}}, program);
  CHECK(kiln::detail::simplify_algebra(g) >= 3);
  INFO(g.to_string());
  for (const auto& n : g.nodes)
    if (n.kind == kiln::detail::Node::Kind::primitive &&
        (n.prim == kiln::detail::Prim::slice || n.prim == kiln::detail::Prim::pad)) {
      const auto& in = g.nodes[static_cast<std::size_t>(n.inputs[0])];
      CHECK(in.kind == kiln::detail::Node::Kind::parameter);  // every one reads x itself
    }
  const Tensor x = kiln::random::normal({2, 3}, 0, 1, 5);
  auto traced = kiln::function([&](const Tensor& in) { return program({in}); });
  const std::vector<Tensor> got = traced(x), want = program({x});
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(got[i].shape() == want[i].shape());
    CHECK(kiln::max(kiln::abs(got[i] - want[i])).item<float>() == 0);
  }
}

TEST_CASE("a forward nn::LSTM drops the gates its lstm_sequence keeps for a gradient",
          "[passes][fused_recurrent]") {
  kiln::nn::LSTM lstm(8, {.return_state = true});
  const Tensor x = kiln::random::normal({2, 5, 3}, 0, 1, 6);
  lstm(x);
  const auto shape_of_sequence = [](const GraphData& g) {
    for (const auto& n : g.nodes)
      if (n.kind == kiln::detail::Node::Kind::primitive &&
          n.prim == kiln::detail::Prim::lstm_sequence)
        return n.shape;
    return kiln::Shape{};
  };
  GraphData forward =
      record({{2, 5, 3}}, [&](const std::vector<Tensor>& p) { return lstm.call(p[0]); });
  CHECK(shape_of_sequence(forward) == kiln::Shape{5, 2, 48});  // traced: gates kept
  kiln::detail::simplify_algebra(forward);
  CHECK(shape_of_sequence(forward) == kiln::Shape{5, 2, 16});  // only h and c are read
  // Under a tape the gradient reads the gates: they stay.
  GraphData trained = record({{2, 5, 3}}, [&](const std::vector<Tensor>& p) {
    kiln::GradientTape tape;
    const Tensor loss = kiln::sum(lstm(p[0]));
    return tape.gradient(loss, lstm.trainable_variables());
  });
  kiln::detail::simplify_algebra(trained);
  CHECK(shape_of_sequence(trained) == kiln::Shape{5, 2, 48});
  auto traced = kiln::function([&](const Tensor& in) { return lstm.call(in); });
  const std::vector<Tensor> got = traced(x), want = lstm.call(x);
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(kiln::max(kiln::abs(got[i] - want[i])).item<float>() <= 1e-6);
}

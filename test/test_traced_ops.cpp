// Every op, eager against traced: a kiln::function of the op must give the eager result.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;

namespace {

using V = const std::vector<Tensor>&;
struct OpCase {
  std::string name;
  std::function<Tensor(V)> f;
  std::vector<Tensor> args;
};

Tensor u(const Shape& s, double lo, double hi, std::uint64_t seed) {
  return kiln::random::uniform(s, lo, hi, seed);
}

std::vector<OpCase> cases() {
  Tensor a = u({3, 4}, -2, 2, 1), b = u({3, 4}, -2, 2, 2), pos = u({3, 4}, 0.5, 3, 3);
  Tensor col = u({3, 1}, -1, 1, 4), row = u({1, 4}, 0.5, 2, 5), x3 = u({2, 3, 4}, -1, 1, 6);
  Tensor ints = kiln::tensor({3, -7, 0, 12, 5, -1}, {2, 3}),
         ints2 = kiln::tensor({2, 3, -4, 5, 1, 7}, {2, 3});
  Tensor mask = a > 0.f;
  Tensor idx = kiln::tensor({2, 0, -1}, {3});
  std::vector<OpCase> c = {
      {"neg", [](V v) { return kiln::neg(v[0]); }, {a}},
      {"abs", [](V v) { return kiln::abs(v[0]); }, {a}},
      {"sign", [](V v) { return kiln::sign(v[0]); }, {a}},
      {"exp", [](V v) { return kiln::exp(v[0]); }, {a}},
      {"log", [](V v) { return kiln::log(v[0]); }, {pos}},
      {"log1p", [](V v) { return kiln::log1p(v[0]); }, {pos}},
      {"sqrt", [](V v) { return kiln::sqrt(v[0]); }, {pos}},
      {"rsqrt", [](V v) { return kiln::rsqrt(v[0]); }, {pos}},
      {"square", [](V v) { return kiln::square(v[0]); }, {a}},
      {"sin", [](V v) { return kiln::sin(v[0]); }, {a}},
      {"cos", [](V v) { return kiln::cos(v[0]); }, {a}},
      {"tanh", [](V v) { return kiln::tanh(v[0]); }, {a}},
      {"sigmoid", [](V v) { return kiln::sigmoid(v[0]); }, {a}},
      {"relu", [](V v) { return kiln::relu(v[0]); }, {a}},
      {"softplus", [](V v) { return kiln::softplus(v[0]); }, {a}},
      {"floor", [](V v) { return kiln::floor(v[0]); }, {a}},
      {"ceil", [](V v) { return kiln::ceil(v[0]); }, {a}},
      {"round", [](V v) { return kiln::round(v[0]); }, {a}},
      {"logical_not", [](V v) { return kiln::logical_not(v[0]); }, {mask}},
      {"isnan", [](V v) { return kiln::isnan(v[0] / v[0]); }, {a}},
      {"isfinite", [](V v) { return kiln::isfinite(kiln::log(v[0])); }, {a}},
      {"cast", [](V v) { return kiln::cast(v[0], kiln::i32); }, {a}},
      {"add", [](V v) { return v[0] + v[1]; }, {col, row}},
      {"sub", [](V v) { return v[0] - v[1]; }, {a, b}},
      {"mul", [](V v) { return v[0] * v[1]; }, {col, row}},
      {"div", [](V v) { return v[0] / v[1]; }, {a, pos}},
      {"pow", [](V v) { return kiln::pow(v[0], v[1]); }, {pos, b}},
      {"maximum", [](V v) { return kiln::maximum(v[0], v[1]); }, {a, b}},
      {"minimum", [](V v) { return kiln::minimum(v[0], v[1]); }, {a, b}},
      {"mod", [](V v) { return kiln::mod(v[0], v[1]); }, {ints, ints2}},
      {"int div", [](V v) { return v[0] / v[1]; }, {ints, ints2}},
      {"comparisons",
       [](V v) {
         return kiln::cast(v[0] < v[1], kiln::i32) + kiln::cast(v[0] >= v[1], kiln::i32) * 2 +
                kiln::cast(v[0] == v[1], kiln::i32) * 4 + kiln::cast(v[0] != v[1], kiln::i32) * 8 +
                kiln::cast(v[0] <= v[1], kiln::i32) * 16 + kiln::cast(v[0] > v[1], kiln::i32) * 32;
       },
       {ints, ints2}},
      {"logical", [](V v) { return kiln::logical_and(v[0], v[1]) || !v[0]; }, {mask, b > 0.f}},
      {"where", [](V v) { return kiln::where(v[0], v[1], v[2]); }, {mask, a, b}},
      {"clip", [](V v) { return kiln::clip(v[0], -0.5, 0.5); }, {a}},
      {"sum",
       [](V v) {
         return kiln::sum(v[0], {0, 2});
       },
       {x3}},
      {"mean", [](V v) { return kiln::mean(v[0], {1}, true); }, {x3}},
      {"prod", [](V v) { return kiln::prod(v[0], {-1}); }, {x3}},
      {"max", [](V v) { return kiln::max(v[0]); }, {x3}},
      {"min", [](V v) { return kiln::min(v[0], {0}); }, {x3}},
      {"logsumexp", [](V v) { return kiln::logsumexp(v[0], {2}); }, {x3}},
      {"all/any", [](V v) { return kiln::all(v[0], {1}) && kiln::any(v[0], {1}); }, {mask}},
      {"argmax", [](V v) { return kiln::argmax(v[0], 1); }, {a}},
      {"argmin", [](V v) { return kiln::argmin(v[0]); }, {a}},
      {"softmax", [](V v) { return kiln::softmax(v[0]); }, {x3}},
      {"log_softmax", [](V v) { return kiln::log_softmax(v[0], 0); }, {x3}},
      {"reshape",
       [](V v) {
         return kiln::reshape(v[0], {4, -1});
       },
       {x3}},
      {"transpose",
       [](V v) {
         return kiln::transpose(v[0], {2, 0, 1});
       },
       {x3}},
      {"expand/squeeze", [](V v) { return kiln::squeeze(kiln::expand_dims(v[0], 0)); }, {x3}},
      {"broadcast_to",
       [](V v) {
         return kiln::broadcast_to(v[0], {2, 3, 4});
       },
       {col}},
      {"concat",
       [](V v) {
         return kiln::concat({v[0], v[1]}, 1);
       },
       {a, col}},
      {"stack",
       [](V v) {
         return kiln::stack({v[0], v[1]}, 1);
       },
       {a, b}},
      {"unstack", [](V v) { return kiln::unstack(v[0], 1)[2]; }, {x3}},
      {"split",
       [](V v) {
         return kiln::split(v[0], {1, 3}, 1)[1];
       },
       {a}},
      {"slice",
       [](V v) {
         return kiln::slice(v[0], {{1, 2}, {kiln::Slice::none, kiln::Slice::none, -2}});
       },
       {x3}},
      {"gather", [](V v) { return kiln::gather(v[0], v[1], 1); }, {a, idx}},
      {"one_hot", [](V v) { return kiln::one_hot(v[0], 4); }, {idx}},
      {"pad",
       [](V v) {
         return kiln::pad(v[0], {{1, 0}, {2, 1}}, -1.0);
       },
       {a}},
      {"tile",
       [](V v) {
         return kiln::tile(v[0], {2, 3});
       },
       {col}},
      {"matmul", [](V v) { return kiln::matmul(v[0], kiln::transpose(v[1])); }, {a, b}},
      {"matmul batched", [](V v) { return kiln::matmul(v[0], v[1]); }, {x3, u({4, 5}, -1, 1, 7)}},
      {"sigmoid_cross_entropy",
       [](V v) { return kiln::sigmoid_cross_entropy(v[0], v[1]); },
       {a, kiln::sigmoid(b)}},
      {"constant capture",
       [a](V v) {
         return v[0] * a + kiln::ones({3, 4});
       },
       {b}},
  };
  return c;
}

}  // namespace

TEST_CASE("every op gives the same result traced as eager", "[function][ops]") {
  for (const OpCase& c : cases()) {
    INFO("op: " << c.name);
    const Tensor eager = c.f(c.args);
    auto traced_fn = kiln::function([&c](const std::vector<Tensor>& v) { return c.f(v); });
    const Tensor traced = traced_fn(c.args);
    REQUIRE(traced.dtype() == eager.dtype());
    REQUIRE(traced.shape() == eager.shape());
    if (kiln::is_floating(eager.dtype())) {
      const Tensor diff = kiln::abs(kiln::cast(traced, kiln::f64) - kiln::cast(eager, kiln::f64));
      CHECK(kiln::max(diff).item<double>() <= 1e-6);
    } else {
      CHECK(kiln::all(kiln::equal(traced, eager)).item<bool>());
    }
    CHECK(traced_fn.tracing_count() == 1);
  }
}

TEST_CASE("the optimizer merges repeated work and drops unused work", "[function][ops]") {
  auto f = kiln::function([](const Tensor& x) {
    Tensor unused = kiln::exp(x) * 3.f;  // dead
    (void)unused;
    return kiln::tanh(x) + kiln::tanh(x);  // one tanh after CSE
  });
  Tensor x = kiln::tensor({0.5f, -1.f});
  auto g = f.get_concrete_function(x).graph();
  const std::string listing = g.to_string();
  INFO(listing);
  CHECK(listing.find("exp") == std::string::npos);
  CHECK(listing.find("tanh") == listing.rfind("tanh"));
  kiln::FunctionOptions raw;
  raw.optimize = false;
  auto h = kiln::function(
      [](const Tensor& x2) {
        Tensor unused = kiln::exp(x2) * 3.f;
        (void)unused;
        return kiln::tanh(x2) + kiln::tanh(x2);
      },
      raw);
  CHECK(h.get_concrete_function(x).graph().num_nodes() > g.num_nodes());
  CHECK(kiln::all(kiln::equal(f(x), h(x))).item<bool>());
}

TEST_CASE("value_and_grad through a kiln::function, and destroying a function frees its cache",
          "[function][ops]") {
  const auto start = kiln::memory_stats();
  {
    auto f = kiln::function([](const Tensor& w) { return kiln::sum(w * w * w); });
    Tensor w = kiln::tensor({1.f, 2.f});
    f(w);
    CHECK(kiln::memory_stats().cached_functions == start.cached_functions + 1);
    auto [value, grads] = kiln::value_and_grad([&](const Tensor& p) { return f(p); })(w);
    CHECK(value.item<float>() == 9.f);
    CHECK(grads[0].to_vector<float>() == std::vector<float>{3.f, 12.f});
  }
  const auto end = kiln::memory_stats();
  CHECK(end.cached_functions == start.cached_functions);
  CHECK(end.live_graph_nodes == start.live_graph_nodes);
  CHECK(end.graph_bytes == start.graph_bytes);
}

TEST_CASE("every op traced with all dims dynamic matches eager or names the dynamic dim",
          "[function][ops][dynamic]") {
  int supported = 0, total = 0;
  for (const OpCase& c : cases()) {
    INFO("op: " << c.name);
    ++total;
    kiln::FunctionOptions options;
    options.name = c.name;
    for (const Tensor& t : c.args) {
      Shape dynamic = t.shape();
      for (auto& d : dynamic) d = -1;
      options.input_signature.emplace_back(dynamic, t.dtype());
    }
    auto traced_fn = kiln::function([&c](const std::vector<Tensor>& v) { return c.f(v); }, options);
    Tensor traced;
    try {
      traced = traced_fn(c.args);
    } catch (const kiln::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("dynamic") != std::string::npos);
      CHECK(traced_fn.cache_size() == 0);
      continue;
    }
    ++supported;
    const Tensor eager = c.f(c.args);
    REQUIRE(traced.dtype() == eager.dtype());
    REQUIRE(traced.shape() == eager.shape());
    if (kiln::is_floating(eager.dtype())) {
      const Tensor diff = kiln::abs(kiln::cast(traced, kiln::f64) - kiln::cast(eager, kiln::f64));
      CHECK(kiln::max(diff).item<double>() <= 1e-6);
    } else {
      CHECK(kiln::all(kiln::equal(traced, eager)).item<bool>());
    }
  }
  INFO(supported << " of " << total << " ops traced with every dim dynamic");
  CHECK(supported >= total * 3 / 4);
}

TEST_CASE("optimized and unoptimized plans agree on every op", "[function][ops][passes]") {
  kiln::FunctionOptions plain;
  plain.optimize = false;
  for (const OpCase& c : cases()) {
    INFO("op: " << c.name);
    auto optimized = kiln::function([&c](const std::vector<Tensor>& v) { return c.f(v); });
    auto unoptimized = kiln::function([&c](const std::vector<Tensor>& v) { return c.f(v); }, plain);
    const Tensor a = optimized(c.args), b = unoptimized(c.args);
    REQUIRE(a.dtype() == b.dtype());
    REQUIRE(a.shape() == b.shape());
    const Tensor diff = kiln::abs(kiln::cast(a, kiln::f64) - kiln::cast(b, kiln::f64));
    CHECK(kiln::max(diff).item<double>() <= 1e-6);
  }
}

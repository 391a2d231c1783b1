// Every op, eager against traced: a kiln::function of the op must give the eager result. The
// elementwise ops come from the shared table (elementwise_op_table.hpp).
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include <kiln/kiln.hpp>

#include "elementwise_op_table.hpp"

using kiln::Shape;
using kiln::Tensor;

namespace {

using V = const std::vector<Tensor>&;
struct OpCase {
  std::string name;
  std::function<Tensor(V)> f;
  std::vector<Tensor> args;
  int table_set = -1;  // which argument set of its table row (0 the first); -1: not a table row
};

Tensor u(const Shape& s, double lo, double hi, std::uint64_t seed) {
  return kiln::random::uniform(s, lo, hi, seed);
}

/// The inputs of the cases.
struct Inputs {
  Tensor a = u({3, 4}, -2, 2, 1), b = u({3, 4}, -2, 2, 2), pos = u({3, 4}, 0.5, 3, 3);
  Tensor col = u({3, 1}, -1, 1, 4), row = u({1, 4}, 0.5, 2, 5), x3 = u({2, 3, 4}, -1, 1, 6);
  Tensor unit = u({3, 4}, -0.9, 0.9, 7), above_one = u({3, 4}, 1.1, 3, 8);
  Tensor ints = kiln::tensor({3, -7, 0, 12, 5, -1}, {2, 3}),
         ints2 = kiln::tensor({2, 3, -4, 5, 1, 7}, {2, 3});
  Tensor mask = a > 0.f, mask2 = b > 0.f;
  Tensor idx = kiln::tensor({2, 0, -1}, {3});
};

using kiln::test::Domain;
using kiln::test::ElementwiseOp;

/// The f32 argument sets of a table row, from its domain (a ternary op's condition first).
std::vector<std::vector<Tensor>> f32_args(const ElementwiseOp& op, const Inputs& in) {
  const int arity = op.op.arity();
  const Domain d = op.domain;
  if (!kiln::test::accepts(op.accepts, kiln::f32)) return {};  // its i32 set is added after
  if (arity == 1 && d == Domain::positive) return {{in.pos}};
  if (arity == 1 && d == Domain::unit) return {{in.unit}};
  if (arity == 1 && d == Domain::above_one) return {{in.above_one}};
  if (arity == 1 && (d == Domain::real || d == Domain::off_zero || d == Domain::off_steps))
    return {{in.a}};
  if (arity == 2 && (d == Domain::real || d == Domain::off_zero))
    return {{in.col, in.row}, {in.a, in.b}};
  if (arity == 2 && d == Domain::positive_divisor) return {{in.a, in.pos}, {in.col, in.row}};
  if (arity == 2 && d == Domain::positive_base) return {{in.pos, in.b}};
  if (arity == 2 && d == Domain::apart) return {{in.a, in.b}};
  if (arity == 2 && d == Domain::within_period) return {{in.a, in.pos}};
  if (arity == 3 && d == Domain::real) return {{in.mask, in.a, in.b}};
  FAIL("no traced inputs for domain " << static_cast<int>(d) << " of the " << arity
                                      << "-argument op " << op.name);
  return {};
}

/// The cases of the elementwise table (elementwise_op_table.hpp), row by row: f32 inputs from
/// the row's domain, and i32 and bool ones when the row accepts those.
std::vector<OpCase> table_cases(const Inputs& in) {
  std::vector<OpCase> c;
  for (const ElementwiseOp& op : kiln::test::elementwise_ops()) {
    const auto f = [&op](V v) { return op.op(v); };
    std::vector<std::vector<Tensor>> sets = f32_args(op, in);
    const int arity = op.op.arity();
    if (kiln::test::accepts(op.accepts, kiln::i32))
      sets.push_back(arity == 1   ? std::vector<Tensor>{in.ints}
                     : arity == 2 ? std::vector<Tensor>{in.ints, in.ints2}
                                  : std::vector<Tensor>{in.ints > 0, in.ints, in.ints2});
    if (kiln::test::accepts(op.accepts, kiln::boolean))
      sets.push_back(arity == 1   ? std::vector<Tensor>{in.mask}
                     : arity == 2 ? std::vector<Tensor>{in.mask, in.mask2}
                                  : std::vector<Tensor>{in.mask, in.mask2, in.mask});
    for (std::size_t i = 0; i < sets.size(); ++i) {
      std::string name = op.name;
      if (i > 0) {
        name += fmt::format(" {}", kiln::dtype_name(sets[i].back().dtype()));
        for (const Tensor& t : sets[i]) name += fmt::format(" {}", t.shape().to_string());
      }
      c.push_back({name, f, sets[i], static_cast<int>(i)});
    }
  }
  return c;
}

/// Every case: the table's, then the other ops'.
std::vector<OpCase> cases() {
  const Inputs in;
  const Tensor &a = in.a, &b = in.b, &col = in.col, &x3 = in.x3;
  const Tensor &ints = in.ints, &ints2 = in.ints2, &mask = in.mask, &idx = in.idx;
  std::vector<OpCase> c = table_cases(in);
  std::vector<OpCase> others = {
      {"isnan of a quotient", [](V v) { return kiln::isnan(v[0] / v[0]); }, {a}},
      {"isfinite of a log", [](V v) { return kiln::isfinite(kiln::log(v[0])); }, {a}},
      {"cast", [](V v) { return kiln::cast(v[0], kiln::i32); }, {a}},
      {"comparisons",
       [](V v) {
         return kiln::cast(v[0] < v[1], kiln::i32) + kiln::cast(v[0] >= v[1], kiln::i32) * 2 +
                kiln::cast(v[0] == v[1], kiln::i32) * 4 + kiln::cast(v[0] != v[1], kiln::i32) * 8 +
                kiln::cast(v[0] <= v[1], kiln::i32) * 16 + kiln::cast(v[0] > v[1], kiln::i32) * 32;
       },
       {ints, ints2}},
      {"logical", [](V v) { return kiln::logical_and(v[0], v[1]) || !v[0]; }, {mask, b > 0.f}},
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
      {"conv2d",
       [](V v) {
         return kiln::conv2d(v[0], v[1], {.strides = {1, 2}, .padding = kiln::ConvPadding::same});
       },
       {u({2, 5, 6, 3}, -1, 1, 11), u({3, 2, 3, 4}, -1, 1, 12)}},
      {"conv_transpose",
       [](V v) {
         return kiln::conv_transpose(v[0], v[1],
                                     {.strides = {2}, .layout = kiln::DataLayout::channels_first});
       },
       {u({2, 3, 5}, -1, 1, 13), u({3, 2, 3}, -1, 1, 14)}},
      {"pooling",
       [](V v) {
         return kiln::max_pool(v[0], {.window = {2, 2}}) + kiln::avg_pool(v[0], {.window = {2, 2}});
       },
       {u({2, 4, 6, 3}, -1, 1, 15)}},
      {"cumsum", [](V v) { return kiln::cumsum(v[0], 1, true, true); }, {x3}},
      {"cumprod", [](V v) { return kiln::cumprod(v[0], 0); }, {x3}},
      {"argmax last", [](V v) { return kiln::argmax(kiln::round(v[0]), 1, false, true); }, {a}},
      {"sort", [](V v) { return kiln::sort(v[0], 1, true); }, {x3}},
      {"argsort", [](V v) { return kiln::argsort(v[0], 0); }, {a}},
      {"top_k",
       [](V v) {
         const kiln::TopK t = kiln::top_k(v[0], 2);
         return t.values * kiln::cast(t.indices, kiln::f32);
       },
       {x3}},
      {"take_along_axis",
       [](V v) { return kiln::take_along_axis(v[0], kiln::argsort(v[1], 1), 1); },
       {a, b}},
      {"scatter",
       [](V v) {
         return kiln::scatter(v[0], kiln::argsort(v[1], 1), v[1], 1, kiln::ScatterMode::add);
       },
       {a, b}},
      {"gather_nd",
       [](V v) {
         return kiln::gather_nd(v[0], kiln::tensor({1, 2, 0, 3, 2, 2}, {3, 2}));
       },
       {a}},
      {"scatter_nd",
       [](V v) {
         return kiln::scatter_nd(v[0], kiln::tensor({1, 0, 2}, {3, 1}), v[1]);
       },
       {a, b}},
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
  c.insert(c.end(), others.begin(), others.end());
  return c;
}

/// Empty when x and y hold the same values bit for bit (any NaN matches any NaN: its sign and
/// payload are not pinned); else the first difference.
std::string bit_difference(const Tensor& x, const Tensor& y) {
  if (x.dtype() == kiln::i64 && y.dtype() == kiln::i64)  // beyond 2^53 as double would round
    return x.to_vector<std::int64_t>() == y.to_vector<std::int64_t>() ? "" : "i64 values differ";
  const auto xs = kiln::test::values_of(x), ys = kiln::test::values_of(y);
  if (xs.size() != ys.size()) return "different sizes";
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const bool same = std::isnan(xs[i])
                          ? std::isnan(ys[i])
                          : xs[i] == ys[i] && std::signbit(xs[i]) == std::signbit(ys[i]);
    if (!same) return fmt::format("element {}: {} against {}", i, xs[i], ys[i]);
  }
  return "";
}

/// A kiln::function of f gives f's eager result on args bit for bit, traced once.
void check_bit_identical(const std::string& name, const std::function<Tensor(V)>& f,
                         const std::vector<Tensor>& args) {
  INFO("op: " << name);
  const Tensor eager = f(args);
  auto traced_fn = kiln::function([&f](const std::vector<Tensor>& v) { return f(v); });
  const Tensor traced = traced_fn(args);
  REQUIRE(traced.dtype() == eager.dtype());
  REQUIRE(traced.shape() == eager.shape());
  const std::string difference = bit_difference(traced, eager);
  INFO("traced against eager: " << difference);
  CHECK(difference.empty());
  CHECK(traced_fn.tracing_count() == 1);
}

}  // namespace

TEST_CASE("every elementwise op of the table is bit-identical traced and eager in every dtype",
          "[function][ops]") {
  using kiln::test::argument_dtype;
  for (const ElementwiseOp& op : kiln::test::elementwise_ops())
    for (kiln::DType dtype : kiln::test::all_dtypes()) {
      if (!kiln::test::accepts(op, dtype)) continue;
      for (const auto& inputs : kiln::test::reference_inputs(op, dtype)) {
        std::vector<Tensor> args;
        for (std::size_t k = 0; k < inputs.size(); ++k)
          args.push_back(kiln::test::make(inputs[k], argument_dtype(op, k, dtype)));
        check_bit_identical(
            fmt::format("{} {} on reference inputs", op.name, kiln::dtype_name(dtype)),
            [&op](V v) { return op.op(v); }, args);
      }
    }
  for (const OpCase& c : table_cases(Inputs{})) check_bit_identical(c.name, c.f, c.args);
}

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
  // Counted: the other ops and each table row's first case, one case per op as before the
  // table; a table case whose arguments share one shape must trace.
  int supported = 0, total = 0;
  for (const OpCase& c : cases()) {
    INFO("op: " << c.name);
    const bool counted = c.table_set <= 0;
    bool one_shape = c.table_set >= 0;
    for (const Tensor& t : c.args) one_shape = one_shape && t.shape() == c.args[0].shape();
    if (counted) ++total;
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
      CHECK_FALSE(one_shape);
      continue;
    }
    if (counted) ++supported;
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

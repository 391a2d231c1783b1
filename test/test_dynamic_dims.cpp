// Dynamic dims: a -1 in a function's input_signature makes that dim a symbol while tracing, so
// one trace serves every size there.
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;

namespace {
bool close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  return a.shape() == b.shape() && kiln::max(kiln::abs(a - b)).item<float>() <= tol;
}
kiln::FunctionOptions dynamic_batch(std::vector<kiln::TensorSpec> specs) {
  kiln::FunctionOptions o;
  o.name = "dyn";
  o.input_signature = std::move(specs);
  return o;
}
}  // namespace

TEST_CASE("one trace serves every batch size from 1 to 64", "[dynamic]") {
  const Tensor w = kiln::random::normal({10, 20}, 0, 1, 1);
  const Tensor b = kiln::random::normal({20}, 0, 1, 2);
  const auto model = [&](const Tensor& x) {
    Tensor h = kiln::tanh(kiln::matmul(x, w) + b);             // [?0,20]
    Tensor z = kiln::zeros({x.shape()[0], 20});                // shape built from a dynamic dim
    Tensor s = kiln::softmax(h + z, -1);                       // reductions keep the symbol
    Tensor m = kiln::mean(s * h);                              // mean over a dynamic extent
    Tensor r = kiln::reshape(h, {x.shape()[0], 4, 5});          // reshape keeping the symbol
    Tensor flat = kiln::reshape(kiln::transpose(r, {1, 2, 0}), {20, -1});  // -1 = the symbol
    return std::make_tuple(s, m, kiln::sum(flat, {0}), kiln::mean(h, {0}));
  };
  auto f = kiln::function(model, dynamic_batch({kiln::TensorSpec({-1, 10})}));
  const auto before = kiln::memory_stats();
  for (std::int64_t batch = 1; batch <= 64; ++batch) {
    const Tensor x = kiln::random::normal({batch, 10}, 0, 1, static_cast<std::uint64_t>(batch));
    const auto [s, m, col, mh] = f(x);
    const auto [es, em, ecol, emh] = model(x);
    REQUIRE(s.shape() == Shape{batch, 20});
    CHECK(close(s, es));
    CHECK(close(m, em));
    CHECK(close(col, ecol, 1e-4));
    CHECK(close(mh, emh));
  }
  CHECK(f.tracing_count() == 1);
  CHECK(f.cache_size() == 1);
  const auto after = kiln::memory_stats();
  CHECK(after.cached_functions == before.cached_functions + 1);
}

TEST_CASE("dynamic dims print as symbols in the graph listing", "[dynamic]") {
  auto f = kiln::function([](const Tensor& x) { return kiln::sum(x * 2.f, {1}); },
                          dynamic_batch({kiln::TensorSpec({-1, 3})}));
  const auto cf = f.get_concrete_function(kiln::ones({7, 3}));
  const std::string listing = cf.graph().to_string();
  CHECK(listing.find("[?0,3]") != std::string::npos);
  CHECK(listing.find("[?0]") != std::string::npos);
  CHECK(f(kiln::ones({2, 3})).to_vector<float>() == std::vector<float>{6, 6});
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("dynamic dims of equal size share a symbol; a new equality pattern retraces",
          "[dynamic]") {
  auto f = kiln::function([](const Tensor& x, const Tensor& y) { return x + y; },
                          dynamic_batch({kiln::TensorSpec({-1, 2}), kiln::TensorSpec({-1, 2})}));
  CHECK(f(kiln::ones({3, 2}), kiln::ones({3, 2})).shape() == Shape{3, 2});
  CHECK(f(kiln::ones({9, 2}), kiln::ones({9, 2})).shape() == Shape{9, 2});
  CHECK(f.tracing_count() == 1);
  // Different sizes are different symbols: they broadcast only with 1, so this is an error
  // naming the shapes, and nothing is cached for it.
  CHECK_THROWS_WITH(f(kiln::ones({4, 2}), kiln::ones({5, 2})),
                    Catch::Contains("[add] shapes [?0,2] and [?1,2] cannot be broadcast"));
  CHECK(f.tracing_count() == 1);
  CHECK(f(kiln::ones({5, 2}), kiln::ones({5, 2})).shape() == Shape{5, 2});
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("a dynamic dim of size 1 is still the symbol, not a broadcast", "[dynamic]") {
  const Tensor bias = kiln::tensor({1.f, 2.f}, {1, 2});
  auto f = kiln::function([&](const Tensor& x) { return kiln::sum(x + bias, {0}); },
                          dynamic_batch({kiln::TensorSpec({-1, 2})}));
  CHECK(f(kiln::ones({1, 2})).to_vector<float>() == std::vector<float>{2, 3});
  CHECK(f(kiln::ones({4, 2})).to_vector<float>() == std::vector<float>{8, 12});
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("a traced train step with a dynamic batch updates variables for every size",
          "[dynamic]") {
  kiln::Variable w(kiln::random::normal({3, 1}, 0, 1, 5), "w");
  const auto step = [&](const Tensor& x, const Tensor& y) {
    auto [loss, grads] = kiln::value_and_grad(
        [&](const Tensor& wv) { return kiln::mean(kiln::square(kiln::matmul(x, wv) - y)); })(
        w.value());
    w.assign_sub(grads[0] * 0.1f);
    return loss;
  };
  auto f = kiln::function(step, dynamic_batch({kiln::TensorSpec({-1, 3}), kiln::TensorSpec({-1, 1})}));
  kiln::Variable w_eager(w.value(), "w_eager");
  for (std::int64_t batch : {4, 7, 1, 16}) {
    const Tensor x = kiln::random::normal({batch, 3}, 0, 1, 10 + static_cast<std::uint64_t>(batch));
    const Tensor y = kiln::random::normal({batch, 1}, 0, 1, 20 + static_cast<std::uint64_t>(batch));
    const Tensor traced_loss = f(x, y);
    // The same step eagerly on a copy of the weights.
    auto [loss, grads] = kiln::value_and_grad([&](const Tensor& wv) {
      return kiln::mean(kiln::square(kiln::matmul(x, wv) - y));
    })(w_eager.value());
    w_eager.assign_sub(grads[0] * 0.1f);
    CHECK(close(traced_loss, loss));
    CHECK(close(w.value(), w_eager.value()));
  }
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("ops that need a dynamic dim's size say so clearly", "[dynamic]") {
  const auto sig = dynamic_batch({kiln::TensorSpec({-1, 4})});
  const Tensor x = kiln::ones({6, 4});
  const auto fails_with = [&](auto fn, const std::string& text) {
    auto f = kiln::function(fn, sig);
    CHECK_THROWS_WITH(f(x), Catch::Contains(text));
    CHECK(f.cache_size() == 0);
  };
  fails_with([](const Tensor& t) { return kiln::slice(t, 0, 0, 2); },
             "[slice] axis 0 is a dynamic dim (?0)");
  fails_with([](const Tensor& t) { return kiln::concat({t, t}, 0); },
             "[concat] the joined axis is a dynamic dim");
  fails_with([](const Tensor& t) { return kiln::unstack(t, 0)[0]; },
             "[unstack] the unstacked axis is a dynamic dim");
  fails_with([](const Tensor& t) { return t + kiln::ones({6, 4}); },
             "cannot be broadcast: a dynamic dim matches only itself or 1");
  fails_with([](const Tensor& t) { return kiln::zeros({t.shape()[0] * 2, 4}); },
             "computed from a dynamic dim");
  fails_with([](const Tensor& t) { return t + kiln::random::normal({t.shape()[0], 4}); },
             "random tensors are drawn eagerly");
  fails_with([](const Tensor& t) { return kiln::reshape(t, {-1}); },
             "[reshape] cannot reshape [?0,4] into [-1]");
  fails_with([](const Tensor& t) { return kiln::scalar(static_cast<double>(t.size())); },
             "[shape] [?0,4] has a dynamic dim");
  // Whole-axis slices, concat along a static axis and padding static axes work.
  auto ok = kiln::function(
      [](const Tensor& t) {
        return kiln::pad(kiln::concat({kiln::slice(t, 1, 0, 2), t}, 1), {{0, 0}, {1, 1}});
      },
      sig);
  CHECK(ok(x).shape() == Shape{6, 8});
  CHECK(ok(kiln::ones({2, 4})).shape() == Shape{2, 8});
  CHECK(ok.tracing_count() == 1);
}

TEST_CASE("input_signature with a bad dim is rejected", "[dynamic]") {
  auto make = [] {
    return kiln::function([](const Tensor& t) { return t; },
                          dynamic_batch({kiln::TensorSpec({-2, 4})}));
  };
  CHECK_THROWS_WITH(make(), Catch::Contains("[dyn] input_signature 0: dim 0 is -2"));
}

// Gradient checkpointing (recomputation): kiln::checkpoint(f) and ScanOptions::checkpoint_every.
// One table of rows, each a function built with checkpointing and the same function without:
// the same values, the same gradients (eager and traced) to rounding, and gradients against
// finite differences. Then variables, layers, captured tensors, dynamic trip counts, the
// memory the tape keeps, and the errors. (test_checkpoint.cpp is kiln::Checkpoint, save and
// restore, which is unrelated.)
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include <kiln/kiln.hpp>

#include "finite_difference.hpp"

using kiln::Tensor;

namespace {

using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

Tensor input(const kiln::Shape& shape, double lo, double hi, std::uint64_t seed,
             kiln::DType dtype = kiln::f64) {
  return kiln::random::uniform(shape, lo, hi, seed, dtype);
}

Tensor flat(const Tensor& t) { return kiln::reshape(t, {-1}); }

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return kiln::max(kiln::abs(kiln::cast(a, kiln::f64) - kiln::cast(b, kiln::f64))).item<double>();
}

/// A row: f built with checkpointing (`with`) and without (`without`), on args.
struct Row {
  std::string name;
  Fn with, without;
  V args;
};

/// An RNN over xs [T, 2, 3] from h0 [2, 3]: the final h and the ys, flattened, with the given
/// scan options.
Tensor rnn(const V& a, kiln::ScanOptions options) {
  static const Tensor w = input({3, 3}, -0.6, 0.6, 11);  // captured by value
  auto [h, ys] = kiln::scan(
      [&](const V& c, const V& x) {
        Tensor n = kiln::tanh(kiln::matmul(c[0], w) + x[0] * a[2]);
        return std::pair<V, V>{{n}, {kiln::sigmoid(n) * c[0]}};
      },
      {a[0]}, {a[1]}, options);
  return kiln::concat({flat(h[0]), flat(ys[0])}, 0);
}

Row scan_row(std::string name, std::int64_t steps, std::int64_t k, bool reverse) {
  return {std::move(name),
          [=](const V& a) { return rnn(a, {.reverse = reverse, .checkpoint_every = k}); },
          [=](const V& a) { return rnn(a, {.reverse = reverse}); },
          {input({2, 3}, -1, 1, 1), input({steps, 2, 3}, -1, 1, 2), input({3}, 0.5, 1.5, 3)}};
}

std::vector<Row> rows() {
  static const Tensor w = input({3, 3}, -0.6, 0.6, 12);
  const auto block = [](const V& a) {
    Tensor h = kiln::tanh(kiln::matmul(a[0], w) + a[1]);
    for (int i = 0; i < 3; ++i) h = kiln::sin(h) * a[1] + h;
    return V{h, kiln::exp(h) * 0.5};
  };
  std::vector<Row> r;
  const kiln::Checkpointed blocked = kiln::checkpoint(block);
  r.push_back({"checkpoint: matmul and elementwise, two results, a captured tensor",
               [=](const V& a) {
                 const V out = blocked(a);
                 return kiln::concat({flat(out[0]), flat(out[1])}, 0);
               },
               [=](const V& a) {
                 const V out = block(a);
                 return kiln::concat({flat(out[0]), flat(out[1])}, 0);
               },
               {input({2, 3}, -1, 1, 4), input({3}, 0.5, 1.5, 5)}});
  r.push_back({"checkpoint: one result of two used",
               [=](const V& a) { return blocked(a)[1] * a[0]; },
               [=](const V& a) { return block(a)[1] * a[0]; },
               {input({2, 3}, -1, 1, 6), input({3}, 0.5, 1.5, 7)}});
  const kiln::Checkpointed identity = kiln::checkpoint([](const Tensor& x) { return x; });
  r.push_back({"checkpoint: f returns its input",
               [=](const V& a) { return identity(a[0]) * a[0]; },
               [](const V& a) { return a[0] * a[0]; },
               {input({4}, -1, 1, 8)}});
  // A checkpoint in a scan body, and a scan in a checkpoint.
  const auto cell = [](const V& a) { return V{kiln::tanh(kiln::matmul(a[0], w) * a[2] + a[1])}; };
  const kiln::Checkpointed checked_cell = kiln::checkpoint(cell);
  const auto over_time = [](const std::function<V(const V&)>& step, const V& a) {
    auto [h, ys] = kiln::scan(
        [&](const Tensor& c, const Tensor& x) {
          const Tensor n = step({c, x, a[2]})[0];
          return std::pair{n, n * n};
        },
        a[0], a[1]);
    return kiln::concat({flat(h), flat(ys)}, 0);
  };
  r.push_back({"checkpoint inside a scan body",
               [=](const V& a) { return over_time(checked_cell, a); },
               [=](const V& a) { return over_time(cell, a); },
               {input({2, 3}, -1, 1, 9), input({5, 2, 3}, -1, 1, 10), input({3}, 0.5, 1.5, 11)}});
  const kiln::Checkpointed checked_scan =
      kiln::checkpoint([=](const V& a) { return V{over_time(cell, a)}; });
  r.push_back({"a scan inside a checkpoint",
               [=](const V& a) { return checked_scan(a)[0]; },
               [=](const V& a) { return over_time(cell, a); },
               {input({2, 3}, -1, 1, 12), input({4, 2, 3}, -1, 1, 13), input({3}, 0.5, 1.5, 14)}});
  r.push_back(scan_row("checkpoint_every 2 dividing T = 6", 6, 2, false));
  r.push_back(scan_row("checkpoint_every 3 not dividing T = 7", 7, 3, false));
  r.push_back(scan_row("checkpoint_every 3 not dividing T = 8, reverse", 8, 3, true));
  r.push_back(scan_row("checkpoint_every 2 dividing T = 6, reverse", 6, 2, true));
  r.push_back(scan_row("checkpoint_every 10 above T = 4", 4, 10, false));
  r.push_back(scan_row("checkpoint_every 1", 5, 1, false));
  const auto counter = [](const V& a, std::int64_t k) {
    auto [c, ys] = kiln::scan(
        [&](const V& carry, const V&) {
          const Tensor next = kiln::cos(carry[0]) * a[1] + carry[1];
          return std::pair<V, V>{{next, carry[1] * 0.9}, {next * next}};
        },
        {a[0], a[0] * 0.5}, {}, {.length = 7, .checkpoint_every = k});
    return kiln::concat({c[0], c[1], flat(ys[0])}, 0);
  };
  r.push_back({"checkpoint_every 2 with no xs (length 7)",
               [=](const V& a) { return counter(a, 2); },
               [=](const V& a) { return counter(a, 1); },
               {input({3}, -1, 1, 15), input({3}, 0.5, 1.5, 16)}});
  return r;
}

/// The tape gradient of sum(f(args) * weights), eager or inside a kiln::function.
V gradient(const Fn& f, const V& args, const Tensor& weights, bool traced) {
  const auto grads = [&](const V& in) {
    kiln::GradientTape tape;
    for (const Tensor& a : in) tape.watch(a);
    const Tensor loss = kiln::sum(f(in) * weights);
    return tape.gradient(loss, in);
  };
  if (!traced) return grads(args);
  auto traced_grads = kiln::function([&](const V& in) { return grads(in); });
  return traced_grads(args);
}

}  // namespace

TEST_CASE("checkpointed functions and scans compute what the plain ones do", "[recompute]") {
  for (const Row& row : rows()) {
    INFO("row: " << row.name);
    CHECK(max_diff(row.with(row.args), row.without(row.args)) == 0.0);
    auto traced = kiln::function([&](const V& a) { return row.with(a); });
    CHECK(max_diff(traced(row.args), row.without(row.args)) < 1e-12);
  }
}

TEST_CASE("checkpointed gradients equal the plain ones, eager and traced", "[recompute]") {
  for (const Row& row : rows()) {
    INFO("row: " << row.name);
    const Tensor weights = input(row.without(row.args).shape(), 0.5, 1.5, 99);
    const V plain = gradient(row.without, row.args, weights, false);
    for (bool traced : {false, true}) {
      INFO("traced: " << traced);
      const V got = gradient(row.with, row.args, weights, traced);
      REQUIRE(got.size() == plain.size());
      for (std::size_t i = 0; i < plain.size(); ++i) {
        INFO("input " << i);
        CHECK(max_diff(got[i], plain[i]) < 1e-12);
      }
    }
  }
}

TEST_CASE("checkpointed gradients match finite differences", "[recompute][autodiff]") {
  for (const Row& row : rows()) {
    INFO("row: " << row.name);
    const Tensor weights = input(row.without(row.args).shape(), 0.5, 1.5, 99);
    const V analytic = gradient(row.with, row.args, weights, false);
    for (std::size_t i = 0; i < row.args.size(); ++i) {
      INFO("input " << i);
      const std::vector<double> g = analytic[i].to_vector<double>();
      const std::vector<double> numeric = kiln::test::numeric_gradient(
          [&](const V& a) { return kiln::sum(row.with(a) * weights).item<double>(); }, row.args, i);
      for (std::size_t j = 0; j < g.size(); ++j)
        CHECK(g[j] == Approx(numeric[j]).margin(1e-6).epsilon(1e-5));
    }
  }
}

TEST_CASE("gradients reach variables read inside a checkpoint, eager and traced", "[recompute]") {
  kiln::Variable w(input({3, 4}, -0.5, 0.5, 21), "w"), b(input({4}, -0.1, 0.1, 22), "b");
  const auto layer = [&](const Tensor& x) {
    return kiln::tanh(kiln::matmul(x, w.value()) + b.value());
  };
  const kiln::Checkpointed checked = kiln::checkpoint(layer);
  const auto grads = [&](bool use_checkpoint, const Tensor& x) {
    kiln::GradientTape tape;
    const Tensor h = use_checkpoint ? checked(x) : layer(x);
    const Tensor loss = kiln::sum(kiln::square(h) * x.dim(0));
    V g = tape.gradient(loss, std::vector<kiln::Variable>{w, b});
    g.push_back(loss);
    return g;
  };
  const Tensor x = input({2, 3}, -1, 1, 23);
  const V plain = grads(false, x);
  const V eager = grads(true, x);
  auto traced = kiln::function([&](const Tensor& in) { return grads(true, in); });
  const V compiled = traced(x);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    INFO("gradient " << i);
    CHECK(max_diff(eager[i], plain[i]) < 1e-12);
    CHECK(max_diff(compiled[i], plain[i]) < 1e-12);
  }
  CHECK(checked.tracing_count() == 1);
  // Variables are read by reference: an assignment changes the cached checkpoint's result.
  w.assign(w.value() * 2.0);
  const V after = grads(true, x), after_plain = grads(false, x);
  CHECK(max_diff(after[2], plain[2]) > 1e-3);
  for (std::size_t i = 0; i < after.size(); ++i) CHECK(max_diff(after[i], after_plain[i]) < 1e-12);
  CHECK(checked.tracing_count() == 1);
  (void)grads(true, input({5, 3}, -1, 1, 24));  // a new signature traces again
  CHECK(checked.tracing_count() == 2);
}

TEST_CASE("a watched eager tensor captured by a checkpoint gets its gradient", "[recompute]") {
  const Tensor w = input({3}, 0.5, 1.5, 31), x = input({2, 3}, -1, 1, 32);
  const kiln::Checkpointed checked =
      kiln::checkpoint([&](const Tensor& in) { return kiln::sin(in * w) * w; });
  const auto grads = [&](bool use_checkpoint) {
    kiln::GradientTape tape;
    tape.watch(w);
    tape.watch(x);
    const Tensor y = use_checkpoint ? checked(x) : kiln::sin(x * w) * w;
    return tape.gradient(kiln::sum(y * y), V{w, x});
  };
  const V plain = grads(false), got = grads(true);
  CHECK(max_diff(got[0], plain[0]) < 1e-12);
  CHECK(max_diff(got[1], plain[1]) < 1e-12);
  CHECK(kiln::max(kiln::abs(got[0])).item<double>() > 1e-3);
}

TEST_CASE("layers inside a checkpoint: Dense and LSTM, created on the first call",
          "[recompute][layers]") {
  for (bool traced : {false, true}) {
    INFO("traced: " << traced);
    kiln::nn::Dense dense(6, kiln::nn::Activation::tanh);
    kiln::nn::LSTM lstm(5, {.return_sequences = true});
    const kiln::Checkpointed checked =
        kiln::checkpoint([&](const Tensor& x) { return lstm(dense(x)); });
    const auto step = [&](const Tensor& x, bool use_checkpoint) {
      kiln::GradientTape tape;
      const Tensor y = use_checkpoint ? checked(x) : lstm(dense(x));
      const Tensor loss = kiln::sum(kiln::square(y));
      std::vector<kiln::Variable> vars = dense.trainable_variables();
      for (const auto& v : lstm.trainable_variables()) vars.push_back(v);
      V g = tape.gradient(loss, vars);
      g.push_back(loss);
      return g;
    };
    const Tensor x = input({3, 4, 2}, -1, 1, 41, kiln::f32);
    V with;
    if (traced) {
      auto f = kiln::function([&](const Tensor& in) { return step(in, true); });
      with = f(x);
    } else {
      with = step(x, true);
    }
    REQUIRE(dense.trainable_variables().size() == 2);
    REQUIRE(lstm.trainable_variables().size() == 3);
    const V plain = step(x, false);
    REQUIRE(with.size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
      INFO("gradient " << i);
      CHECK(max_diff(with[i], plain[i]) < 1e-5);
    }
  }
}

TEST_CASE("checkpoint_every with a dynamic trip count gives the plain scan's gradient",
          "[recompute]") {
  kiln::Variable u(input({3, 3}, -0.5, 0.5, 51), "u");
  const auto run = [&](const Tensor& xs, std::int64_t k) {
    kiln::GradientTape tape({.persistent = true});
    tape.watch(xs);
    auto [h, ys] = kiln::scan(
        [&](const V& c, const V& x) {
          const Tensor n = kiln::tanh(kiln::matmul(c[0], u.value()) + x[0]);
          return std::pair<V, V>{{n}, {n * 2.0}};
        },
        {kiln::zeros({2, 3}, kiln::f64)}, {xs}, {.checkpoint_every = k});
    const Tensor loss = kiln::sum(ys[0] * ys[0]) + kiln::sum(h[0]);
    return V{loss, tape.gradient(loss, std::vector<kiln::Variable>{u})[0], tape.gradient(loss, xs)};
  };
  const auto run_k = [&](std::int64_t k) {
    return kiln::function([&, k](const Tensor& xs) { return run(xs, k); },
                          {.input_signature = {kiln::TensorSpec({-1, 2, 3}, kiln::f64)}});
  };
  auto segmented = run_k(3);
  for (std::int64_t t : {2, 7, 9}) {
    INFO("T = " << t);
    const Tensor xs = input({t, 2, 3}, -1, 1, 52 + static_cast<std::uint64_t>(t));
    const V plain = run(xs, 1), got = segmented(xs);
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(max_diff(got[i], plain[i]) < 1e-12);
  }
  CHECK(segmented.tracing_count() == 1);
}

namespace {

/// Peak bytes of a traced train step of a tanh RNN (state [64, 64], T steps) with the given
/// checkpoint_every, past the inputs' own bytes.
std::int64_t train_step_peak(std::int64_t steps, std::int64_t k) {
  kiln::Variable w(input({64, 64}, -0.1, 0.1, 61, kiln::f32), "w");
  const Tensor xs = input({steps, 64, 64}, -1, 1, 62, kiln::f32);
  auto step = kiln::function([&](const Tensor& x) {
    kiln::GradientTape tape;
    auto [h, ys] = kiln::scan(
        [&](const V& c, const V& xt) {
          const Tensor z = kiln::matmul(c[0], w.value()) + xt[0];
          return std::pair<V, V>{{kiln::tanh(z) * kiln::sigmoid(z)}, {}};
        },
        {kiln::zeros({64, 64})}, {x}, {.checkpoint_every = k});
    return tape.gradient(kiln::sum(h[0]), std::vector<kiln::Variable>{w})[0];
  });
  (void)step(xs);  // trace and plan
  kiln::reset_peak_bytes();
  const std::int64_t before = kiln::memory_stats().live_bytes;
  const Tensor g = step(xs);
  return kiln::memory_stats().peak_bytes - before;
}

}  // namespace

TEST_CASE("checkpoint_every lowers the peak memory of a traced train step", "[recompute][memory]") {
  const std::int64_t plain = train_step_peak(256, 1), segmented = train_step_peak(256, 16);
  INFO("peak bytes: plain " << plain << ", checkpoint_every 16: " << segmented);
  // Plain: 256 saved carries of 16 KiB (4 MiB); segmented: 16 segment carries plus 16 carries
  // of one segment, and the per-step temporaries.
  CHECK(plain > 256 * 16384);
  CHECK(segmented * 3 < plain);
  // Linear in T: twice the steps, about twice the plain peak.
  const std::int64_t longer = train_step_peak(512, 1);
  CHECK(longer > plain * 17 / 10);
}

TEST_CASE("an eager checkpoint keeps its inputs on the tape, not its intermediates",
          "[recompute][memory]") {
  const Tensor x = input({256, 256}, -1, 1, 71, kiln::f32);  // 256 KiB
  const auto chain = [](const Tensor& in) {
    Tensor h = in;
    for (int i = 0; i < 8; ++i) h = kiln::tanh(h) + in;
    return h;
  };
  const kiln::Checkpointed checked = kiln::checkpoint(chain);
  const auto kept = [&](bool use_checkpoint) {
    kiln::GradientTape tape;
    tape.watch(x);
    const std::int64_t before = kiln::memory_stats().live_bytes;
    const Tensor y = use_checkpoint ? checked(x) : chain(x);
    const std::int64_t held = kiln::memory_stats().live_bytes - before;
    const Tensor g = tape.gradient(kiln::sum(y), x);
    return std::pair{held, g};
  };
  (void)kept(true);  // trace and compile
  const auto [plain_bytes, plain_grad] = kept(false);
  const auto [checked_bytes, checked_grad] = kept(true);
  INFO("bytes held after the forward: plain " << plain_bytes << ", checkpoint " << checked_bytes);
  CHECK(plain_bytes >= 8 * 256 * 1024);
  CHECK(checked_bytes <= 2 * 256 * 1024);
  CHECK(max_diff(checked_grad, plain_grad) < 1e-5);
}

TEST_CASE("checkpoint and checkpoint_every errors name the op and the argument", "[recompute]") {
  const Tensor xs = kiln::ones({4, 2});
  const auto body = [](const Tensor& c, const Tensor& x) { return std::pair{c + x, c}; };
  for (std::int64_t k : {0, -3}) {
    CHECK_THROWS_WITH(
        kiln::scan(body, kiln::zeros({2}), xs, {.checkpoint_every = k}),
        "[scan] options.checkpoint_every must be at least 1, got " + std::to_string(k));
  }
  CHECK_THROWS_WITH(kiln::scan(body, kiln::zeros({2}), xs, {.unroll = true, .checkpoint_every = 2}),
                    Catch::Contains("[scan] options.checkpoint_every = 2 needs the loop form"));
  CHECK_THROWS_WITH(kiln::checkpoint(std::function<V(const V&)>()), "[checkpoint] f is empty");
  CHECK_THROWS_WITH(kiln::checkpoint(std::function<Tensor(const Tensor&)>()),
                    "[checkpoint] f is empty");
  const kiln::Checkpointed nothing = kiln::checkpoint([](const V&) { return V{}; });
  CHECK_THROWS_WITH(nothing(V{xs}), "[checkpoint] f returned no tensors");
  const kiln::Checkpointed undefined = kiln::checkpoint([](const V&) { return V{Tensor()}; });
  CHECK_THROWS_WITH(undefined(V{xs}), "[checkpoint] f returned an undefined tensor as result 0");
  const kiln::Checkpointed two = kiln::checkpoint([](const V& a) { return V{a[0], a[0]}; });
  CHECK_THROWS_WITH(two(xs), Catch::Contains("[checkpoint] f returned 2 tensors"));
  CHECK_THROWS_WITH(two(V{xs, Tensor()}), "[checkpoint] argument 1 is an undefined tensor");
  kiln::Variable v(kiln::zeros({2}), "counter");
  const kiln::Checkpointed assigning = kiln::checkpoint([&](const Tensor& x) {
    v.assign(v.value() + 1.0f);
    return x * 2.0f;
  });
  kiln::GradientTape tape;
  tape.watch(xs);
  CHECK_THROWS_WITH(assigning(xs), Catch::Contains("[checkpoint] f assigns variable 'counter'"));
  CHECK(kiln::sum(v.value()).item<float>() == 0.0f);
}

TEST_CASE("recurrent layers with checkpoint_every match the plain layers", "[recompute][layers]") {
  struct Case {
    std::int64_t steps, k;
    bool backwards, masked;
  };
  for (const Case c : {Case{7, 3, false, false}, Case{8, 4, true, false}, Case{9, 2, false, true},
                       Case{5, 2, true, true}, Case{3, 4, false, false}}) {
    for (bool traced : {false, true}) {
      INFO("T " << c.steps << ", k " << c.k << ", go_backwards " << c.backwards << ", masked "
                << c.masked << ", traced " << traced);
      const Tensor x = input({2, c.steps, 3}, -1, 1, 81, kiln::f32);
      const Tensor lengths =
          kiln::tensor(std::vector<std::int32_t>{static_cast<std::int32_t>(c.steps), 2}, {2});
      const auto run = [&](kiln::nn::Layer& layer, const auto& call) {
        const auto step = [&](const Tensor& in) {
          kiln::GradientTape tape;
          const Tensor y = call(in);
          const Tensor loss = kiln::sum(kiln::square(y));
          V g = tape.gradient(loss, layer.trainable_variables());
          g.push_back(y);
          return g;
        };
        if (!traced) return step(x);
        auto f = kiln::function(step);
        return f(x);
      };
      kiln::nn::LSTM plain(4, {.return_sequences = true, .go_backwards = c.backwards});
      kiln::nn::LSTM remat(
          4, {.return_sequences = true, .go_backwards = c.backwards, .checkpoint_every = c.k});
      kiln::nn::GRU gru_plain(3, {.go_backwards = c.backwards});
      kiln::nn::GRU gru_remat(3, {.go_backwards = c.backwards, .checkpoint_every = c.k});
      const auto call = [&](kiln::nn::Layer& layer) {
        return [&](const Tensor& in) {
          if (!c.masked) return layer(in);
          if (auto* l = dynamic_cast<kiln::nn::LSTM*>(&layer))
            return l->call(in, {.sequence_lengths = lengths})[0];
          return dynamic_cast<kiln::nn::GRU&>(layer).call(in, {.sequence_lengths = lengths})[0];
        };
      };
      for (kiln::nn::Layer* l :
           std::vector<kiln::nn::Layer*>{&plain, &remat, &gru_plain, &gru_remat})
        (void)(*l)(x);  // build
      remat.set_weights(plain.get_weights());
      gru_remat.set_weights(gru_plain.get_weights());
      const V want = run(plain, call(plain));
      const V got = run(remat, call(remat));
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        INFO("result " << i);
        CHECK(max_diff(got[i], want[i]) < 1e-5);
      }
      const V gru_want = run(gru_plain, call(gru_plain));
      const V gru_got = run(gru_remat, call(gru_remat));
      for (std::size_t i = 0; i < gru_want.size(); ++i)
        CHECK(max_diff(gru_got[i], gru_want[i]) < 1e-5);
    }
  }
  kiln::nn::LSTM zero(4, {.checkpoint_every = 0});
  CHECK_THROWS_WITH(zero(kiln::ones({1, 3, 2})),
                    Catch::Contains("checkpoint_every must be at least 1, got 0"));
  kiln::nn::SimpleRNN unrolled(4, {.unroll = true, .checkpoint_every = 2});
  CHECK_THROWS_WITH(unrolled(kiln::ones({1, 3, 2})),
                    Catch::Contains("cannot be used with unroll = true"));
}

TEST_CASE("LSTM checkpoint_every lowers the peak memory of a traced train step",
          "[recompute][memory][layers]") {
  const Tensor x = input({16, 240, 32}, -1, 1, 91, kiln::f32);
  const auto peak = [&](std::int64_t k) {
    kiln::nn::LSTM lstm(64, {.checkpoint_every = k});
    auto step = kiln::function([&](const Tensor& in) {
      kiln::GradientTape tape;
      const Tensor loss = kiln::mean(kiln::square(lstm(in)));
      return tape.gradient(loss, lstm.trainable_variables());
    });
    (void)step(x);
    kiln::reset_peak_bytes();
    const std::int64_t before = kiln::memory_stats().live_bytes;
    const V g = step(x);
    return kiln::memory_stats().peak_bytes - before;
  };
  const std::int64_t plain = peak(1), segmented = peak(16);
  INFO("peak bytes: plain " << plain << ", checkpoint_every 16: " << segmented);
  CHECK(segmented * 3 < plain);
}

TEST_CASE("an eager scan with checkpoint_every keeps segment carries on the tape",
          "[recompute][memory]") {
  const Tensor h0 = input({128, 128}, -1, 1, 101, kiln::f32);  // 64 KiB
  const Tensor xs = input({64, 1, 128}, -1, 1, 102, kiln::f32);
  const auto body = [](const Tensor& c, const Tensor& x) {
    Tensor h = c;
    for (int i = 0; i < 4; ++i) h = kiln::tanh(h * 0.9f + x);
    return std::pair{h, kiln::sum(h, {0})};
  };
  const auto kept = [&](std::int64_t k) {
    kiln::GradientTape tape;
    tape.watch(h0);
    const std::int64_t before = kiln::memory_stats().live_bytes;
    auto [h, ys] = kiln::scan(body, h0, xs, {.checkpoint_every = k});
    const std::int64_t held = kiln::memory_stats().live_bytes - before;
    return std::pair{held, tape.gradient(kiln::sum(h) + kiln::sum(ys), h0)};
  };
  const auto [plain_bytes, plain_grad] = kept(1);
  const auto [checked_bytes, checked_grad] = kept(8);
  INFO("bytes held after the forward: plain " << plain_bytes << ", checkpoint_every 8 "
                                              << checked_bytes);
  CHECK(plain_bytes >= 64 * 4 * 65536);  // every op of every step
  CHECK(checked_bytes * 8 < plain_bytes);
  CHECK(max_diff(checked_grad, plain_grad) < 1e-4);
}

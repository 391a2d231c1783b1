// How compiled optimizer updates run: SGD folded into its gradient's GEMM (in place, or on a
// copy when the old value is held), elementwise updates written over the variables' values,
// one loop per variable's update steps (jit/plan_groups.cpp), eager apply() compiling its update,
// failures that change nothing, and concurrent calls that never tear a value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include <kiln/kiln.hpp>

#include "kernels/streaming.hpp"
#include "optimizer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
using kiln::test::check_values;
using kiln::test::values_of;
namespace optim = kiln::optim;

namespace {

/// A traced SGD step on one weight w [features, units]: loss sum((x w) * dy), so w's gradient
/// is x^T dy, one GEMM, into which the compiled plan folds the update (fold_sgd_updates).
struct FoldedStep {
  Variable w;
  optim::SGD opt;
  using Step = std::function<Tensor(const Tensor&, const Tensor&)>;
  kiln::Function<Step> step;
  FoldedStep(const Tensor& initial, double rate)
      : w(initial, "w"),
        opt({.learning_rate = rate}),
        step(kiln::function(Step([this](const Tensor& x, const Tensor& dy) {
          std::vector<Tensor> grads;
          Tensor loss;
          {
            kiln::GradientTape tape;
            loss = kiln::sum(kiln::matmul(x, w.value()) * dy);
            grads = tape.gradient(loss, {w});
          }
          opt.apply(grads, {w});
          return loss;
        }))) {}
};

/// w - rate * x^T dy in f64.
std::vector<double> sgd_reference(const std::vector<double>& w, const Tensor& x, const Tensor& dy,
                                  double rate) {
  const auto xs = kiln::cast(x, kiln::f64).to_vector<double>();
  const auto ds = kiln::cast(dy, kiln::f64).to_vector<double>();
  const std::int64_t rows = x.shape()[0], features = x.shape()[1], units = dy.shape()[1];
  std::vector<double> out = w;
  for (std::int64_t i = 0; i < features; ++i)
    for (std::int64_t j = 0; j < units; ++j) {
      double g = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        g += xs[static_cast<std::size_t>(r * features + i)] *
             ds[static_cast<std::size_t>(r * units + j)];
      out[static_cast<std::size_t>(i * units + j)] -= rate * g;
    }
  return out;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double most = 0;
  for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

}  // namespace

TEST_CASE("SGD updates folded into the weight gradient's GEMM", "[nn][optim][function]") {
  kiln::clear_session();
  // [512, 512]: 2^18 elements, folded whichever backend plans the product.
  for (const kiln::DType dtype : {kiln::f32, kiln::f64}) {
    CAPTURE(kiln::dtype_name(dtype));
    const double tol = dtype == kiln::f32 ? 1e-5 : 1e-12;
    const Tensor x = kiln::cast(kiln::random::normal({16, 512}, 0, 1, 1), dtype);
    const Tensor dy = kiln::cast(kiln::random::normal({16, 512}, 0, 1, 2), dtype);
    FoldedStep t(kiln::cast(kiln::random::normal({512, 512}, 0, 1, 3), dtype), 0.1);
    std::vector<double> expected = values_of(t.w);

    SECTION("in place while only the variable holds its value") {
      for (int call = 0; call < 3; ++call) {
        const void* before = t.w.value().data();
        t.step(x, dy);
        expected = sgd_reference(expected, x, dy, 0.1);
        CHECK(max_difference(values_of(t.w), expected) < tol);
        if (call > 0) CHECK(t.w.value().data() == before);  // the first call built the plan
      }
    }
    SECTION("a value someone holds is left as it was") {
      t.step(x, dy);
      expected = sgd_reference(expected, x, dy, 0.1);
      const Tensor held = t.w.value();
      const std::vector<double> held_values = kiln::cast(held, kiln::f64).to_vector<double>();
      t.step(x, dy);
      expected = sgd_reference(expected, x, dy, 0.1);
      CHECK(kiln::cast(held, kiln::f64).to_vector<double>() == held_values);
      CHECK(t.w.value().data() != held.data());
      CHECK(max_difference(values_of(t.w), expected) < tol);
    }
    SECTION("the learning rate is read at each call") {
      t.step(x, dy);
      t.opt.set_learning_rate(0.5);
      t.step(x, dy);
      expected = sgd_reference(sgd_reference(expected, x, dy, 0.1), x, dy, 0.5);
      CHECK(max_difference(values_of(t.w), expected) < tol);
      CHECK(t.step.tracing_count() == 1);
    }
  }
  SECTION("a function that also returns the value it read gets the old value") {
    const Tensor x = kiln::random::normal({16, 512}, 0, 1, 4);
    const Tensor dy = kiln::random::normal({16, 512}, 0, 1, 5);
    Variable w(kiln::random::normal({512, 512}, 0, 1, 6), "w_returned");
    optim::SGD opt({.learning_rate = 0.1});
    auto step = kiln::function([&](const Tensor& xx, const Tensor& dd) {
      Tensor before;
      std::vector<Tensor> grads;
      {
        kiln::GradientTape tape;
        before = w.value();
        const Tensor loss = kiln::sum(kiln::matmul(xx, before) * dd);
        grads = tape.gradient(loss, {w});
      }
      opt.apply(grads, {w});
      return before;
    });
    for (int call = 0; call < 2; ++call) {
      const std::vector<double> old = values_of(w);
      const Tensor returned = step(x, dy);
      CHECK(kiln::cast(returned, kiln::f64).to_vector<double>() == old);
      CHECK(max_difference(values_of(w), sgd_reference(old, x, dy, 0.1)) < 1e-5);
    }
  }
}

namespace {

/// Whether every element of v is the same.
bool uniform(const Tensor& v) {
  const auto values = v.to_vector<float>();
  return std::all_of(values.begin(), values.end(), [&](float e) { return e == values[0]; });
}

/// Runs `call` `calls` times on each of two threads while a third reads the tensors `read`
/// returns; whether a reading ever found one of them not uniform (an update seen half done).
bool tears_values(const std::function<void()>& call,
                  const std::function<std::vector<Tensor>()>& read, int calls) {
  std::atomic<bool> torn{false};
  std::atomic<int> running{2};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&] {
      for (int c = 0; c < calls; ++c) call();
      --running;
    });
  threads.emplace_back([&] {
    while (running > 0)
      for (const Tensor& v : read())
        if (!uniform(v)) torn = true;
  });
  for (auto& th : threads) th.join();
  return torn;
}

}  // namespace

TEST_CASE("folded SGD updates from several threads never tear a variable's value",
          "[nn][optim][function][threads]") {
  kiln::clear_session();
  // x all ones and dy all 1/16 over 16 rows: every gradient element is exactly 1, so after k
  // updates at rate 1/4 every element of w is exactly -k/4, whichever calls overlap.
  const Tensor x = kiln::ones({16, 512});
  const Tensor dy = kiln::full({16, 512}, 1.0 / 16);
  FoldedStep t(kiln::zeros({512, 512}), 0.25);
  t.step(x, dy);
  constexpr int calls = 20;
  CHECK_FALSE(
      tears_values([&] { t.step(x, dy); }, [&] { return std::vector{t.w.value()}; }, calls));
  const auto final_values = t.w.value().to_vector<float>();
  REQUIRE(uniform(t.w.value()));
  const double k = -final_values[0] * 4;
  CHECK(k == std::round(k));
  CHECK(k >= 2);
  CHECK(k <= 1 + 2 * calls);
}

namespace {

/// One optimizer of each kind whose dense update is elementwise, as a factory (each call a fresh
/// optimizer, so traced and eager runs keep slots of their own).
struct OptimizerCase {
  const char* name;
  std::function<std::unique_ptr<optim::Optimizer>()> make;
  int intermediates = 0;  // values of the variable's size the update computes besides its results
};
std::vector<OptimizerCase> elementwise_optimizers() {
  return {
      {"sgd", [] { return std::make_unique<optim::SGD>(optim::SGDOptions{.learning_rate = 0.1}); }},
      {"momentum",
       [] {
         return std::make_unique<optim::SGD>(
             optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
       }},
      {"nesterov",
       [] {
         return std::make_unique<optim::SGD>(
             optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
       },
       1},  // rate * g, read by both updates
      {"adam",
       [] { return std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01}); }},
      {"rmsprop",
       [] {
         return std::make_unique<optim::RMSprop>(
             optim::RMSpropOptions{.learning_rate = 0.01, .momentum = 0.5});
       }},
      {"adagrad",
       [] {
         return std::make_unique<optim::Adagrad>(optim::AdagradOptions{.learning_rate = 0.1});
       }},
  };
}

/// The buffers of a variable and of its slots.
std::vector<const void*> buffers_of(const optim::Optimizer& opt, const Variable& w) {
  std::vector<const void*> out{w.value().data()};
  for (const std::string& slot : opt.slot_names()) out.push_back(opt.slot(w, slot).value().data());
  return out;
}

}  // namespace

/// Runs f with every kiln::function, and so every optimizer update, op by op.
template <class F>
void op_by_op(F&& f) {
  const bool was = kiln::functions_run_eagerly();
  kiln::run_functions_eagerly(true);
  struct Restore {
    bool was;
    ~Restore() { kiln::run_functions_eagerly(was); }
  } restore{was};
  f();
}

TEST_CASE("compiled optimizer updates write over the variables' values", "[nn][optim][function]") {
  // Traced inside a train step, and eagerly (where apply() compiles its update itself), each
  // against the update run op by op.
  // 34,390 elements: two chunks and a part of one for a group of fused steps (plan_groups.cpp),
  // which runs where the buffers are larger than the last-level cache (or than 4 KiB).
  constexpr std::int64_t value_bytes = 181 * 190 * 4;
  struct RestoreCacheBound {
    ~RestoreCacheBound() { kiln::detail::set_stream_output_bytes(0); }
  } restore_cache_bound;
  for (const OptimizerCase& c : elementwise_optimizers()) {
    for (const auto& [held_by_caller, cache_bytes] :
         {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 4096}, std::pair{true, 4096}}) {
      CAPTURE(c.name, held_by_caller, cache_bytes);
      kiln::detail::set_stream_output_bytes(cache_bytes);
      kiln::clear_session();
      const Tensor initial = kiln::random::normal({181, 190}, 0, 1, 1);
      Variable traced_w(initial, "traced_w"), eager_w(initial, "eager_w"), op_w(initial, "op_w");
      const auto traced_opt = c.make(), eager_opt = c.make(), op_opt = c.make();
      auto step = kiln::function([&](const Tensor& g) { traced_opt->apply({g}, {traced_w}); });
      const auto eager_step = [&](const Tensor& g) { eager_opt->apply({g}, {eager_w}); };
      std::vector<const void*> before[2];
      for (int call = 0; call < 4; ++call) {
        const Tensor g = kiln::random::normal({181, 190}, 0, 1, 10 + call);
        op_by_op([&] { op_opt->apply({g}, {op_w}); });
        int form = 0;
        for (const auto& [w, opt] :
             {std::pair{&traced_w, traced_opt.get()}, std::pair{&eager_w, eager_opt.get()}}) {
          CAPTURE(form);
          // A value the caller holds is left as it was, and the update goes to a new buffer.
          const Tensor held = held_by_caller ? w->value() : Tensor();
          const std::vector<float> held_values =
              held_by_caller ? held.to_vector<float>() : std::vector<float>{};
          const std::int64_t live = kiln::memory_stats().live_bytes;
          kiln::reset_peak_bytes();
          if (form == 0)
            step(g);
          else
            eager_step(g);
          const std::int64_t grown = kiln::memory_stats().peak_bytes - live;
          CHECK(kiln::max(kiln::abs(w->value() - op_w.value())).item<float>() <= 1e-6f);
          if (held_by_caller) {
            CHECK(held.to_vector<float>() == held_values);
            CHECK(w->value().data() != held.data());
          } else if (call > 0) {
            // After the first call (which traces and creates the slots) no variable or slot
            // gets a new buffer.
            CHECK(grown < value_bytes * (1 + c.intermediates));
            CHECK(buffers_of(*opt, *w) == before[form]);
          }
          before[form] = buffers_of(*opt, *w);
          ++form;
        }
      }
    }
  }
}

TEST_CASE("optimizer updates of several variables of every size agree with op by op",
          "[nn][optim][function]") {
  // Where loops are generated, each variable's update steps run as one loop with several
  // outputs (jit/plan_groups.cpp): sizes below a vector, with a tail, and a scalar.
  const std::vector<Shape> shapes = {{1}, {7}, {3, 7}, {33}, {5, 17}, {}};
  for (const OptimizerCase& c : elementwise_optimizers()) {
    CAPTURE(c.name);
    kiln::clear_session();
    std::vector<Variable> traced, op;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Tensor initial = kiln::random::normal(shapes[i], 0, 1, 1 + i);
      traced.emplace_back(initial, "traced" + std::to_string(i));
      op.emplace_back(initial, "op" + std::to_string(i));
    }
    const auto traced_opt = c.make(), op_opt = c.make();
    auto step = kiln::function([&](const std::vector<Tensor>& g) { traced_opt->apply(g, traced); });
    for (int call = 0; call < 3; ++call) {
      std::vector<Tensor> grads;
      for (std::size_t i = 0; i < shapes.size(); ++i)
        grads.push_back(kiln::random::normal(shapes[i], 0, 1, 100 * (call + 1) + i));
      const Tensor held = traced[2].value();  // a value held by the caller stays as it was
      const std::vector<float> held_values = held.to_vector<float>();
      step(grads);
      op_by_op([&] { op_opt->apply(grads, op); });
      CHECK(held.to_vector<float>() == held_values);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        CAPTURE(i, call);
        CHECK(kiln::max(kiln::abs(traced[i].value() - op[i].value())).item<float>() <= 1e-6f);
      }
    }
  }
}

namespace {
/// SGD whose step halves when a gradient holds a value above 1: it reads a value, so it cannot
/// be traced.
class ReadingSGD : public optim::Optimizer {
 public:
  ReadingSGD() : Optimizer("test.ReadingSGD", "reading_sgd", "", 1.0, {}, {}, {}) {}

 protected:
  void update(const Variable& var, const Tensor& grad, std::span<const Variable>,
              const Tensor& learning_rate, const Tensor&) override {
    const double scale = kiln::max(grad).item<float>() > 1 ? 0.5 : 1.0;
    var.assign_sub(grad * learning_rate * scale);
  }
};
}  // namespace

TEST_CASE("eager apply() compiles once per list of variables and holds none of them",
          "[nn][optim][function]") {
  kiln::clear_session();
  // Clipping, a schedule, two dtypes and a variable without a gradient: the same as op by op.
  const auto make = [] {
    return optim::Adam({.learning_rate = optim::schedules::exponential_decay(0.1, 2, 0.5),
                        .clipnorm = 1.0,
                        .global_clipnorm = 1.5});
  };
  std::vector<std::string> warnings;
  kiln::set_log_sink([&](const std::string& m) { warnings.push_back(m); });
  struct RestoreSink {
    ~RestoreSink() { kiln::set_log_sink(nullptr); }
  } restore_sink;
  optim::Adam compiled = make(), reference = make();
  const Tensor a0 = kiln::random::normal({5, 3}, 0, 1, 1), b0 = kiln::random::normal({4}, 0, 1, 2);
  Variable a(a0, "a"), b(kiln::cast(b0, kiln::f64), "b"), c(kiln::zeros({2}), "c");
  Variable ra(a0, "a"), rb(kiln::cast(b0, kiln::f64), "b"), rc(kiln::zeros({2}), "c");
  for (int call = 0; call < 3; ++call) {
    const Tensor ga = kiln::random::normal({5, 3}, 0, 2, 10 + call);
    const Tensor gb = kiln::cast(kiln::random::normal({4}, 0, 2, 20 + call), kiln::f64);
    compiled.apply({ga, gb, Tensor()}, {a, b, c});
    op_by_op([&] { reference.apply({ga, gb, Tensor()}, {ra, rb, rc}); });
    check_values(a, values_of(ra));
    check_values(b, values_of(rb), 1e-12);
    check_values(c, {0.0, 0.0});
    CHECK(compiled.iterations().value().item<std::int64_t>() == call + 1);
  }

  // A model rebuilt in a loop: its compiled update does not keep it alive.
  std::weak_ptr<kiln::detail::VariableImpl> last;
  for (int round = 0; round < 3; ++round) {
    Variable w(kiln::ones({256}), "model/w");
    compiled.apply({kiln::ones({256})}, {w});
    compiled.apply({kiln::ones({256})}, {w});
    CHECK(last.expired());
    last = w.impl();
  }
  CHECK(last.expired());

  // An update that reads values cannot be traced: it runs op by op, eagerly as before.
  CHECK(warnings.empty());  // Adam's update compiled
  ReadingSGD reading;
  Variable w(kiln::zeros({2}), "w");
  reading.apply({kiln::tensor({4.f, 2.f})}, {w});
  check_values(w, {-2.0, -1.0});
  reading.apply({kiln::tensor({0.5f, 1.f})}, {w});
  check_values(w, {-2.5, -2.0});
  REQUIRE(warnings.size() == 1);  // once for this list of variables
  CHECK_THAT(warnings[0], Catch::StartsWith("test.ReadingSGD: reading_sgd's update cannot be "
                                            "traced, so apply() runs it op by op"));
  // Under a recording tape the update runs op by op (the tape sees it), and a later apply()
  // of the same list still compiles.
  optim::SGD sgd({.learning_rate = 0.5});
  Variable u(kiln::ones({3}), "u");
  {
    kiln::GradientTape tape;
    sgd.apply({kiln::ones({3})}, {u});
  }
  sgd.apply({kiln::ones({3})}, {u});
  check_values(u, {0.0, 0.0, 0.0});
  CHECK(warnings.size() == 1);
  auto traced = kiln::function([&](const Tensor& g) { reading.apply({g}, {w}); });
  CHECK_THROWS_WITH(traced(kiln::ones({2})),
                    Catch::Contains("cannot read the value of a symbolic"));
}

TEST_CASE("in-place optimizer updates keep a call's values and its failures whole",
          "[nn][optim][function]") {
  kiln::clear_session();
  SECTION("steps after the update read the old value") {
    Variable w(kiln::random::normal({32, 16}, 0, 1, 1), "w_old_read");
    optim::Adam opt({.learning_rate = 0.1});
    auto step = kiln::function([&](const Tensor& g) {
      const Tensor before = w.value();
      opt.apply({g}, {w});
      return before * 2.0f + 1.0f;  // computed from the value read before the update
    });
    for (int call = 0; call < 3; ++call) {
      const std::vector<float> old = w.value().to_vector<float>();
      const std::vector<float> got = step(kiln::ones({32, 16})).to_vector<float>();
      for (std::size_t i = 0; i < old.size(); ++i) REQUIRE(got[i] == old[i] * 2.0f + 1.0f);
      CHECK(w.value().to_vector<float>() != old);
    }
  }
  SECTION("a step that reads the new value sees it, elementwise or not") {
    Variable w(kiln::random::normal({32, 16}, 0, 1, 3), "w_new_read");
    optim::SGD opt({.learning_rate = 0.5, .momentum = 0.9});
    auto step = kiln::function([&](const Tensor& g) {
      opt.apply({g}, {w});
      const Tensor after = w.value();  // the assigned value
      return std::vector<Tensor>{kiln::sum(after), after * 2.0f};
    });
    for (int call = 0; call < 3; ++call) {
      const std::vector<Tensor> got = step(kiln::full({32, 16}, 0.25 * (call + 1)));
      const Tensor now = w.value();
      CHECK(got[0].item<float>() == Approx(kiln::sum(now).item<float>()).epsilon(1e-5));
      CHECK((got[1].to_vector<float>() == (now * 2.0f).to_vector<float>()));
    }
  }
  SECTION("a long chain of diamonds after an update plans at once") {
    // y and z are each read twice, so neither fuses into the next step: every round is three
    // moved steps, and the update reaches the last one along 2^48 paths.
    Variable w(kiln::full({8, 8}, 0.5), "w_chain"), out(kiln::zeros({8, 8}), "w_chain_out");
    optim::SGD opt({.learning_rate = 0.125});
    const auto rounds = [](auto x) {
      for (int i = 0; i < 48; ++i) {
        const auto y = x * 0.5f, z = x + 0.25f;
        x = y * z + y - z;
      }
      return x;
    };
    auto step = kiln::function([&](const Tensor& g) {
      opt.apply({g}, {w});
      out.assign(rounds(w.value()));
    });
    step(kiln::ones({8, 8}));
    CHECK(w.value().to_vector<float>()[0] == 0.375f);
    CHECK(out.value().to_vector<float>()[0] == Approx(rounds(0.375f)).margin(1e-5));
  }
  SECTION("a call that fails changes no variable and no slot") {
    Variable w(kiln::random::normal({32, 16}, 0, 1, 2), "w_failing");
    optim::Adam opt({.learning_rate = 0.1});
    // The update is traced before the lookup, whose indices are checked when it runs.
    auto step = kiln::function([&](const Tensor& g, const Tensor& rows) {
      opt.apply({g}, {w});
      return kiln::gather(g, rows);
    });
    const Tensor g = kiln::ones({32, 16});
    step(g, kiln::tensor(std::vector<std::int64_t>{0, 1}, {2}));
    const std::vector<float> w_before = w.value().to_vector<float>();
    const std::vector<float> m_before = opt.slot(w, "m").value().to_vector<float>();
    const std::vector<float> v_before = opt.slot(w, "v").value().to_vector<float>();
    const std::int64_t iterations = opt.iterations().value().item<std::int64_t>();
    CHECK_THROWS_AS(step(g, kiln::tensor(std::vector<std::int64_t>{0, 40}, {2})), kiln::Error);
    CHECK(w.value().to_vector<float>() == w_before);
    CHECK(opt.slot(w, "m").value().to_vector<float>() == m_before);
    CHECK(opt.slot(w, "v").value().to_vector<float>() == v_before);
    CHECK(opt.iterations().value().item<std::int64_t>() == iterations);
    step(g, kiln::tensor(std::vector<std::int64_t>{2, 3}, {2}));
    CHECK(w.value().to_vector<float>() != w_before);
  }
}

TEST_CASE("in-place momentum updates from several threads never tear a variable's value",
          "[nn][optim][function][threads]") {
  kiln::clear_session();
  // Every element of w and of its momentum starts equal and gets the same gradient, so every
  // element stays equal to the others whichever calls overlap.
  Variable w(kiln::zeros({256, 512}), "w_threads");
  optim::SGD opt({.learning_rate = 0.25, .momentum = 0.5});
  auto step = kiln::function([&](const Tensor& g) { opt.apply({g}, {w}); });
  const Tensor g = kiln::ones({256, 512});
  step(g);
  CHECK_FALSE(tears_values([&] { step(g); },
                           [&] {
                             return std::vector{w.value(), opt.slot(w, "momentum").value()};
                           },
                           20));
  CHECK(uniform(w.value()));
  CHECK(w.value().to_vector<float>()[0] < 0);
}

// Variables, name scopes, the variable store and its reuse rules, collections (weak references).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include <kiln/kiln.hpp>

#include "state/variable_impl.hpp"

using kiln::Reuse;
using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;

namespace {

std::vector<std::string> names_of(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name());
  return out;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && kiln::all(kiln::equal(a, b)).item<bool>();
}

}  // namespace

TEST_CASE("variables hold a value of fixed dtype and shape", "[variables]") {
  kiln::clear_session();
  Variable v(kiln::tensor({1.f, 2.f}), "v");
  CHECK(v.name() == "v");
  CHECK(v.dtype() == kiln::f32);
  CHECK(v.shape() == Shape{2});
  CHECK(v.trainable());
  v.assign_add(kiln::tensor({1.f, 1.f}));
  CHECK(same(v.value(), kiln::tensor({2.f, 3.f})));
  v.assign_sub(kiln::tensor({2.f, 2.f}));
  CHECK(same(v.value(), kiln::tensor({0.f, 1.f})));
  CHECK_THROWS_WITH(v.assign(kiln::tensor({1.0, 2.0})),
                    "[Variable.assign] variable 'v' is f32 [2]; the new value is f64 [2]");
  CHECK_THROWS_WITH(Variable(Tensor(), "u"),
                    "[Variable] variable 'u' needs a defined initial value");
  CHECK_THROWS_WITH(Variable().value(), "[Variable.value] empty Variable handle");
  CHECK(same(v.value(), kiln::tensor({0.f, 1.f})));  // failed assignments changed nothing
}

TEST_CASE("name scopes prefix names and nest; automatic names are unique per scope",
          "[variables]") {
  kiln::clear_session();
  CHECK(kiln::current_name_scope().empty());
  {
    kiln::NameScope outer("model");
    CHECK(outer.path() == "model");
    Variable a(kiln::zeros({1}), "a");
    CHECK(a.name() == "model/a");
    {
      kiln::NameScope inner("block/attention");
      CHECK(kiln::current_name_scope() == "model/block/attention");
      CHECK(Variable(kiln::zeros({1}), "w").name() == "model/block/attention/w");
      CHECK(kiln::scoped_name("b") == "model/block/attention/b");
    }
    CHECK(kiln::current_name_scope() == "model");
    CHECK(Variable(kiln::zeros({1})).name() == "model/Variable");
    CHECK(Variable(kiln::zeros({1})).name() == "model/Variable_1");
    CHECK(kiln::unique_name("dense") == "dense");
    CHECK(kiln::unique_name("dense") == "dense_1");
  }
  CHECK(kiln::current_name_scope().empty());
  CHECK(Variable(kiln::zeros({1})).name() == "Variable");  // counters are per scope
  CHECK(kiln::unique_name("dense") == "dense");
  CHECK(kiln::unique_name("dense") == "dense_1");
  kiln::clear_session();
  CHECK(kiln::unique_name("dense") == "dense");
  CHECK(Variable(kiln::zeros({1})).name() == "Variable");

  CHECK_THROWS_WITH(kiln::NameScope(""),
                    "[NameScope] invalid scope name '': names must not be empty");
  CHECK_THROWS_WITH(kiln::NameScope("a//b"),
                    "[NameScope] invalid scope name 'a//b': path components must not be empty");
  CHECK_THROWS_WITH(kiln::unique_name("a/b"),
                    Catch::StartsWith("[unique_name] invalid base name 'a/b': it must not "
                                      "contain '/'"));
  // Scopes are per thread.
  kiln::NameScope here("main_thread");
  std::string other;
  std::thread([&] { other = kiln::scoped_name("x"); }).join();
  CHECK(other == "x");
  CHECK(kiln::scoped_name("x") == "main_thread/x");
}

TEST_CASE("get_variable: Reuse::No, Yes and Auto", "[variables]") {
  kiln::clear_session();
  Variable w;
  {
    kiln::NameScope s("layer1");
    w = kiln::get_variable("weights", {784, 256}, kiln::init::glorot_uniform(1));
    CHECK(w.name() == "layer1/weights");
    CHECK_THROWS_WITH(
        kiln::get_variable("weights", {784, 256}, kiln::init::zeros()),
        "[get_variable] variable layer1/weights already exists (f32 [784,256]); pass Reuse::Yes "
        "or Reuse::Auto to share it, or choose another name");
    CHECK(kiln::get_variable("weights", {784, 256}, kiln::init::zeros(), Reuse::Yes) == w);
    CHECK(kiln::get_variable("weights", {784, 256}, kiln::init::zeros(), Reuse::Auto) == w);
    CHECK_THROWS_WITH(kiln::get_variable("bias", {256}, kiln::init::zeros(), Reuse::Yes),
                      "[get_variable] variable layer1/bias does not exist; Reuse::Yes only "
                      "returns existing variables (create it first, or use Reuse::Auto)");
    Variable b = kiln::get_variable("bias", {256}, kiln::init::zeros(), Reuse::Auto);
    CHECK(b.name() == "layer1/bias");
    CHECK(kiln::get_variable("bias", {256}, kiln::init::ones(), Reuse::Auto) == b);
    CHECK(kiln::sum(b.value()).item<float>() == 0.f);  // the initializer ran once
    CHECK_THROWS_WITH(
        kiln::get_variable("weights", {784, 128}, kiln::init::zeros(), Reuse::Auto),
        "[get_variable] variable layer1/weights exists as f32 [784,256]; Reuse::Auto requested "
        "f32 [784,128]");
    CHECK_THROWS_WITH(
        kiln::get_variable("weights", {784, 256}, kiln::init::zeros(), Reuse::Yes, kiln::f64),
        "[get_variable] variable layer1/weights exists as f32 [784,256]; Reuse::Yes requested "
        "f64 [784,256]");
    CHECK_THROWS_WITH(kiln::get_variable("", {1}, kiln::init::zeros()),
                      "[get_variable] invalid variable name '': names must not be empty");
  }
  // Outside the scope the same short name is another variable.
  Variable top = kiln::get_variable("weights", {2}, kiln::init::zeros(), Reuse::Auto);
  CHECK(top.name() == "weights");
  CHECK_FALSE(top == w);
  CHECK(kiln::default_variable_store().find("layer1/weights") == w);
  CHECK_FALSE(kiln::default_variable_store().find("layer1/nothing").defined());
  CHECK(names_of(kiln::default_variable_store().variables()) ==
        std::vector<std::string>{"layer1/weights", "layer1/bias", "weights"});

  // A non-trainable variable and a separate store.
  kiln::VariableStore store;
  Variable steps = store.get_variable("steps", {}, kiln::init::zeros(), Reuse::No, kiln::i64,
                                      /*trainable*/ false);
  CHECK_FALSE(steps.trainable());
  CHECK(steps.dtype() == kiln::i64);
  CHECK(store.size() == 1);
  CHECK(kiln::default_variable_store().size() == 3);
}

TEST_CASE("the store keeps its variables until cleared; clear_session resets it", "[variables]") {
  kiln::clear_session();
  const auto baseline = kiln::memory_stats().live_bytes;
  std::weak_ptr<kiln::detail::VariableImpl> weak;
  {
    kiln::NameScope s("tmp");
    weak = kiln::get_variable("big", {1000}, kiln::init::ones()).impl();
  }
  CHECK_FALSE(weak.expired());  // the store holds it
  CHECK(kiln::memory_stats().live_bytes == baseline + 4000);
  CHECK(kiln::global_variables("tmp").size() == 1);
  kiln::clear_session();
  CHECK(weak.expired());
  CHECK(kiln::memory_stats().live_bytes == baseline);
  CHECK(kiln::global_variables("tmp").empty());
  // After the reset the name is free again.
  kiln::NameScope s("tmp");
  CHECK(kiln::get_variable("big", {10}, kiln::init::zeros()).shape() == Shape{10});
}

TEST_CASE("collections hold weak references and match scopes by whole components", "[variables]") {
  kiln::clear_session();
  const auto baseline = kiln::memory_stats().live_bytes;
  const auto before = kiln::global_variables().size();
  {
    auto w1 = std::make_unique<Variable>(kiln::zeros({100}), "layer1/w");
    Variable b1(kiln::zeros({10}), "layer1/b", /*trainable*/ false);
    Variable w10(kiln::zeros({5}), "layer10/w");
    Variable deep(kiln::zeros({5}), "layer1/sub/w");
    CHECK(names_of(kiln::global_variables("layer1")) ==
          std::vector<std::string>{"layer1/w", "layer1/b", "layer1/sub/w"});
    CHECK(names_of(kiln::global_variables("layer1/")) ==
          names_of(kiln::global_variables("layer1")));
    CHECK(names_of(kiln::trainable_variables("layer1")) ==
          std::vector<std::string>{"layer1/w", "layer1/sub/w"});
    CHECK(names_of(kiln::global_variables("layer10")) == std::vector<std::string>{"layer10/w"});
    CHECK(names_of(kiln::global_variables("layer1/sub")) ==
          std::vector<std::string>{"layer1/sub/w"});
    CHECK(kiln::global_variables("layer").empty());
    CHECK(kiln::global_variables().size() == before + 4);

    w1.reset();  // destroyed: it leaves the collections
    CHECK(names_of(kiln::global_variables("layer1")) ==
          std::vector<std::string>{"layer1/b", "layer1/sub/w"});
    b1.set_trainable(true);
    CHECK(names_of(kiln::trainable_variables("layer1")) ==
          std::vector<std::string>{"layer1/b", "layer1/sub/w"});
  }
  CHECK(kiln::global_variables().size() == before);
  CHECK(kiln::memory_stats().live_bytes == baseline);

  // A snapshot keeps its variables alive; the registry itself never does.
  std::weak_ptr<kiln::detail::VariableImpl> weak;
  {
    std::vector<Variable> snapshot;
    {
      Variable v(kiln::zeros({50}), "snap/v");
      weak = v.impl();
      snapshot = kiln::global_variables("snap");
    }
    CHECK_FALSE(weak.expired());
  }
  CHECK(weak.expired());
  CHECK(kiln::memory_stats().live_bytes == baseline);
}

TEST_CASE("collections are safe while other threads create and destroy variables",
          "[variables][threads]") {
  kiln::clear_session();
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; i < 2000; ++i) Variable v(kiln::zeros({4}), "churn/v");
    stop = true;
  });
  std::size_t seen = 0;
  while (!stop)
    for (const auto& v : kiln::global_variables("churn")) seen += v.name() == "churn/v" ? 1 : 0;
  churn.join();
  CHECK(kiln::global_variables("churn").empty());
  (void)seen;
}

TEST_CASE("get_variable inside a function: created in the first trace only", "[variables]") {
  kiln::clear_session();
  auto f = kiln::function([](const Tensor& x) {
    kiln::NameScope s("fn");
    Variable w = kiln::get_variable("w", {3}, kiln::init::ones(), Reuse::Auto);
    return x * w.value();
  });
  Tensor x = kiln::tensor({1.f, 2.f, 3.f});
  CHECK(same(f(x), x));
  CHECK(same(f(x * 2.f), x * 2.f));
  CHECK(kiln::global_variables("fn").size() == 1);
  Variable w = kiln::default_variable_store().find("fn/w");
  w.assign(kiln::full({3}, 2.0));
  CHECK(same(f(x), x * 2.f));  // read by reference, no retrace
  CHECK(f.tracing_count() == 1);
  // A second signature traces again and finds the variable (Reuse::Auto).
  CHECK(same(f(kiln::ones({2, 3})), kiln::full({2, 3}, 2.0)));
  CHECK(f.tracing_count() == 2);
  CHECK(kiln::global_variables("fn").size() == 1);

  // Reuse::No in a retrace is the usual "already exists" error.
  auto g = kiln::function(
      [](const Tensor& x) { return x + kiln::get_variable("g", {}, kiln::init::zeros()).value(); });
  CHECK(same(g(x), x));
  CHECK_THROWS_WITH(g(kiln::ones({2})),
                    Catch::StartsWith("[get_variable] variable g already exists"));

  // Creating a variable that does not exist yet during a retrace is refused up front.
  int calls = 0;
  auto h = kiln::function([&](const Tensor& x) {
    ++calls;
    return x +
           kiln::get_variable(fmt::format("h{}", x.size()), {}, kiln::init::zeros(), Reuse::Auto)
               .value();
  });
  h(kiln::ones({1}));
  CHECK_THROWS_WITH(h(kiln::ones({2})), Catch::Contains("tried to create variable 'h2' while "
                                                        "retracing"));
  CHECK_FALSE(kiln::default_variable_store().find("h2").defined());
}

TEST_CASE("a failed first trace removes its variables from the store", "[variables]") {
  kiln::clear_session();
  const auto baseline = kiln::memory_stats().live_bytes;
  int calls = 0;
  auto f = kiln::function([&](const Tensor& x) {
    Variable v = kiln::get_variable("scratch", {1000}, kiln::init::zeros(), Reuse::Auto);
    if (++calls == 1) throw kiln::Error("[test] fails after creating a variable");
    return x + kiln::sum(v.value());
  });
  CHECK_THROWS_WITH(f(kiln::ones({2})), "[test] fails after creating a variable");
  CHECK_FALSE(kiln::default_variable_store().find("scratch").defined());
  CHECK(kiln::global_variables("scratch").empty());
  CHECK(kiln::memory_stats().live_bytes == baseline);
  CHECK(same(f(kiln::ones({2})), kiln::ones({2})));
  CHECK(kiln::default_variable_store().find("scratch").defined());
  CHECK(f.tracing_count() == 1);
}

TEST_CASE("get_variable defaults: glorot_uniform, and Reuse::Yes without a shape", "[variables]") {
  kiln::clear_session();
  kiln::NameScope scope("defaults");
  const Variable w = kiln::get_variable("w", {64, 32});
  // glorot_uniform: |w| <= sqrt(6 / (fan_in + fan_out)), and not all zero.
  const float limit = std::sqrt(6.0f / 96.0f);
  CHECK(kiln::max(kiln::abs(w.value())).item<float>() <= limit);
  CHECK(kiln::max(kiln::abs(w.value())).item<float>() > limit / 2);
  CHECK(kiln::get_variable("w", Reuse::Yes) == w);
  CHECK_THROWS_WITH(kiln::get_variable("missing", Reuse::Yes),
                    Catch::StartsWith("[get_variable] variable defaults/missing does not exist"));
  CHECK_THROWS_WITH(kiln::get_variable("w", Reuse::Auto),
                    Catch::StartsWith("[get_variable] variable defaults/w: Reuse::Auto needs a "
                                      "shape and an initializer"));
}

TEST_CASE("find_variable finds store and module variables by full name", "[variables]") {
  kiln::clear_session();
  const Variable stored = kiln::get_variable("found/w", {2}, kiln::init::zeros());
  CHECK(kiln::find_variable("found/w") == stored);
  kiln::nn::Dense dense(3, kiln::nn::Activation::none, {.name = "finder"});
  dense(kiln::ones({1, 2}));
  CHECK(kiln::find_variable("finder/kernel") == dense.kernel());
  CHECK_FALSE(kiln::find_variable("finder/nothing").defined());
  {
    kiln::nn::Dense twin(3, kiln::nn::Activation::none, {.name = "finder"});
    twin(kiln::ones({1, 2}));
    CHECK_THROWS_WITH(
        kiln::find_variable("finder/kernel"),
        Catch::StartsWith("[find_variable] 2 live variables are named finder/kernel"));
  }
  CHECK(kiln::find_variable("finder/kernel") == dense.kernel());  // the twin is gone
}

TEST_CASE("named collections: weak, ordered, once per variable, scoped", "[variables]") {
  kiln::clear_session();
  Variable a(kiln::zeros({1}), "enc/a");
  Variable b(kiln::zeros({1}), "dec/b");
  kiln::add_to_collection("model_variables", b);
  kiln::add_to_collection("model_variables", a);
  kiln::add_to_collection("model_variables", b);  // once
  CHECK(kiln::get_collection("model_variables") == std::vector<Variable>{b, a});
  CHECK(kiln::get_collection("model_variables", "enc") == std::vector<Variable>{a});
  CHECK(kiln::get_collection("nothing").empty());
  {
    Variable temporary(kiln::zeros({1}), "enc/t");
    kiln::add_to_collection("model_variables", temporary);
    CHECK(kiln::get_collection("model_variables").size() == 3);
  }
  CHECK(kiln::get_collection("model_variables") == std::vector<Variable>{b, a});  // weak
  CHECK_THROWS_WITH(kiln::add_to_collection("model_variables", Variable()),
                    "[add_to_collection] model_variables: empty Variable handle");
  kiln::clear_session();
  CHECK(kiln::get_collection("model_variables").empty());
}

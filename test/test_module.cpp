// kiln::Module: paths, stable order, lookup, weights, freezing, lifetimes, and variables created
// once under kiln::function (user scenarios 1 and 3 of the variables issue).
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>

#include <kiln/kiln.hpp>

#include "state/variable_impl.hpp"

using kiln::Module;
using kiln::Reuse;
using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && kiln::all(kiln::equal(a, b)).item<bool>();
}

std::vector<std::string> names_of(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name());
  return out;
}

std::vector<std::string> paths_of(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [path, v] : m.named_variables()) out.push_back(path);
  return out;
}

// A dense layer that builds lazily: the kernel's input size comes from the first call.
class TestDense : public Module {
 public:
  explicit TestDense(std::int64_t units, std::string name = kiln::unique_name("test_dense"))
      : Module(std::move(name)), units_(units) {}
  Tensor operator()(const Tensor& x) {
    kernel_ = add_variable("kernel", {x.dim(-1), units_}, kiln::init::glorot_uniform());
    bias_ = add_variable("bias", {units_}, kiln::init::zeros());
    return kiln::matmul(x, kernel_.value()) + bias_.value();
  }
  std::int64_t units_;
  Variable kernel_, bias_;
};

struct Net : Module {
  TestDense l1{4, "dense"}, l2{2, "dense_b"};
  Variable steps;
  Net() : Module("net") {
    add_module("l1", l1);
    add_module("l2", l2);
    steps = add_variable("steps", {}, kiln::init::zeros(), /*trainable*/ false, kiln::i64);
  }
  Tensor operator()(const Tensor& x) { return l2(kiln::tanh(l1(x))); }
};

}  // namespace

TEST_CASE("module variables have paths in a stable order", "[module]") {
  kiln::clear_session();
  Net net;
  CHECK(net.name() == "net");
  CHECK(net.path() == "net");
  CHECK(net.l1.path() == "net/l1");
  CHECK(net.l1.name() == "dense");  // its own name; the path uses the registration name
  CHECK(paths_of(net) == std::vector<std::string>{"net/steps"});
  net(kiln::ones({5, 3}));
  const std::vector<std::string> expected{"net/steps", "net/l1/kernel", "net/l1/bias",
                                          "net/l2/kernel", "net/l2/bias"};
  CHECK(paths_of(net) == expected);
  CHECK(names_of(net.variables()) == expected);  // variable names are the full paths
  CHECK(net.l1.kernel_.shape() == Shape{3, 4});
  CHECK(net.l2.kernel_.shape() == Shape{4, 2});
  CHECK(paths_of(net.l1) == std::vector<std::string>{"dense/kernel", "dense/bias"});
  CHECK(names_of(net.trainable_variables()) ==
        std::vector<std::string>{"net/l1/kernel", "net/l1/bias", "net/l2/kernel", "net/l2/bias"});
  CHECK(names_of(net.non_trainable_variables()) == std::vector<std::string>{"net/steps"});
  auto children = net.children();
  REQUIRE(children.size() == 2);
  CHECK((children[0].first == "l1" && children[0].second == &net.l1));
  CHECK(kiln::global_variables("net/l1").size() == 2);

  // Calling again creates nothing; an incompatible input size is a clear error.
  net(kiln::ones({7, 3}));
  CHECK(net.variables().size() == 5);
  CHECK_THROWS_WITH(net(kiln::ones({5, 6})),
                    "[Module.add_variable] variable net/l1/kernel exists as f32 [3,4]; requested "
                    "f32 [6,4]");
}

TEST_CASE("variable(path) finds variables and explains misses", "[module]") {
  kiln::clear_session();
  Net net;
  CHECK_THROWS_WITH(net.variable("l1/kernel"),
                    "[Module.variable] net has no variable 'l1/kernel'; closest: steps");
  net(kiln::ones({1, 3}));
  CHECK(net.variable("l1/kernel") == net.l1.kernel_);
  CHECK(net.variable("net/l1/kernel") == net.l1.kernel_);  // rooted at the module's name
  CHECK(net.variable("steps") == net.steps);
  CHECK(net.l2.variable("bias") == net.l2.bias_);
  CHECK(net.has_variable("l2/bias"));
  CHECK_FALSE(net.has_variable("l3/bias"));
  CHECK_THROWS_WITH(net.variable("l1/kernl"),
                    "[Module.variable] net has no variable 'l1/kernl'; closest: l1/kernel, "
                    "l2/kernel, l1/bias (5 variables in all)");
  Module empty("empty");
  CHECK_THROWS_WITH(empty.variable("w"),
                    "[Module.variable] empty has no variable 'w'; it has no variables yet "
                    "(layers create theirs on their first call)");
}

TEST_CASE("get_weights / set_weights are in variables() order and all or nothing", "[module]") {
  kiln::clear_session();
  Net net;
  net(kiln::ones({2, 3}));
  auto weights = net.get_weights();
  REQUIRE(weights.size() == 5);
  CHECK(same(weights[1], net.l1.kernel_.value()));
  std::vector<Tensor> updated;
  for (const auto& w : weights) updated.push_back(kiln::ones_like(w));
  net.set_weights(updated);
  CHECK(same(net.l2.bias_.value(), kiln::ones({2})));
  CHECK(net.steps.value().item<std::int64_t>() == 1);

  // A bad value anywhere: nothing is assigned.
  std::vector<Tensor> bad;
  for (const auto& w : weights) bad.push_back(kiln::zeros_like(w));
  bad[3] = kiln::zeros({2, 4});
  CHECK_THROWS_WITH(net.set_weights(bad),
                    "[Module.set_weights] value 3 is f32 [2,4], but variable net/l2/kernel is "
                    "f32 [4,2]");
  CHECK(same(net.l1.kernel_.value(), kiln::ones({3, 4})));
  bad[3] = Tensor();
  CHECK_THROWS_WITH(net.set_weights(bad),
                    "[Module.set_weights] value 3 (for net/l2/kernel) is an undefined tensor");
  CHECK_THROWS_WITH(net.set_weights({kiln::zeros({})}),
                    "[Module.set_weights] net has 5 variables; got 1 values");
  CHECK(same(net.l1.kernel_.value(), kiln::ones({3, 4})));
  net.set_weights(weights);
  CHECK(same(net.l1.kernel_.value(), weights[1]));
}

TEST_CASE("freeze and unfreeze toggle trainability of a subtree", "[module]") {
  kiln::clear_session();
  Net net;
  net.l2.freeze();  // before build: variables are created frozen
  net(kiln::ones({1, 3}));
  CHECK(names_of(net.trainable_variables()) ==
        std::vector<std::string>{"net/l1/kernel", "net/l1/bias"});
  CHECK_FALSE(net.l2.kernel_.trainable());
  CHECK(net.l2.frozen());
  net.freeze();
  CHECK(net.trainable_variables().empty());
  CHECK(kiln::trainable_variables("net").empty());
  CHECK(net.variables().size() == 5);
  net.unfreeze();  // l2 is still frozen itself; "steps" was created non-trainable
  CHECK(names_of(net.trainable_variables()) ==
        std::vector<std::string>{"net/l1/kernel", "net/l1/bias"});
  net.l2.unfreeze();
  CHECK(net.trainable_variables().size() == 4);
  CHECK_FALSE(net.steps.trainable());
  CHECK(names_of(kiln::trainable_variables("net/l2")) ==
        std::vector<std::string>{"net/l2/kernel", "net/l2/bias"});
}

TEST_CASE("registration errors", "[module]") {
  kiln::clear_session();
  Module a("a"), b("b"), c("c");
  a.add_module("b", b);
  b.add_module("c", c);
  CHECK_THROWS_WITH(a.add_module("b", c),
                    "[Module.add_module] a already has a child named 'b' (module 'b')");
  CHECK_THROWS_WITH(a.add_module("again", b),
                    "[Module.add_module] module 'b' is already a child of a");
  CHECK_THROWS_WITH(c.add_module("a", a),
                    "[Module.add_module] adding 'a' to a/b/c would make a cycle (a/b/c is inside "
                    "'a')");
  CHECK_THROWS_WITH(a.add_module("self", a), Catch::Contains("would make a cycle"));
  CHECK_THROWS_WITH(a.add_variable("b/w", {1}, kiln::init::zeros()),
                    "[Module.add_variable] a cannot add variable 'b/w': 'b' is the name of a "
                    "child module");
  a.add_variable("w", {1}, kiln::init::zeros());
  CHECK_THROWS_WITH(a.add_module("w", c),
                    "[Module.add_module] a cannot add child 'w': it has a variable 'w'");
  CHECK_THROWS_WITH(a.add_module("x/y", c), Catch::StartsWith("[Module.add_module] invalid child "
                                                              "name 'x/y'"));
  CHECK_THROWS_WITH(Module("a/b"), Catch::StartsWith("[Module] invalid module name 'a/b'"));
  CHECK_THROWS_WITH(a.add_module("n", std::shared_ptr<Module>()),
                    "[Module.add_module] the child 'n' is a null pointer");
  // Automatic names: the base name for every root, unique among the siblings once registered
  // (so two instances of one architecture have the same paths).
  CHECK(Module().name() == "module");
  CHECK(Module().name() == "module");
  CHECK(Module().has_automatic_name());
  CHECK_FALSE(Module("m").has_automatic_name());
  Module parent("p"), first, second, third;
  parent.add_module(first.name(), first);
  parent.add_module(second.name(), second);
  parent.add_module("module_2", third);  // an explicit registration name is used as given
  CHECK(first.path() == "p/module");
  CHECK(second.name() == "module_1");
  CHECK(second.path() == "p/module_1");
  CHECK(third.path() == "p/module_2");
  CHECK(third.name() == "module");  // registered under another name: its own name stays
  Module explicit_name("module");
  CHECK_THROWS_WITH(parent.add_module("module", explicit_name),
                    Catch::StartsWith("[Module.add_module] p already has a child named 'module'"));
}

TEST_CASE("names follow registration; either side of a link may die first", "[module]") {
  kiln::clear_session();
  const Tensor x = kiln::ones({1, 3});
  SECTION("registration renames variables created before it") {
    TestDense d(2, "d");
    d(x);
    CHECK(d.kernel_.name() == "d/kernel");
    Module root("root");
    root.add_module("enc", d);
    CHECK(d.kernel_.name() == "root/enc/kernel");
    Module top("top");
    top.add_module("model", root);
    CHECK(d.kernel_.name() == "top/model/enc/kernel");
    CHECK(paths_of(root) == std::vector<std::string>{"root/enc/kernel", "root/enc/bias"});
  }
  SECTION("a root module takes the name scope active at its construction") {
    std::optional<TestDense> d;
    {
      kiln::NameScope s("outer");
      d.emplace(2, "d");
    }
    (*d)(x);
    CHECK(d->kernel_.name() == "outer/d/kernel");
    CHECK(paths_of(*d) == std::vector<std::string>{"d/kernel", "d/bias"});
    CHECK(kiln::global_variables("outer").size() == 2);
  }
  SECTION("a child that outlives its parent becomes a root") {
    TestDense d(2, "d");
    {
      Module p("p");
      p.add_module("d", d);
      d(x);
      CHECK(d.kernel_.name() == "p/d/kernel");
    }
    CHECK(d.path() == "d");
    CHECK(d.kernel_.name() == "d/kernel");
  }
  SECTION("a parent that outlives its child forgets it") {
    Module p("p");
    std::weak_ptr<kiln::detail::VariableImpl> weak;
    {
      TestDense d(2, "d");
      p.add_module("d", d);
      d(x);
      weak = d.kernel_.impl();
      CHECK(p.variables().size() == 2);
    }
    CHECK(p.variables().empty());
    CHECK(p.children().empty());
    CHECK(weak.expired());
  }
  SECTION("owned children live as long as the parent") {
    std::weak_ptr<kiln::detail::VariableImpl> weak;
    {
      Module p("p");
      TestDense& d = p.add_module("d", std::make_shared<TestDense>(2, "d"));
      d(x);
      weak = d.kernel_.impl();
      CHECK(p.variable("d/kernel") == d.kernel_);
    }
    CHECK(weak.expired());
  }
  SECTION("a shared module is listed once and named after its first parent") {
    TestDense shared(2, "shared");
    Module b("b");
    {
      Module a("a");
      a.add_module("s", shared);
      b.add_module("t", shared);
      shared(x);
      CHECK(shared.kernel_.name() == "a/s/kernel");
      CHECK(paths_of(b) == std::vector<std::string>{"b/t/kernel", "b/t/bias"});
      Module both("both");
      both.add_module("a", a);
      both.add_module("b", b);
      CHECK(both.variables().size() == 2);
      a.freeze();
      CHECK(b.trainable_variables().empty());  // frozen through any parent
      a.unfreeze();
      CHECK(b.trainable_variables().size() == 2);
    }
    CHECK(shared.kernel_.name() == "b/t/kernel");  // the remaining parent names it now
  }
}

TEST_CASE("modules move consistently and refuse use after move", "[module]") {
  kiln::clear_session();
  std::optional<Net> a(std::in_place);
  (*a)(kiln::ones({1, 3}));
  const auto before = a->named_variables();
  Net b(std::move(*a));
  a.reset();
  CHECK(b.named_variables() == before);
  auto children = b.children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].second == &b.l1);
  CHECK(children[1].second == &b.l2);
  CHECK(b.variable("l1/kernel") == b.l1.kernel_);
  CHECK(b.l1.path() == "net/l1");
  b(kiln::ones({4, 3}));
  CHECK(b.variables().size() == 5);

  TestDense d(3, "d");
  TestDense moved(std::move(d));
  CHECK(moved.name() == "d");
  CHECK_THROWS_WITH(d.variables(), "[Module.variables] this module was moved from");
  CHECK_THROWS_WITH(b.add_module("d", d), "[Module.add_module] the child 'd' was moved from");
}

TEST_CASE("a module method under kiln::function creates its variables in the first trace only",
          "[module]") {
  kiln::clear_session();
  Net net;
  auto step = kiln::function([&](const Tensor& x) { return net(x); });
  const Tensor x = kiln::random::normal({8, 3}, 0, 1, 1);
  const auto variables_before = kiln::global_variables().size();
  Tensor first = step(x);
  CHECK(net.variables().size() == 5);
  CHECK(same(first, net(x)));  // eager and traced agree, and the eager call created nothing
  const auto nodes = kiln::memory_stats().live_graph_nodes;
  const auto live_bytes = kiln::memory_stats().live_bytes;
  for (int i = 0; i < 1000; ++i) step(x);
  CHECK(step.tracing_count() == 1);
  CHECK(net.variables().size() == 5);
  CHECK(kiln::global_variables().size() == variables_before + 4);
  CHECK(kiln::memory_stats().live_graph_nodes == nodes);
  CHECK(kiln::memory_stats().live_bytes == live_bytes);
  // Variables are bound by reference: set_weights changes the cached graph's result.
  auto weights = net.get_weights();
  for (auto& w : weights) w = kiln::zeros_like(w);
  net.set_weights(weights);
  CHECK(same(step(x), kiln::zeros({8, 2})));
  CHECK(step.tracing_count() == 1);
  // A new batch size retraces and finds the same variables.
  step(kiln::ones({2, 3}));
  CHECK(step.tracing_count() == 2);
  CHECK(net.variables().size() == 5);
}

TEST_CASE("a failed first trace leaves the module as it was", "[module]") {
  kiln::clear_session();
  const auto baseline = kiln::memory_stats().live_bytes;
  {
    Module owner("owner");
    int calls = 0;
    auto f = kiln::function([&](const Tensor& x) {
      Variable w = owner.add_variable("w", {256}, kiln::init::ones());
      auto& child = owner.add_module("child", std::make_shared<TestDense>(2, "child"));
      Tensor y = child(x);
      if (++calls == 1) throw kiln::Error("[test] the first trace fails");
      return kiln::sum(y) + kiln::sum(w.value());
    });
    CHECK_THROWS_WITH(f(kiln::ones({1, 3})), "[test] the first trace fails");
    CHECK(owner.variables().empty());
    CHECK(owner.children().empty());
    CHECK(kiln::global_variables("owner").empty());
    CHECK(kiln::memory_stats().live_bytes == baseline);
    f(kiln::ones({1, 3}));  // the retry is a first trace again
    CHECK(f.tracing_count() == 1);
    CHECK(paths_of(owner) ==
          std::vector<std::string>{"owner/w", "owner/child/kernel", "owner/child/bias"});
  }
  kiln::clear_caches();
  CHECK(kiln::memory_stats().live_bytes == baseline);
}

namespace {

// Scenario 1: an unrolled LSTM built from get_variable under Reuse::Auto in name scopes.
Tensor lstm_layer(const Tensor& x, std::int64_t units, std::string_view scope) {
  kiln::NameScope s(scope);
  const std::int64_t batch = x.dim(0), steps = x.dim(1), features = x.dim(2);
  Variable kernel = kiln::get_variable("kernel", {features, 4 * units},
                                       kiln::init::glorot_uniform(), Reuse::Auto);
  Variable recurrent = kiln::get_variable("recurrent_kernel", {units, 4 * units},
                                          kiln::init::orthogonal(), Reuse::Auto);
  Variable bias = kiln::get_variable("bias", {4 * units}, kiln::init::zeros(), Reuse::Auto);
  Tensor h = kiln::zeros({batch, units}), c = kiln::zeros({batch, units});
  for (std::int64_t t = 0; t < steps; ++t) {
    Tensor xt = kiln::squeeze(kiln::slice(x, 1, t, t + 1), {1});
    Tensor z = kiln::matmul(xt, kernel.value()) + kiln::matmul(h, recurrent.value()) + bias.value();
    auto gates = kiln::split(z, 4, 1);
    c = kiln::sigmoid(gates[1]) * c + kiln::sigmoid(gates[0]) * kiln::tanh(gates[2]);
    h = kiln::sigmoid(gates[3]) * kiln::tanh(c);
  }
  return h;
}

Tensor lstm_model(const Tensor& x) {
  kiln::NameScope s("model");
  Tensor h = lstm_layer(x, 8, "lstm");
  Variable w = kiln::get_variable("out/kernel", {8, 1}, kiln::init::glorot_uniform(), Reuse::Auto);
  return kiln::sigmoid(kiln::matmul(h, w.value()));
}

}  // namespace

TEST_CASE("scenario 1: an unrolled get_variable LSTM creates its variables once",
          "[module][scenario]") {
  kiln::clear_session();
  kiln::random::set_global_seed(7);
  const Tensor x = kiln::random::normal({4, 5, 3}, 0, 1, 11);
  Tensor eager1 = lstm_model(x);
  Tensor eager2 = lstm_model(x);
  CHECK(same(eager1, eager2));
  const auto names = names_of(kiln::global_variables("model"));
  CHECK(names == std::vector<std::string>{"model/lstm/kernel", "model/lstm/recurrent_kernel",
                                          "model/lstm/bias", "model/out/kernel"});
  auto model = kiln::function(lstm_model);
  Tensor traced = model(x);
  CHECK(kiln::max(kiln::abs(traced - eager1)).item<float>() < 1e-5f);
  const auto nodes = model.get_concrete_function(x).graph().num_nodes();
  const auto live_nodes = kiln::memory_stats().live_graph_nodes;
  for (int i = 0; i < 1000; ++i) model(x);
  CHECK(model.tracing_count() == 1);
  CHECK(names_of(kiln::global_variables("model")) == names);
  CHECK(kiln::default_variable_store().size() == 4);
  CHECK(model.get_concrete_function(x).graph().num_nodes() == nodes);
  CHECK(kiln::memory_stats().live_graph_nodes == live_nodes);

  // Rebuilding after clear_session gives the same initial values (reproducible seeds) and
  // new variables, without growth.
  kiln::clear_session();
  CHECK(kiln::global_variables("model").empty());
  kiln::random::set_global_seed(7);
  CHECK(same(lstm_model(x), eager1));
  CHECK(kiln::global_variables("model").size() == 4);
  kiln::random::set_global_seed(0);
}

TEST_CASE("scenario 3: two scopes, collections by scope, a frozen layer1", "[module][scenario]") {
  kiln::clear_session();
  const Tensor x = kiln::random::normal({16, 3}, 0, 1, 21);
  const Tensor y = kiln::random::normal({16, 1}, 0, 1, 22);
  auto layer = [](std::string_view scope, std::int64_t in, std::int64_t out) {
    kiln::NameScope s(scope);
    kiln::get_variable("w", {in, out}, kiln::init::glorot_uniform(3), Reuse::Auto);
    kiln::get_variable("b", {out}, kiln::init::zeros(), Reuse::Auto);
  };
  layer("layer1", 3, 4);
  layer("layer2", 4, 1);
  CHECK(names_of(kiln::global_variables("layer1")) ==
        std::vector<std::string>{"layer1/w", "layer1/b"});
  CHECK(names_of(kiln::global_variables("layer2")) ==
        std::vector<std::string>{"layer2/w", "layer2/b"});
  for (auto& v : kiln::global_variables("layer1")) v.set_trainable(false);  // freeze layer1
  CHECK(names_of(kiln::trainable_variables()) == std::vector<std::string>{"layer2/w", "layer2/b"});

  const auto layer1_before =
      kiln::get_variable("layer1/w", {3, 4}, kiln::init::zeros(), Reuse::Yes).value();
  const auto layer2_before =
      kiln::get_variable("layer2/w", {4, 1}, kiln::init::zeros(), Reuse::Yes).value();
  // A traced SGD step over the trainable collection.
  auto train_step = kiln::function([](const Tensor& xb, const Tensor& yb) {
    auto all = kiln::global_variables();
    auto find = [&](std::string_view name) {
      for (auto& v : all)
        if (v.name() == name) return v;
      throw kiln::Error("missing");
    };
    auto trainable = kiln::trainable_variables();
    kiln::GradientTape tape;
    std::map<std::string, Tensor> values;
    for (auto& v : all) values[v.name()] = v.value();
    std::vector<Tensor> sources;
    for (auto& v : trainable) {
      tape.watch(values[v.name()]);
      sources.push_back(values[v.name()]);
    }
    Tensor h = kiln::tanh(kiln::matmul(xb, values["layer1/w"]) + values["layer1/b"]);
    Tensor pred = kiln::matmul(h, values["layer2/w"]) + values["layer2/b"];
    Tensor loss = kiln::mean(kiln::square(pred - yb));
    auto grads = tape.gradient(loss, sources);
    for (std::size_t i = 0; i < trainable.size(); ++i)
      find(trainable[i].name()).assign_sub(grads[i] * 0.1f);
    return loss;
  });
  const float first_loss = train_step(x, y).item<float>();
  float loss = first_loss;
  for (int i = 0; i < 20; ++i) loss = train_step(x, y).item<float>();
  CHECK(loss < first_loss);
  CHECK(train_step.tracing_count() == 1);
  CHECK(same(kiln::default_variable_store().find("layer1/w").value(), layer1_before));
  CHECK_FALSE(same(kiln::default_variable_store().find("layer2/w").value(), layer2_before));

  // Assigning through an argument of a traced function changes the variable, no retrace.
  Variable w2 = kiln::default_variable_store().find("layer2/w");
  auto load = kiln::function([&](const Tensor& value) {
    w2.assign(value);
    return w2.value();
  });
  load(kiln::full({4, 1}, 1.0));
  CHECK(same(w2.value(), kiln::full({4, 1}, 1.0)));
  load(kiln::full({4, 1}, 2.0));
  CHECK(same(w2.value(), kiln::full({4, 1}, 2.0)));
  CHECK(load.tracing_count() == 1);

  // The same with modules: freezing the "layer1" child.
  struct TwoLayers : Module {
    TestDense layer1{4, "layer1"}, layer2{1, "layer2"};
    TwoLayers() : Module("two") {
      add_module("layer1", layer1);
      add_module("layer2", layer2);
    }
  } two;
  two.layer2(two.layer1(x));
  two.layer1.freeze();
  CHECK(names_of(two.trainable_variables()) ==
        std::vector<std::string>{"two/layer2/kernel", "two/layer2/bias"});
  CHECK(kiln::trainable_variables("two/layer1").empty());
  CHECK(kiln::global_variables("two/layer1").size() == 2);
}

// Architecture files (kiln::nn::to_json / from_json), kiln::Config and initializer configs:
// round trips of every built-in layer, user modules through the registry, and bad files.
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "layer_test_support.hpp"

using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
namespace nn = kiln::nn;
namespace init = kiln::init;

namespace {

/// A user-written layer: y = x * scale + a bias of `units` (units must equal x's last dim).
class ScaledBias : public nn::Layer {
 public:
  explicit ScaledBias(std::int64_t units, double scale = 1.0, std::string name = {})
      : Layer("scaled_bias", std::move(name)), units_(units), scale_(scale) {}

  Tensor operator()(const Tensor& x) override {
    note_input(x);
    const auto bias = weight("bias", {units_}, init::constant(0.25));
    return x * scale_ + bias.value();
  }

  Config config() const { return base_config().set("units", units_).set("scale", scale_); }
  static ScaledBias from_config(const Config& c) {
    c.check_keys({"name", "units", "scale"});
    return ScaledBias(c.get_int("units"), c.get_double("scale", 1.0), c.get_string("name", ""));
  }

 private:
  std::int64_t units_;
  double scale_;
};

/// A user container: its children are members, made by its constructor in every program.
class Residual : public nn::Layer {
 public:
  explicit Residual(std::int64_t units, std::string name = {})
      : Layer("residual", std::move(name)), units_(units) {
    add_module("inner", inner_);
    add_module("outer", outer_);
  }
  Tensor operator()(const Tensor& x) override { return x + outer_(inner_(x)); }
  Config config() const { return base_config().set("units", units_); }
  static Residual from_config(const Config& c) {
    return Residual(c.get_int("units"), c.get_string("name", ""));
  }

 private:
  std::int64_t units_;
  nn::Dense inner_{units_, nn::Activation::relu}, outer_{units_};
};

/// A second name for ScaledBias's settings (registering it under a taken name must fail).
class Twin : public ScaledBias {
 public:
  using ScaledBias::ScaledBias;
  static Twin from_config(const Config& c) { return Twin(c.get_int("units")); }
};

/// A user layer that is not registered.
class Unregistered : public nn::Layer {
 public:
  Unregistered() : Layer("unregistered", "") {}
  Tensor operator()(const Tensor& x) override { return x; }
};

}  // namespace

KILN_REGISTER_MODULE(ScaledBias);
KILN_REGISTER_MODULE(Residual);

namespace {

struct RoundTripCase {
  const char* what;
  std::function<std::shared_ptr<nn::Layer>()> make;
  std::function<Tensor()> input;
};

Tensor uniform_input(Shape shape) { return kiln::random::uniform(shape, -1.0, 1.0, 11); }

std::vector<RoundTripCase> round_trip_cases() {
  return {
      {"Dense with options",
       [] {
         return std::make_shared<nn::Dense>(
             4, nn::Activation::relu,
             nn::DenseOptions{.use_bias = false, .kernel_initializer = init::he_normal(3)});
       },
       [] {
         return uniform_input({2, 3});
       }},
      {"Embedding, LSTM, GRU, Dense",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{nn::Embedding(10, 4),
                            nn::LSTM(5, {.return_sequences = true, .unit_forget_bias = false}),
                            nn::GRU(3, {.fused = false}), nn::Dense(2, nn::Activation::softmax)});
       },
       [] {
         return kiln::random::uniform_int({2, 6}, 0, 10, 5);
       }},
      {"Masking, Bidirectional, SimpleRNN, Dropout",
       [] {
         return std::make_shared<nn::Sequential>(nn::Sequential{
             nn::Masking(0.0),
             nn::Bidirectional(nn::LSTM(4, {.return_sequences = true}),
                               {.merge_mode = nn::MergeMode::sum}),
             nn::SimpleRNN(3, {.activation = nn::Activation::relu,
                               .recurrent_initializer = init::random_normal(0.0, 0.1, 4)}),
             nn::Dropout(0.5, 9), nn::Dense(1)});
       },
       [] {
         return uniform_input({2, 5, 3});
       }},
      {"explicit names",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential({nn::Dense(8, nn::Activation::tanh, {.name = "hidden"}), nn::Dense(8),
                             nn::Dense(2, nn::Activation::none, {.name = "out"})},
                            "net"));
       },
       [] {
         return uniform_input({3, 4});
       }},
      {"a stateful LSTM (static batch)",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{nn::LSTM(4, {.return_sequences = true, .stateful = true}),
                            nn::GRU(2, {.go_backwards = true})});
       },
       [] {
         return uniform_input({3, 2, 5});
       }},
      {"an LSTM cell, a user layer",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{nn::LSTMCell(4), ScaledBias(4, 0.5), nn::Dense(3)});
       },
       [] {
         return uniform_input({2, 6});
       }},
      {"user containers with member layers",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{Residual(3), Residual(3, "named"), nn::Dense(2)});
       },
       [] {
         return uniform_input({2, 3});
       }},
  };
}

std::vector<std::pair<std::string, Shape>> variable_shapes(const kiln::Module& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [path, v] : m.named_variables()) out.emplace_back(path, v.shape());
  return out;
}

}  // namespace

TEST_CASE("from_json(to_json(m)) has m's variables and, with its weights, its outputs",
          "[architecture]") {
  io_test::TempDir dir;
  for (const RoundTripCase& c : round_trip_cases()) {
    SECTION(c.what) {
      kiln::clear_session();
      const std::shared_ptr<nn::Layer> model = c.make();
      const Tensor x = c.input();
      const Tensor expected = (*model)(x);
      const std::string json = nn::to_json(*model);

      const std::unique_ptr<nn::Layer> copy = nn::from_json<nn::Layer>(json, "round trip");
      CHECK(variable_shapes(*copy) == variable_shapes(*model));
      for (const auto& [path, v] : copy->named_variables())
        CHECK(v.dtype() == model->variable(path).dtype());
      CHECK(nn::to_json(*copy) == json);

      kiln::save_weights(*model, dir / "w.safetensors");
      kiln::load_weights(*copy, dir / "w.safetensors");
      if (model->stateful()) {
        nn::reset_states(*model);
        nn::reset_states(*copy);
        const Tensor again = (*model)(x);
        CHECK(kiln::test::max_diff((*copy)(x), again) == 0.0);
      } else {
        CHECK(kiln::test::max_diff((*copy)(x), expected) == 0.0);
      }
    }
  }
}

TEST_CASE("architecture files store settings, initializers and the built input", "[architecture]") {
  kiln::clear_session();
  nn::Sequential model{
      nn::Dense(3, nn::Activation::sigmoid, {.bias_initializer = init::constant(0.5)}),
      nn::LSTM(2, {.checkpoint_every = 4})};
  model.build({-1, 7, 5});
  const Config file = Config::from_json(nn::to_json(model));
  CHECK(file.get_string("format") == "kiln.architecture");
  CHECK(file.get_int("version") == nn::architecture_format_version);
  CHECK(file.get_config("built_input").get_ints("shape") == std::vector<std::int64_t>{-1, 7, 5});
  CHECK(file.get_config("built_input").get_string("dtype") == "f32");
  const Config module = file.get_config("module");
  CHECK(module.get_string("class_name") == "Sequential");
  const std::vector<Config> layers = module.get_config("config").get_configs("layers");
  REQUIRE(layers.size() == 2);
  const Config dense = layers[0].get_config("config");
  CHECK_FALSE(dense.has("name"));  // automatic: the copy takes it again
  CHECK(dense.get_int("units") == 3);
  CHECK(dense.get_string("activation") == "sigmoid");
  CHECK(dense.get_config("bias_initializer").get_string("class_name") == "constant");
  CHECK(dense.get_config("bias_initializer").get_config("config").get_double("value") == 0.5);
  CHECK(dense.get_config("kernel_initializer").get_config("config").is_null("seed"));
  CHECK(layers[1].get_config("config").get_int("checkpoint_every") == 4);

  // Dynamic dims stay dynamic: the copy is built and runs at another batch and length.
  const auto copy = nn::from_json<nn::Sequential>(nn::to_json(model));
  CHECK(copy->variables().size() == model.variables().size());
  CHECK((*copy)(uniform_input({4, 3, 5})).shape() == Shape{4, 2});
}

TEST_CASE("a model never built or called has no built input; its copy builds later",
          "[architecture]") {
  kiln::clear_session();
  nn::Sequential model{nn::Dense(4), nn::Dense(1)};
  const std::string json = nn::to_json(model);
  CHECK_FALSE(Config::from_json(json).has("built_input"));
  const auto copy = nn::from_json<nn::Sequential>(json);
  CHECK(copy->variables().empty());
  copy->build({-1, 6});
  CHECK(copy->variables().size() == 4);
}

TEST_CASE("every built-in initializer round trips through its config", "[architecture]") {
  const std::vector<init::Initializer> initializers = {
      init::zeros(),
      init::ones(),
      init::constant(-1.5),
      init::random_normal(0.5, 2.0, 1),
      init::random_uniform(-3.0, 3.0, 2),
      init::truncated_normal(1.0, 0.5, 3),
      init::glorot_uniform(4),
      init::he_normal(5),
      init::orthogonal(2.0, 6),
  };
  for (const init::Initializer& original : initializers) {
    CAPTURE(original.name());
    const Config spec = init::to_config(original);
    const Config reread = Config::from_json(spec.to_json());
    const init::Initializer copy = init::from_config(reread);
    CHECK(copy.name() == original.name());
    CHECK(copy.config() == original.config());
    CHECK(kiln::test::max_diff(copy({4, 3}), original({4, 3})) == 0.0);
  }
  // Unseeded ones stay unseeded (each variable draws from the global stream).
  CHECK(init::to_config(init::glorot_uniform()).get_config("config").is_null("seed"));
}

TEST_CASE("custom initializers join architecture files by registering", "[architecture]") {
  kiln::clear_session();
  const auto twos = [](const Config& c) {
    const double value = c.get_double("value");
    return init::Initializer(
        "test_fill", [value](const Shape& s, kiln::DType d) { return kiln::full(s, value, d); },
        Config().set("value", value));
  };
  nn::Dense layer(2, nn::Activation::none,
                  {.kernel_initializer = twos(Config().set("value", 2.0))});
  layer(uniform_input({1, 3}));
  REQUIRE_THROWS_WITH(nn::to_json(layer), Catch::Contains("'dense'") &&
                                              Catch::Contains("'test_fill' is not registered") &&
                                              Catch::Contains("register_initializer"));
  init::register_initializer("test_fill", twos);
  const auto copy = nn::from_json<nn::Dense>(nn::to_json(layer));
  CHECK(copy->kernel().value().to_vector<float>() == std::vector<float>(6, 2.0f));
  REQUIRE_THROWS_WITH(init::register_initializer("test_fill", twos),
                      Catch::Contains("registered already"));
  REQUIRE_THROWS_WITH(init::register_initializer("zeros", twos),
                      Catch::Contains("registered already"));

  nn::Dense held(2, nn::Activation::none,
                 {.kernel_initializer = init::from_value(kiln::zeros({3, 2}))});
  REQUIRE_THROWS_WITH(nn::to_json(held), Catch::Contains("from_value initializer holds a tensor"));
}

TEST_CASE("modules without a registered name are named in the error", "[architecture]") {
  kiln::clear_session();
  nn::Sequential model("model");
  model.add(nn::Dense(2));
  model.add(Unregistered());
  REQUIRE_THROWS_WITH(nn::to_json(model), Catch::Contains("'model/unregistered'") &&
                                              Catch::Contains("Unregistered") &&
                                              Catch::Contains("KILN_REGISTER_MODULE"));
  REQUIRE_THROWS_WITH(nn::register_module<ScaledBias>("ScaledBias2"),
                      Catch::Contains("registered already, as 'ScaledBias'"));
  REQUIRE_THROWS_WITH(nn::register_module<Twin>("Dense"),
                      Catch::Contains("'Dense' is registered already"));
}

namespace {

/// A valid file of a Sequential{Dense(units)} whose parts the bad-file cases edit.
std::string dense_file(
    const std::string& units, const std::string& extra = "",
    const std::string& top = "\"format\": \"kiln.architecture\", \"version\": 1") {
  return "{" + top +
         ", \"module\": {\"class_name\": \"Sequential\", \"config\": {\"layers\": "
         "[{\"class_name\": \"Dense\", \"config\": {\"units\": " +
         units + extra + "}}]}}}";
}

}  // namespace

TEST_CASE("bad architecture files are errors naming the file and the place", "[architecture]") {
  struct Bad {
    const char* what;
    std::string text;
    std::vector<std::string> message;
  };
  const std::vector<Bad> cases = {
      {"not JSON", "{\"format\": ", {"arch.json", "not valid JSON"}},
      {"not an object", "[1, 2]", {"arch.json", "not an object"}},
      {"another format",
       "{\"format\": \"keras\", \"version\": 1}",
       {"arch.json", "not a kiln architecture file"}},
      {"a version from the future",
       dense_file("2", "",
                  "\"format\": \"kiln.architecture\", "
                  "\"version\": 7"),
       {"arch.json", "version 7", "newer kiln"}},
      {"an unknown class",
       "{\"format\": \"kiln.architecture\", \"version\": 1, \"module\": "
       "{\"class_name\": \"Conv9D\", \"config\": {}}}",
       {"arch.json: module", "unknown class_name 'Conv9D'"}},
      {"a setting of the wrong type",
       dense_file("\"8\""),
       {"arch.json: module.config.layers[0].config", "'units' must be an integer",
        "the string \"8\""}},
      {"a misspelt setting",
       dense_file("2", ", \"use_bais\": false"),
       {"module.config.layers[0].config", "unknown key 'use_bais'", "'use_bias'"}},
      {"a value the layer rejects",
       dense_file("-3"),
       {"arch.json: module.config.layers[0].config (Dense)", "units must be positive"}},
      {"an unknown activation",
       dense_file("2", ", \"activation\": \"swish\""),
       {"layers[0].config (Dense)", "unknown activation 'swish'"}},
      {"an unknown initializer",
       dense_file("2", ", \"kernel_initializer\": {\"class_name\": \"lecun\", \"config\": {}}"),
       {"layers[0].config.kernel_initializer", "unknown initializer 'lecun'"}},
      {"a duplicate key", dense_file("2", ", \"units\": 3"), {"arch.json", "'units' twice"}},
      {"a bad built-input dtype",
       "{\"format\": \"kiln.architecture\", \"version\": 1, \"module\": {\"class_name\": "
       "\"Dense\", \"config\": {\"units\": 2}}, \"built_input\": {\"shape\": [-1, 3], "
       "\"dtype\": \"f8\"}}",
       {"arch.json: built_input", "'dtype' must be f32"}},
      {"layers that are not a list",
       "{\"format\": \"kiln.architecture\", \"version\": 1, \"module\": {\"class_name\": "
       "\"Sequential\", \"config\": {\"layers\": 3}}}",
       {"module.config", "'layers' must be a list of objects"}},
  };
  for (const Bad& c : cases) {
    SECTION(c.what) {
      try {
        (void)nn::from_json(c.text, "arch.json");
        FAIL("no error");
      } catch (const kiln::Error& e) {
        for (const std::string& part : c.message) CHECK_THAT(e.what(), Catch::Contains(part));
      }
    }
  }
}

TEST_CASE("architecture files on disk: saved atomically, loaded with the file named",
          "[architecture]") {
  kiln::clear_session();
  io_test::TempDir dir;
  nn::Sequential model{nn::Dense(3, nn::Activation::relu), nn::Dense(1)};
  const Tensor x = uniform_input({2, 4});
  const Tensor y = model(x);
  nn::save_architecture(model, dir / "model.json");
  kiln::save_weights(model, dir / "model.safetensors");
  CHECK(dir.entries().size() == 2);  // no temporary file left behind

  const auto copy = nn::load_architecture<nn::Sequential>(dir / "model.json");
  kiln::load_weights(*copy, dir / "model.safetensors");
  CHECK(kiln::test::max_diff((*copy)(x), y) == 0.0);

  REQUIRE_THROWS_WITH(nn::load_architecture<nn::Dense>(dir / "model.json"),
                      Catch::Contains("model.json") &&
                          Catch::Contains("holds a Sequential, not a kiln::nn::Dense"));
  REQUIRE_THROWS_WITH(nn::load_architecture(dir / "missing.json"), Catch::Contains("missing.json"));
  std::ofstream(dir / "cut.json") << nn::to_json(model).substr(0, 40);
  REQUIRE_THROWS_WITH(nn::load_architecture(dir / "cut.json"),
                      Catch::Contains("cut.json") && Catch::Contains("not valid JSON"));
}

TEST_CASE("Config: typed getters, defaults, key order and where", "[architecture][config]") {
  Config c("settings");
  c.set("b", true).set("i", 3).set("d", 0.5).set("s", "text").set("seed", std::nullopt);
  c.set("dims", std::vector<std::int64_t>{2, -1}).set("child", Config().set("k", 1));
  c.set("i", 4);  // replaced in place
  CHECK(c.keys() == std::vector<std::string>{"b", "i", "d", "s", "seed", "dims", "child"});
  CHECK(c.get_bool("b"));
  CHECK(c.get_int("i") == 4);
  CHECK(c.get_double("i") == 4.0);
  CHECK(c.get_string("s") == "text");
  CHECK(c.get_ints("dims") == std::vector<std::int64_t>{2, -1});
  CHECK(c.is_null("seed"));
  CHECK_FALSE(c.get_optional_uint("seed"));
  CHECK(c.get_int("absent", 9) == 9);
  CHECK(c.get_string("absent", "x") == "x");
  CHECK(c.get_config("child").where() == "settings: child");
  CHECK(c.get_config("child").get_int("k") == 1);

  const Config reread = Config::from_json(c.to_json(-1));
  CHECK(reread == c);
  CHECK(reread.keys() == c.keys());

  REQUIRE_THROWS_WITH(c.get_int("s"), Catch::Contains("[config] settings: 's' must be an "
                                                      "integer, got the string \"text\""));
  REQUIRE_THROWS_WITH(c.get_bool("missing"), Catch::Contains("the key 'missing' is missing"));
  REQUIRE_THROWS_WITH(c.get_int("d"), Catch::Contains("got the number 0.5"));
  REQUIRE_THROWS_WITH(c.get_uint("dims"), Catch::Contains("an integer >= 0"));
  REQUIRE_THROWS_WITH(c.check_keys({"b", "i"}), Catch::Contains("unknown key 'd'"));
  REQUIRE_THROWS_WITH(c.set("nan", std::nan("")), Catch::Contains("'nan' cannot be"));
  REQUIRE_THROWS_WITH(Config::from_json(std::string(100, '[') + std::string(100, ']'), "deep"),
                      Catch::Contains("deep: JSON text nests deeper than 64 levels"));
}

// kiln::export_function / kiln::load_function: exported graphs give the original's results bit
// for bit (forward passes, train steps that assign, loops, dynamic dims), their variables stay
// variables, and damaged or edited files are clear errors.
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include <fstream>

#include "io_test_support.hpp"
#include "jit/export_format.hpp"
#include "layer_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::TensorSpec;
namespace nn = kiln::nn;

namespace {

/// Bitwise equality of two tensors of one dtype and shape.
bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         kiln::all(kiln::equal(a, b)).item<bool>();
}

Tensor input(Shape shape, std::uint64_t seed = 1) {
  return kiln::random::uniform(shape, -1.0, 1.0, seed);
}

struct ForwardCase {
  const char* what;
  std::function<std::shared_ptr<nn::Layer>()> make;
  TensorSpec spec;
  std::vector<Shape> calls;  // shapes to call with (the first is the traced one)
};

std::vector<ForwardCase> forward_cases() {
  return {
      {"fused LSTM and Dense, dynamic batch",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{nn::LSTM(8, {.return_sequences = true}), nn::LSTM(4), nn::Dense(2)});
       },
       TensorSpec({-1, 6, 3}),
       {{4, 6, 3}, {1, 6, 3}, {7, 6, 3}}},
      {"a scan LSTM (fused = false), dynamic time",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{nn::LSTM(5, {.fused = false}), nn::Dense(1, nn::Activation::sigmoid)});
       },
       TensorSpec({2, -1, 3}),
       {{2, 4, 3}, {2, 9, 3}}},
      {"GRU with masking and Bidirectional, static",
       [] {
         return std::make_shared<nn::Sequential>(
             nn::Sequential{nn::Bidirectional(nn::GRU(4, {.return_sequences = true})), nn::GRU(3),
                            nn::Dense(2, nn::Activation::softmax)});
       },
       TensorSpec({3, 5, 2}),
       {{3, 5, 2}}},
      {"MLP with fused elementwise chains",
       [] {
         return std::make_shared<nn::Sequential>(nn::Sequential{
             nn::Dense(16, nn::Activation::tanh), nn::Dense(16, nn::Activation::relu),
             nn::Dense(3, nn::Activation::softmax)});
       },
       TensorSpec({-1, 10}),
       {{8, 10}, {300, 10}}},
  };
}

}  // namespace

TEST_CASE("a loaded function gives the original's outputs bit for bit", "[export]") {
  io_test::TempDir dir;
  for (const ForwardCase& c : forward_cases()) {
    SECTION(c.what) {
      kiln::clear_session();
      const auto model = c.make();
      auto forward = kiln::function([&](const Tensor& x) { return (*model)(x); },
                                    {.name = "forward", .input_signature = {c.spec}});
      const auto concrete = forward.get_concrete_function(input(c.calls.front()));
      kiln::export_function(concrete, dir / "f.kiln");
      const kiln::LoadedFunction loaded = kiln::load_function(dir / "f.kiln");

      CHECK(loaded.name() == "forward");
      REQUIRE(loaded.input_signature().size() == 1);
      CHECK(loaded.input_signature()[0].shape == c.spec.shape);
      REQUIRE(loaded.variables().size() == model->variables().size());
      for (std::size_t i = 0; i < model->variables().size(); ++i) {
        const kiln::Variable original = model->variables()[i];
        const kiln::Variable copy = loaded.variable(original.name());
        CHECK(copy.trainable() == original.trainable());
        CHECK(same(copy.value(), original.value()));
      }
      CHECK(loaded.graph().num_nodes() == concrete.graph().num_nodes());
      for (std::size_t k = 0; k < c.calls.size(); ++k) {
        const Tensor x = input(c.calls[k], 10 + k);
        const std::vector<Tensor> out = loaded(x);
        REQUIRE(out.size() == 1);
        CHECK(same(out[0], forward(x)));
      }
      CHECK(forward.tracing_count() == 1);
    }
  }
}

TEST_CASE("a loaded function's variables stay variables", "[export]") {
  kiln::clear_session();
  io_test::TempDir dir;
  nn::Dense dense(2, nn::Activation::none, {.name = "dense"});
  auto forward = kiln::function([&](const Tensor& x) { return dense(x); });
  const Tensor x = input({3, 4});
  kiln::export_function(forward.get_concrete_function(x), dir / "dense.kiln");
  const kiln::LoadedFunction loaded = kiln::load_function(dir / "dense.kiln");
  const kiln::Variable kernel = loaded.variable("dense/kernel");
  CHECK_FALSE(kernel == dense.kernel());  // its own variable, not the original's
  kernel.assign(kiln::full({4, 2}, 0.5));
  const Tensor expected = kiln::matmul(x, kiln::full({4, 2}, 0.5)) + dense.bias().value();
  CHECK(kiln::test::max_diff(loaded(x)[0], expected) == 0.0);
  CHECK_FALSE(same(dense(x), expected));  // the original is untouched
  REQUIRE_THROWS_WITH(
      loaded.variable("dense/kernal"),
      Catch::Contains("no variable 'dense/kernal'") && Catch::Contains("dense/kernel"));
}

TEST_CASE("an int8 model exports with its i8 variables and u8 constants", "[export]") {
  kiln::clear_session();
  io_test::TempDir dir;
  const Tensor kernel = kiln::random::normal({4, 3}, 0.0, 0.5, 17);
  const kiln::QuantizationParams grid = kiln::quantization_params(
      kiln::min(kernel, {0}), kiln::max(kernel, {0}), {.dtype = kiln::i8});
  const kiln::Variable stored(kiln::quantize(kernel, grid), "int8/kernel", false);
  const kiln::QuantizationParams input_grid = kiln::quantization_params(-1.0, 1.0);
  auto forward = kiln::function([&](const Tensor& x) {
    const Tensor levels = kiln::quantize(x, input_grid);  // a u8 value inside the graph
    return kiln::matmul(kiln::dequantize(levels, input_grid),
                        kiln::dequantize(stored.value(), grid));
  });
  const Tensor x = input({3, 4});
  kiln::export_function(forward.get_concrete_function(x), dir / "int8.kiln");
  const kiln::LoadedFunction loaded = kiln::load_function(dir / "int8.kiln");
  CHECK(loaded.variable("int8/kernel").value().dtype() == kiln::i8);
  CHECK(kiln::test::max_diff(loaded(x)[0], forward(x)) == 0.0);
}

TEST_CASE("an exported train step trains its own variables as the original does", "[export]") {
  kiln::clear_session();
  io_test::TempDir dir;
  nn::Sequential model{nn::LSTM(6), nn::Dense(1)};
  kiln::optim::Adam opt({.learning_rate = 1e-2});
  auto step = kiln::function(
      [&](const Tensor& x, const Tensor& y) {
        std::vector<kiln::Variable> vars;
        std::vector<Tensor> grads;
        Tensor loss;
        {
          kiln::GradientTape tape;
          loss = nn::losses::mean_squared_error(y, model(x));
          vars = model.trainable_variables();
          grads = tape.gradient(loss, vars);
        }
        opt.apply(grads, vars);
        return loss;
      },
      {.name = "train_step"});
  const Tensor x = input({4, 5, 3}, 2), y = input({4, 1}, 3);
  const auto concrete = step.get_concrete_function(x, y);  // creates the slots; runs nothing
  kiln::export_function(concrete, dir / "step.kiln");
  const kiln::LoadedFunction loaded = kiln::load_function(dir / "step.kiln");
  for (int i = 0; i < 3; ++i) CHECK(same(loaded(x, y)[0], step(x, y)));
  // Every variable (weights, Adam's slots and iteration count) moved the same way.
  std::vector<kiln::Variable> originals = model.variables();
  for (const kiln::Variable& v : opt.variables()) originals.push_back(v);
  CHECK(loaded.variables().size() == originals.size());
  for (const kiln::Variable& v : originals) {
    CAPTURE(v.name());
    CHECK(same(loaded.variable(v.name()).value(), v.value()));
  }
}

TEST_CASE("calling a loaded function with the wrong arguments is an error", "[export]") {
  kiln::clear_session();
  io_test::TempDir dir;
  nn::Dense dense(2);
  auto forward = kiln::function([&](const Tensor& x) { return dense(x); },
                                {.input_signature = {TensorSpec({-1, 4})}});
  kiln::export_function(forward.get_concrete_function(input({3, 4})), dir / "f.kiln");
  const kiln::LoadedFunction loaded = kiln::load_function(dir / "f.kiln");
  REQUIRE_THROWS_WITH(loaded(input({3, 4}), input({3, 4})),
                      Catch::Contains("takes 1 arguments, got 2"));
  REQUIRE_THROWS_WITH(loaded(input({3, 5})), Catch::Contains("argument 0 must be f32 [-1,4]"));
  REQUIRE_THROWS_WITH(loaded(kiln::cast(input({3, 4}), kiln::f64)),
                      Catch::Contains("got f64 [3,4]"));
  {
    kiln::GradientTape tape;
    REQUIRE_THROWS_WITH(loaded(input({3, 4})), Catch::Contains("has no gradient"));
  }
  auto outer = kiln::function([&](const Tensor& x) { return loaded(x)[0]; });
  REQUIRE_THROWS_WITH(outer(input({3, 4})),
                      Catch::Contains("while a kiln::function is being traced"));
  CHECK(loaded(input({5, 4}))[0].shape() == Shape{5, 2});
}

TEST_CASE("exporting a function whose variable is gone is an error", "[export]") {
  kiln::clear_session();
  io_test::TempDir dir;
  auto dense = std::make_unique<nn::Dense>(2);
  (*dense)(input({1, 3}));  // variables made eagerly: the trace does not own them
  auto forward = kiln::function([&](const Tensor& x) { return (*dense)(x); });
  const auto concrete = forward.get_concrete_function(input({1, 3}));
  dense.reset();
  REQUIRE_THROWS_WITH(kiln::export_function(concrete, dir / "f.kiln"),
                      Catch::Contains("f.kiln") && Catch::Contains("no longer exists"));
  CHECK(dir.entries().empty());
}

namespace {

/// Rewrites the export file at `path` with its graph text changed by `edit`; with `resign`, the
/// checksum is recomputed (an edit made on purpose), else left as it was.
void edit_graph(const std::filesystem::path& path, const std::function<void(std::string&)>& edit,
                bool resign) {
  std::map<std::string, Tensor> tensors = kiln::io::load_safetensors(path);
  kiln::io::Metadata metadata = kiln::io::load_safetensors_metadata(path);
  edit(metadata.at(kiln::detail::graph_key));
  if (resign)
    metadata[kiln::detail::checksum_key] =
        kiln::detail::graph_checksum(metadata.at(kiln::detail::graph_key));
  kiln::io::save_safetensors(path, tensors, metadata);
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("damaged, edited and foreign export files are errors naming the file", "[export]") {
  kiln::clear_session();
  io_test::TempDir dir;
  nn::Sequential model{nn::Dense(3, nn::Activation::tanh), nn::Dense(1)};
  auto forward = kiln::function([&](const Tensor& x) { return model(x); }, {.name = "net"});
  const auto path = dir / "net.kiln";
  const auto fresh = [&] {
    kiln::export_function(forward.get_concrete_function(input({2, 4})), path);
  };
  const auto fails_with = [&](const std::vector<std::string>& parts) {
    try {
      (void)kiln::load_function(path);
      FAIL("no error");
    } catch (const kiln::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("net.kiln"));
      for (const std::string& part : parts) CHECK_THAT(e.what(), Catch::Contains(part));
    }
  };

  SECTION("truncated") {
    fresh();
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
    fails_with({});
  }
  SECTION("edited without the checksum") {
    fresh();
    edit_graph(
        path, [](std::string& t) { replace_once(t, "\"tanh\"", "\"sigmoid\""); }, false);
    fails_with({"does not match its checksum"});
  }
  SECTION("a version from the future") {
    fresh();
    std::map<std::string, Tensor> tensors = kiln::io::load_safetensors(path);
    kiln::io::Metadata metadata = kiln::io::load_safetensors_metadata(path);
    metadata[kiln::detail::version_key] = "9";
    kiln::io::save_safetensors(path, tensors, metadata);
    fails_with({"export format version 9", "newer kiln"});
  }
  SECTION("a plain safetensors file") {
    kiln::io::save_safetensors(path, {{"w", kiln::ones({2})}});
    fails_with({"not a kiln export file"});
  }
  SECTION("a primitive this kiln does not have") {
    fresh();
    edit_graph(
        path, [](std::string& t) { replace_once(t, "\"prim\":\"matmul\"", "\"prim\":\"conv9d\""); },
        true);
    fails_with({"graph.nodes[", "'conv9d', which this kiln does not have"});
  }
  SECTION("an input that does not come first") {
    fresh();
    edit_graph(
        path, [](std::string& t) { replace_once(t, "\"inputs\":[0,", "\"inputs\":[99,"); }, true);
    fails_with({"reads node 99, which does not come before it"});
  }
  SECTION("a constant of another shape") {
    fresh();
    edit_graph(
        path,
        [](std::string& t) {
          replace_once(t, "\"kind\":\"variable\",\"dtype\":\"f32\",\"shape\":[4,3]",
                       "\"kind\":\"variable\",\"dtype\":\"f32\",\"shape\":[4,4]");
        },
        true);
    fails_with({"the variable is f32 [4,3]"});
  }
  SECTION("a graph that is not JSON") {
    fresh();
    edit_graph(
        path, [](std::string& t) { t.resize(t.size() / 2); }, true);
    fails_with({"not valid JSON"});
  }
  SECTION("a missing file") { fails_with({}); }
}

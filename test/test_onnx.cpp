// kiln::export_onnx: models the ONNX checker accepts (checked again in Python with the onnx
// package), onnxruntime giving kiln's outputs within 1e-5 (scenario 2's model, a GRU model, an
// MLP and a function of many primitives), and clear errors for what ONNX cannot hold.
#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include <fmt/format.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>

#if KILN_HAVE_ONNX
#include <onnx/onnx_pb.h>
#endif

#include "io_test_support.hpp"

using kiln::Tensor;
using kiln::TensorSpec;
namespace nn = kiln::nn;

namespace {

/// A model, its forward function's signature and the inputs to compare on.
struct ModelCase {
  std::string name;
  std::shared_ptr<nn::Layer> model;
  TensorSpec spec;
  std::vector<Tensor> inputs;
};

Tensor normal(kiln::Shape shape, std::uint64_t seed) {
  return kiln::random::normal(shape, 0.0, 1.0, seed);
}

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  cases.push_back({"scenario2",
                   std::make_shared<nn::Sequential>(
                       nn::Sequential{nn::LSTM(64, {.return_sequences = true}), nn::LSTM(32),
                                      nn::Dense(1, nn::Activation::sigmoid)}),
                   TensorSpec({-1, 5, 10}),
                   {normal({16, 5, 10}, 1), normal({3, 5, 10}, 2)}});
  cases.push_back({"scenario2_unrolled",
                   std::make_shared<nn::Sequential>(nn::Sequential{
                       nn::LSTM(64, {.return_sequences = true, .unroll = true}),
                       nn::LSTM(32, {.unroll = true}), nn::Dense(1, nn::Activation::sigmoid)}),
                   TensorSpec({16, 5, 10}),
                   {normal({16, 5, 10}, 3)}});
  cases.push_back({"gru",
                   std::make_shared<nn::Sequential>(nn::Sequential{
                       nn::GRU(16, {.return_sequences = true}), nn::GRU(8, {.go_backwards = true}),
                       nn::Dense(3, nn::Activation::softmax)}),
                   TensorSpec({-1, 7, 4}),
                   {normal({4, 7, 4}, 4), normal({2, 7, 4}, 5)}});
  cases.push_back({"gru_dynamic_time",
                   std::make_shared<nn::Sequential>(nn::Sequential{
                       nn::GRU(5, {.return_sequences = true}), nn::GRU(4), nn::Dense(2)}),
                   TensorSpec({-1, -1, 3}),
                   {normal({2, 6, 3}, 8), normal({3, 2, 3}, 9)}});
  cases.push_back({"lstm_scan",
                   std::make_shared<nn::Sequential>(
                       nn::Sequential{nn::LSTM(6, {.return_sequences = true, .fused = false}),
                                      nn::SimpleRNN(4, {.go_backwards = true}), nn::Dense(1)}),
                   TensorSpec({-1, -1, 3}),
                   {normal({2, 5, 3}, 10), normal({4, 1, 3}, 11)}});
  cases.push_back({"bidirectional_mlp",
                   std::make_shared<nn::Sequential>(nn::Sequential{
                       nn::Bidirectional(nn::LSTM(6)), nn::Dense(8, nn::Activation::relu),
                       nn::Dense(8, nn::Activation::tanh), nn::Dense(2)}),
                   TensorSpec({-1, 4, 3}),
                   {normal({5, 4, 3}, 6)}});
  return cases;
}

/// One function of many primitives (reductions, movement, comparisons, integer arithmetic).
std::vector<Tensor> many_ops(const Tensor& x, const Tensor& ids) {
  const Tensor a = kiln::exp(x * -0.5f) + kiln::log1p(kiln::abs(x)) - kiln::rsqrt(x * x + 1.f);
  const Tensor b = kiln::where(x > 0.f, kiln::sqrt(kiln::abs(x)), kiln::square(x) * 2.f);
  const Tensor ab = kiln::concat({a, b}, 1);
  const Tensor c = kiln::softmax(ab, 1) + kiln::log_softmax(ab, 1) * 0.1f +
                   kiln::logsumexp(ab, {1}, true) * 0.01f;
  const Tensor t = kiln::transpose(kiln::reshape(c, {2, 3, 4}), {2, 0, 1});
  const Tensor s = kiln::slice(kiln::pad(t, {{1, 0}, {0, 1}, {2, 2}}, 0.5), 0, 1, 5, 2);
  const Tensor r = kiln::sum(s, {1}) + kiln::max(s, {1}) - kiln::mean(s, {1});
  const Tensor g = kiln::gather(x, ids, 0);
  const Tensor q = kiln::cast(ids, kiln::i64);
  const Tensor i = (q - 3) / std::int64_t{2} + (q - 4) % std::int64_t{3} +
                   kiln::fmod(q - 4, kiln::scalar(std::int64_t{3})) +
                   kiln::trunc_div(q - 4, kiln::scalar(std::int64_t{2}));
  const Tensor u = kiln::tanh(x) * 0.9f;  // inside (-0.9, 0.9)
  const Tensor trig =
      kiln::tan(u) + kiln::asin(u) + kiln::acos(u) + kiln::atan(x) + kiln::sinh(u) + kiln::cosh(u) +
      kiln::asinh(x) + kiln::acosh(kiln::abs(x) + 1.f) + kiln::atanh(u) + kiln::expm1(u) +
      kiln::fmod(x * 3.f, kiln::scalar(1.25f)) + kiln::trunc_div(x * 3.f, kiln::scalar(1.25f)) +
      kiln::gelu(x) + kiln::gelu(x, true) + kiln::silu(x) + kiln::elu(x) + kiln::selu(x) +
      kiln::leaky_relu(x) + kiln::hard_sigmoid(x) + kiln::softsign(x) + kiln::mish(x);
  const Tensor order = kiln::argsort(x, 0);
  const Tensor rows = kiln::reshape(kiln::cast(ids, kiln::i64), {5, 1});
  const Tensor indexing = kiln::cumsum(x, 0, true, true) + kiln::cumsum(x, 1) +
                          kiln::sort(x, 1, true) + kiln::take_along_axis(x, order, 0) +
                          kiln::scatter_add(x, order, x * 2.f, 0) +
                          kiln::scatter(x, order, x * 3.f, 0) +
                          kiln::scatter_nd(x, kiln::tensor({1, 3}, {2, 1}), kiln::ones({2, 3}),
                                           kiln::ScatterMode::add) +
                          kiln::sum(kiln::gather_nd(x, rows), {0}, true);
  const Tensor scale = kiln::tensor<float>({0.5f, 1.5f, 1.f, 2.f, 0.75f, 1.25f}, {6});
  const Tensor norms = kiln::nn::layer_norm(ab, scale, scale * -0.5f) +
                       kiln::nn::layer_norm(ab, Tensor(), Tensor(), 0, 1e-3) +
                       kiln::nn::layer_norm(ab, Tensor(), scale) + kiln::nn::rms_norm(ab, scale) +
                       kiln::nn::rms_norm(ab, Tensor(), 0);
  const kiln::TopK top = kiln::top_k(x, 2, 1);
  const Tensor ties = kiln::round(x * 0.5f);
  return {r,
          kiln::argmax(g, 1),
          i,
          kiln::cast(kiln::all(x > -10.f, {1}), kiln::f32),
          trig,
          indexing,
          top.values * kiln::cast(top.indices, kiln::f32),
          kiln::argmax(ties, 1, true, true) + kiln::argmin(ties, 0, true, true),
          norms};
}

/// Convolutions and pooling in both layouts (ONNX puts channels first: the channels-last ones
/// export with transposes around them).
std::vector<Tensor> conv_ops(const Tensor& x) {                       // x [2, 9, 8, 3], NHWC
  const Tensor w = kiln::random::normal({3, 3, 3, 4}, 0.0, 0.5, 31);  // HWIO
  const Tensor y =
      kiln::relu(kiln::conv2d(x, w, {.strides = {2, 2}, .padding = kiln::ConvPadding::same}));
  const Tensor pooled =
      kiln::max_pool(y, {.window = {2, 2}, .strides = {2, 2}, .padding = kiln::ConvPadding::same}) +
      kiln::avg_pool(y, {.window = {3, 3},
                         .strides = {2, 2},
                         .padding = kiln::ConvPadding::same,
                         .count_padding = true});
  const Tensor first = kiln::transpose(x, {0, 3, 1, 2});                    // NCHW
  const Tensor grouped = kiln::random::normal({6, 1, 2, 3}, 0.0, 0.5, 32);  // OIHW, groups 3
  const Tensor z =
      kiln::conv2d(first, grouped,
                   {.dilations = {2, 1}, .groups = 3, .layout = kiln::DataLayout::channels_first});
  const Tensor up = kiln::conv_transpose(z, kiln::random::normal({6, 2, 3, 3}, 0.0, 0.5, 33),
                                         {.strides = {2, 2},
                                          .padding = kiln::ConvPadding::explicit_pads,
                                          .pads = {{1, 0}, {0, 1}},
                                          .output_padding = {1, 0},
                                          .layout = kiln::DataLayout::channels_first});
  return {pooled, z, up, kiln::global_avg_pool(y)};
}

/// A dense layer exported with int8 weights: the kernel's i8 levels in a variable (an INT8
/// initializer of the ONNX model; a constant would be folded to floats) dequantized in the
/// graph, and the input rounded to a u8 grid first. Made eagerly, before its function is traced.
struct Int8Dense {
  Tensor kernel = kiln::random::normal({3, 6}, 0.0, 0.5, 21);
  kiln::QuantizationParams kernel_grid = kiln::quantization_params(
      kiln::min(kernel, {0}), kiln::max(kernel, {0}), {.dtype = kiln::i8});
  kiln::Variable stored{kiln::quantize(kernel, kernel_grid), "int8_kernel", false};
  kiln::QuantizationParams input_grid = kiln::quantization_params(-2.0, 2.0);
  Tensor operator()(const Tensor& x) const {
    const Tensor input = kiln::dequantize(kiln::quantize(x, input_grid), input_grid);
    return kiln::matmul(input, kiln::dequantize(stored.value(), kernel_grid));
  }
};

}  // namespace

#if KILN_HAVE_ONNX

namespace {

onnx::ModelProto read_model(const std::filesystem::path& path) {
  onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  REQUIRE(model.ParseFromIstream(&in));
  return model;
}

}  // namespace

TEST_CASE("export_onnx writes models the ONNX checker accepts", "[onnx]") {
  kiln::clear_session();
  io_test::TempDir dir;
  for (const ModelCase& c : model_cases()) {
    CAPTURE(c.name);
    auto forward = kiln::function([&](const Tensor& x) { return (*c.model)(x); },
                                  {.name = c.name, .input_signature = {c.spec}});
    const auto path = dir / (c.name + ".onnx");
    kiln::export_onnx(forward.get_concrete_function(c.inputs.front()), path);
    const onnx::ModelProto model = read_model(path);
    CHECK(model.opset_import(0).version() == kiln::onnx_opset);
    CHECK(model.graph().name() == c.name);
    REQUIRE(model.graph().input_size() == 1);
    CHECK(model.graph().input(0).name() == "input_0");
    const auto& dims = model.graph().input(0).type().tensor_type().shape();
    REQUIRE(dims.dim_size() == static_cast<int>(c.spec.shape.size()));
    for (int d = 0; d < dims.dim_size(); ++d)
      CHECK((c.spec.shape[static_cast<std::size_t>(d)] == -1) == dims.dim(d).has_dim_param());
    CHECK(model.graph().output(0).name() == "output_0");
  }
}

TEST_CASE("functions an ONNX model cannot hold are errors naming the node", "[onnx]") {
  kiln::clear_session();
  io_test::TempDir dir;
  nn::Sequential model{nn::Dense(4, nn::Activation::relu), nn::Dropout(0.5), nn::Dense(1)};
  kiln::optim::SGD opt;
  const Tensor x = normal({8, 3}, 1), y = normal({8, 1}, 2);
  auto step = kiln::function([&](const Tensor& in, const Tensor& target) {
    kiln::GradientTape tape;
    const Tensor loss = nn::losses::mean_squared_error(target, model(in));
    const auto vars = model.trainable_variables();
    opt.apply(tape.gradient(loss, vars), vars);
    return loss;
  });
  REQUIRE_THROWS_WITH(
      kiln::export_onnx(step.get_concrete_function(x, y), dir / "step.onnx"),
      Catch::Contains("step.onnx: node") &&
          (Catch::Contains("assigns the variable") || Catch::Contains("has no ONNX form")));
  auto dropout = kiln::function([&](const Tensor& in) {
    nn::LearningPhaseScope training(true);
    return model(in);
  });
  REQUIRE_THROWS_WITH(kiln::export_onnx(dropout.get_concrete_function(x), dir / "d.onnx"),
                      Catch::Contains("random_uniform has no ONNX form") ||
                          Catch::Contains("assigns the variable"));
  auto loop = kiln::function([](const Tensor& in) {
    return kiln::while_loop([](const std::vector<Tensor>& v) { return kiln::sum(v[0]) < 100.f; },
                            [](const std::vector<Tensor>& v) { return std::vector{v[0] * 2.f}; },
                            {in}, {.maximum_iterations = 10})[0];
  });
  REQUIRE_THROWS_WITH(
      kiln::export_onnx(loop.get_concrete_function(kiln::ones({3})), dir / "loop.onnx"),
      Catch::Contains("loop.onnx: node") && Catch::Contains("does not write kiln's while_loop"));
  CHECK(dir.entries().empty());  // nothing half-written
}

#else

TEST_CASE("export_onnx says when kiln was built without ONNX", "[onnx]") {
  auto f = kiln::function([](const Tensor& x) { return x * 2.f; });
  REQUIRE_THROWS_WITH(kiln::export_onnx(f.get_concrete_function(kiln::ones({2})), "x.onnx"),
                      Catch::Contains("built without ONNX"));
}

#endif

TEST_CASE("onnxruntime gives kiln's outputs within 1e-5", "[onnx]") {
  const std::string python = io_test::test_python("onnx, onnxruntime");
  if (!KILN_HAVE_ONNX || python.empty()) {
    WARN(
        "skipped: kiln without ONNX, or no Python with onnx and onnxruntime (run "
        "scripts/python-env.sh, or set KILN_PYTHON)");
    return;
  }
  kiln::clear_session();
  io_test::TempDir dir;
  nlohmann::json manifest = nlohmann::json::array();
  int file = 0;
  const auto save = [&](const Tensor& t) {
    const std::string name = fmt::format("t{}.npy", file++);
    kiln::io::save_npy(dir / name, t);
    return name;
  };
  for (const ModelCase& c : model_cases()) {
    auto forward = kiln::function([&](const Tensor& x) { return (*c.model)(x); },
                                  {.name = c.name, .input_signature = {c.spec}});
    kiln::export_onnx(forward.get_concrete_function(c.inputs.front()), dir / (c.name + ".onnx"));
    nlohmann::json runs = nlohmann::json::array();
    for (const Tensor& x : c.inputs)
      runs.push_back({{"inputs", {save(x)}}, {"outputs", {save(forward(x))}}});
    manifest.push_back({{"model", c.name + ".onnx"}, {"runs", runs}});
  }
  auto ops = kiln::function(many_ops, {.name = "many_ops"});
  const Tensor x = normal({4, 3}, 7);
  const Tensor ids = kiln::tensor<std::int32_t>({3, 0, 2, 2, 1}, {5});
  kiln::export_onnx(ops.get_concrete_function(x, ids), dir / "many_ops.onnx");
  nlohmann::json outputs = nlohmann::json::array();
  for (const Tensor& out : ops(x, ids)) outputs.push_back(save(out));
  manifest.push_back({{"model", "many_ops.onnx"},
                      {"runs", {{{"inputs", {save(x), save(ids)}}, {"outputs", outputs}}}}});
  auto convs = kiln::function(conv_ops, {.name = "conv_ops"});
  const Tensor images = normal({2, 9, 8, 3}, 9);
  kiln::export_onnx(convs.get_concrete_function(images), dir / "conv_ops.onnx");
  nlohmann::json conv_outputs = nlohmann::json::array();
  for (const Tensor& out : convs(images)) conv_outputs.push_back(save(out));
  manifest.push_back({{"model", "conv_ops.onnx"},
                      {"runs", {{{"inputs", {save(images)}}, {"outputs", conv_outputs}}}}});
  const Int8Dense int8_dense;
  auto int8 =
      kiln::function([&](const Tensor& in) { return int8_dense(in); }, {.name = "int8_dense"});
  const Tensor x8 = normal({5, 3}, 8) * 1.5f;
  kiln::export_onnx(int8.get_concrete_function(x8), dir / "int8_dense.onnx");
  const onnx::ModelProto int8_model = read_model(dir / "int8_dense.onnx");
  bool int8_initializer = false;
  for (const auto& init : int8_model.graph().initializer())
    int8_initializer = int8_initializer || init.data_type() == onnx::TensorProto::INT8;
  CHECK(int8_initializer);
  manifest.push_back({{"model", "int8_dense.onnx"},
                      {"runs", {{{"inputs", {save(x8)}}, {"outputs", {save(int8(x8))}}}}}});
  // f16 and u16 inputs: the exported graph casts to the compute dtype (f32, i32) and back, as
  // kiln computes; products, sums and quotients round once per op, so the outputs are exact.
  auto half = kiln::function([](const Tensor& t) { return (t * t + t) / 4.0; }, {.name = "f16"});
  const Tensor xh = kiln::cast(normal({3, 4}, 10), kiln::f16);
  kiln::export_onnx(half.get_concrete_function(xh), dir / "f16.onnx");
  manifest.push_back(
      {{"model", "f16.onnx"}, {"runs", {{{"inputs", {save(xh)}}, {"outputs", {save(half(xh))}}}}}});
  auto narrow = kiln::function([](const Tensor& t) { return t * t + 7.0; }, {.name = "u16"});
  const Tensor xu = kiln::tensor<std::uint16_t>({0, 3, 199, 42, 7, 100}, {2, 3});
  kiln::export_onnx(narrow.get_concrete_function(xu), dir / "u16.onnx");
  manifest.push_back({{"model", "u16.onnx"},
                      {"runs", {{{"inputs", {save(xu)}}, {"outputs", {save(narrow(xu))}}}}}});
  std::ofstream(dir / "manifest.json") << manifest.dump(1);

  const std::string command = fmt::format("'{}' '{}/check_onnx.py' '{}'", python,
                                          test_paths::data_dir(), dir.path().string());
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// Quantization-aware training (docs/guide/embeddings.md): the same small classifier trained
// twice on a generated task, once in floating point and once with 8-bit fake quantization of
// its weights (per output channel, on each weight's own range) and of its activations
// (nn::FakeQuant, moving-average ranges). Then the int8 export: the quantized model's kernels as
// i8 and its activation grids as u8 in a safetensors file, read back by an inference function
// that computes with dequantized values. Prints both test accuracies and how the int8 model's
// outputs compare with the fake-quantized model's; exits 1 when the quantized model is more
// than one point behind the float one or the int8 model's outputs differ.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace {

using kiln::Tensor;

constexpr std::int64_t features = 16, hidden = 32, classes = 4;

/// A dense layer whose kernel can be fake-quantized on its own range, per output channel.
struct QuantDense : kiln::Module {
  bool quantize;
  kiln::Variable kernel, bias;
  QuantDense(std::int64_t in, std::int64_t out, bool quantize)
      : Module("quant_dense"), quantize(quantize) {
    kernel = add_variable("kernel", {in, out}, kiln::init::glorot_uniform(7));
    bias = add_variable("bias", {out}, kiln::init::zeros());
  }
  Tensor operator()(const Tensor& x) {
    Tensor w = kernel.value();
    if (quantize) {
      const Tensor lo = kiln::stop_gradient(kiln::min(w, {0}));
      const Tensor hi = kiln::stop_gradient(kiln::max(w, {0}));
      w = kiln::fake_quant_with_min_max_vars_per_channel(w, lo, hi, {.num_bits = 8});
    }
    return kiln::matmul(x, w) + bias.value();
  }
};

struct Classifier : kiln::Module {
  QuantDense l1, l2;
  kiln::nn::FakeQuant q_in, q_hidden, q_out;
  bool quantize;
  explicit Classifier(bool quantize)
      : Module("classifier"),
        l1(features, hidden, quantize),
        l2(hidden, classes, quantize),
        q_in({.ema_decay = 0.99}),
        q_hidden({.ema_decay = 0.99}),
        q_out({.ema_decay = 0.99}),
        quantize(quantize) {
    add_module("l1", l1);
    add_module("l2", l2);
    add_module("q_in", q_in);
    add_module("q_hidden", q_hidden);
    add_module("q_out", q_out);
  }
  Tensor operator()(const Tensor& x) {
    if (!quantize) return l2(kiln::relu(l1(x)));
    return q_out(l2(q_hidden(kiln::relu(l1(q_in(x))))));
  }
};

/// A fixed random linear teacher labels normal inputs with one of four classes.
std::pair<Tensor, Tensor> make_data(std::int64_t n, std::uint64_t seed) {
  const Tensor x = kiln::random::normal({n, features}, 0.0, 1.0, seed);
  const Tensor teacher = kiln::random::normal({features, classes}, 0.0, 1.0, 1001);
  return {x, kiln::cast(kiln::argmax(kiln::matmul(x, teacher), 1), kiln::i32)};
}

double accuracy(Classifier& model, const Tensor& x, const Tensor& labels) {
  kiln::nn::LearningPhaseScope inference(false);
  const Tensor predicted = kiln::cast(kiln::argmax(model(x), 1), kiln::i32);
  return kiln::mean(kiln::cast(predicted == labels, kiln::f32)).item<float>();
}

std::unique_ptr<Classifier> train(bool quantize, const Tensor& x, const Tensor& y) {
  auto model = std::make_unique<Classifier>(quantize);
  kiln::optim::Adam opt({.learning_rate = 0.01});
  kiln::train::fit(*model, opt, kiln::nn::losses::sparse_categorical_crossentropy_from_logits, x, y,
                   {.epochs = 30, .batch_size = 64, .verbose = 0});
  return model;
}

// ------------------------------------------------------------------ int8 export

/// The tensors of a grid, under `name`: its scale and zero point (8 bits, full range).
void put_grid(std::map<std::string, Tensor>& file, const std::string& name,
              const kiln::QuantizationParams& p) {
  file[name + "/scale"] = p.scale;
  file[name + "/zero_point"] = p.zero_point;
}

/// The grid saved by put_grid: levels over the zero point's whole 8-bit range.
kiln::QuantizationParams get_grid(std::map<std::string, Tensor>& file, const std::string& name) {
  const Tensor zero_point = file.at(name + "/zero_point");
  const bool is_signed = zero_point.dtype() == kiln::i8;
  return {file.at(name + "/scale"), zero_point, is_signed ? -128 : 0, is_signed ? 127 : 255};
}

/// The trained quantized model as the file an int8 runtime reads: each kernel as i8 levels on
/// the grid fake quantization trained it on (per output channel), biases in f32, and the
/// activation grids of the FakeQuant layers (u8).
std::map<std::string, Tensor> int8_export(Classifier& model) {
  std::map<std::string, Tensor> file;
  for (auto [name, layer] : {std::pair{"l1", &model.l1}, std::pair{"l2", &model.l2}}) {
    const Tensor w = layer->kernel.value();
    const kiln::QuantizationParams grid =
        kiln::quantization_params(kiln::min(w, {0}), kiln::max(w, {0}), {.dtype = kiln::i8});
    file[std::string(name) + "/kernel"] = kiln::quantize(w, grid);
    put_grid(file, std::string(name) + "/kernel", grid);
    file[std::string(name) + "/bias"] = layer->bias.value();
  }
  for (auto [name, layer] : {std::pair{"q_in", &model.q_in}, std::pair{"q_hidden", &model.q_hidden},
                             std::pair{"q_out", &model.q_out}})
    put_grid(
        file, name,
        kiln::quantization_params(layer->min().value(), layer->max().value(), {.dtype = kiln::u8}));
  return file;
}

/// Inference from the int8 file: activations rounded to their u8 grids, kernels dequantized.
Tensor int8_forward(std::map<std::string, Tensor>& file, const Tensor& x) {
  const auto on_grid = [&](const Tensor& t, const char* name) {
    const kiln::QuantizationParams grid = get_grid(file, name);
    return kiln::dequantize(kiln::quantize(t, grid), grid);
  };
  const auto dense = [&](const Tensor& t, const std::string& name) {
    const Tensor kernel =
        kiln::dequantize(file.at(name + "/kernel"), get_grid(file, name + "/kernel"));
    return kiln::matmul(t, kernel) + file.at(name + "/bias");
  };
  const Tensor h = on_grid(kiln::relu(dense(on_grid(x, "q_in"), "l1")), "q_hidden");
  return on_grid(dense(h, "l2"), "q_out");
}

}  // namespace

int main() {
  const auto [x, y] = make_data(4096, 1);
  const auto [x_test, y_test] = make_data(1024, 2);
  const auto float_model = train(false, x, y);
  const auto quantized_model = train(true, x, y);
  const double float_accuracy = accuracy(*float_model, x_test, y_test);
  const double quantized_accuracy = accuracy(*quantized_model, x_test, y_test);
  std::printf(
      "test accuracy: float %.2f%%, 8-bit fake-quantized %.2f%% (difference %+.2f points)\n",
      100 * float_accuracy, 100 * quantized_accuracy, 100 * (quantized_accuracy - float_accuracy));
  int status = 0;
  if (quantized_accuracy < float_accuracy - 0.01) {
    std::printf("the quantized model is more than one point behind\n");
    status = 1;
  }

  // Export, read back, and compare with the fake-quantized model on the test inputs.
  const auto path = std::filesystem::temp_directory_path() / "kiln_qat_int8.safetensors";
  kiln::io::save_safetensors(path, int8_export(*quantized_model));
  auto file = kiln::io::load_safetensors(path);
  std::filesystem::remove(path);
  std::int64_t int8_bytes = 0, float_bytes = 0;
  for (const auto& [name, t] : file)
    if (name.ends_with("/kernel")) {
      int8_bytes += t.size();
      float_bytes += 4 * t.size();
    }
  const Tensor fake_quantized = [&] {
    kiln::nn::LearningPhaseScope inference(false);
    return (*quantized_model)(x_test);
  }();
  const Tensor from_int8 = int8_forward(file, x_test);
  const float difference = kiln::max(kiln::abs(from_int8 - fake_quantized)).item<float>();
  std::printf(
      "int8 export: kernels in %lld bytes (f32: %lld); on the %lld test inputs its outputs "
      "differ from the fake-quantized model's by at most %g\n",
      static_cast<long long>(int8_bytes), static_cast<long long>(float_bytes),
      static_cast<long long>(x_test.dim(0)), static_cast<double>(difference));
  if (!(difference <= 1e-5f)) {
    std::printf("the int8 model does not match the fake-quantized one\n");
    status = 1;
  }
  return status;
}

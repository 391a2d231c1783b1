// Quantization-aware training (docs/guide/embeddings.md): the same small classifier trained
// twice on a generated task, once in floating point and once with 8-bit fake quantization of
// its weights (per output channel, on each weight's own range) and of its activations
// (nn::FakeQuant, moving-average ranges). Prints both test accuracies; exits 1 when the
// quantized model is more than one point behind the float one.
#include <kiln/kiln.hpp>

#include <cstdio>

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

double train(bool quantize, const Tensor& x, const Tensor& y, const Tensor& x_test,
             const Tensor& y_test) {
  Classifier model(quantize);
  kiln::optim::Adam opt({.learning_rate = 0.01});
  kiln::train::fit(model, opt, kiln::nn::losses::sparse_categorical_crossentropy_from_logits, x,
                   y, {.epochs = 30, .batch_size = 64, .verbose = 0});
  return accuracy(model, x_test, y_test);
}

}  // namespace

int main() {
  const auto [x, y] = make_data(4096, 1);
  const auto [x_test, y_test] = make_data(1024, 2);
  const double float_accuracy = train(false, x, y, x_test, y_test);
  const double quantized_accuracy = train(true, x, y, x_test, y_test);
  std::printf("test accuracy: float %.2f%%, 8-bit fake-quantized %.2f%% (difference %+.2f points)\n",
              100 * float_accuracy, 100 * quantized_accuracy,
              100 * (quantized_accuracy - float_accuracy));
  if (quantized_accuracy < float_accuracy - 0.01) {
    std::printf("the quantized model is more than one point behind\n");
    return 1;
  }
  return 0;
}

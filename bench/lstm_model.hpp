#pragma once
// The recurrent layer and train step that the LSTM and GRU benchmarks time (bench_scaling.cpp,
// bench_lstm_sizes.cpp, bench_distributed.cpp): one nn::LSTM or nn::GRU, the MSE of its last h
// against a target, plain SGD.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <kiln/kiln.hpp>

namespace kiln::bench {

/// The layer of one form with the train step's optimizer. Weights come from a seed (set by
/// create_weights), so every model built with the same seed starts from the same ones.
/// Layer is nn::LSTM or nn::GRU, Options its options struct.
template <class Layer, class Options>
struct RecurrentModel : Module {
  /// How a benchmark form applies its layer to x (a hook for wrappers such as a checkpointed
  /// call).
  using Apply = std::function<Tensor(Layer&, const Tensor&)>;

  Layer layer;
  optim::SGD opt;
  Apply apply;
  std::vector<Tensor> initial;  // the weights before any update (restore() puts them back)

  RecurrentModel(
      std::int64_t units, const Options& options, double learning_rate,
      Apply how = [](Layer& l, const Tensor& x) { return l(x); })
      : Module("model"),
        layer(units, options),
        opt({.learning_rate = learning_rate}),
        apply(std::move(how)) {
    add_module("layer", layer);
  }

  Tensor forward(const Tensor& x) { return apply(layer, x); }

  /// One train step: the loss before the update.
  Tensor step(const Tensor& x, const Tensor& y) {
    std::vector<Variable> vars;
    std::vector<Tensor> grads;
    Tensor loss;
    {
      GradientTape tape;
      loss = nn::losses::mean_squared_error(y, forward(x));
      vars = trainable_variables();
      grads = tape.gradient(loss, vars);
    }
    opt.apply(grads, vars);
    return loss;
  }

  /// Creates the weights (a first call on x) from `seed`, and keeps them for restore().
  void create_weights(const Tensor& x, std::uint64_t seed) {
    random::set_global_seed(seed);
    forward(x);
    for (const auto& var : trainable_variables()) initial.push_back(var.value());
  }

  void restore() {
    const auto vars = trainable_variables();
    for (std::size_t i = 0; i < vars.size(); ++i) vars[i].assign(initial[i]);
  }
};

using LstmModel = RecurrentModel<nn::LSTM, nn::LSTMOptions>;
using LstmApply = LstmModel::Apply;
using GruModel = RecurrentModel<nn::GRU, nn::GRUOptions>;

}  // namespace kiln::bench

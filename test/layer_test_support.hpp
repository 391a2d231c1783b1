#pragma once
// Helpers shared by the layer tests (test_layers.cpp, test_recurrent_scan.cpp,
// test_masking.cpp).

#include <catch2/catch.hpp>

#include <kiln/kiln.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::test {

/// The largest absolute difference between two tensors of one shape, in f64 (0 when empty).
inline double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.shape() == b.shape());
  if (a.size() == 0) return 0;
  return kiln::max(kiln::abs(kiln::cast(a, kiln::f64) - kiln::cast(b, kiln::f64))).item<double>();
}

/// Each variable's name, in order.
inline std::vector<std::string> names_of(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name());
  return out;
}

/// FunctionOptions with this name and input_signature.
inline FunctionOptions options_named(std::string name, std::vector<TensorSpec> specs) {
  FunctionOptions o;
  o.name = std::move(name);
  o.input_signature = std::move(specs);
  return o;
}

/// A scalar loss that weighs every output differently, so each output's gradient matters.
inline Tensor weighted_loss(const std::vector<Tensor>& outputs) {
  Tensor loss;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor term = kiln::sum(kiln::square(outputs[i])) * static_cast<double>(i + 1) +
                        kiln::sum(kiln::sin(outputs[i]));
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

/// The three sequence layers with what the generic layer tests need about them: the layer and
/// options types, the number of state tensors, and a name for messages.
struct LSTMKind {
  using Layer = nn::LSTM;
  using Options = nn::LSTMOptions;
  static constexpr std::size_t states = 2;
  static constexpr const char* name = "LSTM";
};
struct GRUKind {
  using Layer = nn::GRU;
  using Options = nn::GRUOptions;
  static constexpr std::size_t states = 1;
  static constexpr const char* name = "GRU";
};
struct SimpleRNNKind {
  using Layer = nn::SimpleRNN;
  using Options = nn::SimpleRNNOptions;
  static constexpr std::size_t states = 1;
  static constexpr const char* name = "SimpleRNN";
};

}  // namespace kiln::test

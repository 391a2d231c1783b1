#pragma once
// The ONNX conformance test's mapping table (test_onnx_conformance.cpp): one entry per ONNX op
// type, a function of a node test case's inputs and attributes that computes its outputs with
// kiln's public ops. The table is split by op family over onnx_conformance_ops_*.cpp.

#include <kiln/kiln.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace onnx_conformance {

using kiln::Tensor;
using Json = nlohmann::json;

/// Thrown by a mapping function that decides a case's attributes or inputs are outside what
/// the mapping (or kiln) supports: the case "does not map" (counted apart from failures).
struct NotMapped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One node test case as the mapping functions see it.
struct Case {
  std::string name;
  std::int64_t opset = 0;
  const Json* attributes = nullptr;
  /// The case's folder of .npy files (manifest paths are relative to it).
  std::filesystem::path root;
  /// One per node input; undefined for an omitted optional input.
  std::vector<Tensor> inputs;
  /// Which outputs the case checks (false for an omitted optional output).
  std::vector<bool> outputs;
  /// Per output, set by a mapping where ONNX's spec leaves some results undefined (Cast from a
  /// float to an integer out of its range, or NaN to a float without NaN): a bool tensor of
  /// the output's shape, true where the element is not compared. Undefined for the others.
  mutable std::vector<Tensor> unspecified;

  bool has(std::size_t i) const { return i < inputs.size() && inputs[i].defined(); }
  const Tensor& in(std::size_t i) const {
    if (!has(i)) throw NotMapped(fmt::format("input {} is required", i));
    return inputs[i];
  }
  /// Whether output i is checked.
  bool wants(std::size_t i) const { return i < outputs.size() && outputs[i]; }

  bool has_attr(const std::string& n) const { return attributes->contains(n); }
  const Json& attr(const std::string& n) const;
  std::int64_t i(const std::string& n, std::int64_t fallback) const;
  double f(const std::string& n, double fallback) const;
  std::string s(const std::string& n, const std::string& fallback) const;
  std::vector<std::int64_t> ints(const std::string& n,
                                 const std::vector<std::int64_t>& fallback = {}) const;
  std::vector<double> floats(const std::string& n) const;
  /// A tensor attribute (an .npy file).
  Tensor t(const std::string& n) const;
  /// Throws NotMapped if the case sets an attribute outside `known`.
  void only(std::initializer_list<const char*> known) const;
};

using Outputs = std::vector<Tensor>;
using OpFn = std::function<Outputs(const Case&)>;
using OpTable = std::map<std::string, OpFn>;

/// Unary and binary elementwise ops, logic, comparisons, activations, casts.
void add_elementwise_ops(OpTable& table);
/// Shape, data movement, indexing, scans, reductions.
void add_shape_ops(OpTable& table);
/// Linear algebra, convolution, pooling, normalization, softmax, losses, resize.
void add_nn_ops(OpTable& table);

/// Attention (opsets 23-25), RotaryEmbedding, SwiGLU, TensorScatter.
void add_attention_ops(OpTable& table);
/// RNN, GRU, LSTM.
void add_recurrent_ops(OpTable& table);
/// GridSample.
void add_sampling_ops(OpTable& table);
/// The preview domains' ops, keyed "domain.OpType": Adagrad, Adam, Momentum, FlexAttention.
void add_preview_ops(OpTable& table);

/// The whole table.
inline OpTable op_table() {
  OpTable table;
  add_elementwise_ops(table);
  add_shape_ops(table);
  add_nn_ops(table);
  add_attention_ops(table);
  add_recurrent_ops(table);
  add_sampling_ops(table);
  add_preview_ops(table);
  return table;
}

// ------------------------------------------------------------------ helpers for the mappings

/// The values of an integer (i32/i64) tensor as int64 (a shape, axes, pads...).
std::vector<std::int64_t> int_values(const Tensor& t);
/// The single value of a one-element tensor of any numeric dtype, as double.
double scalar_value(const Tensor& t);
/// Axis in [0, rank).
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank);
/// A kiln dtype from an ONNX TensorProto element type number; NotMapped for the others.
kiln::DType dtype_from_onnx(std::int64_t type);
/// Moves the last axis of x to position `axis` (in [0, rank)).
Tensor move_last_axis_to(const Tensor& x, std::int64_t axis);

}  // namespace onnx_conformance

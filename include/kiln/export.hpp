#pragma once
/// @file export.hpp
/// Exported functions: a traced, optimized graph with its variables in one file, run by a
/// program that has none of the code that built it (TensorFlow's SavedModel for one signature).
///
/// `kiln::export_function(concrete_function, "model.kiln")` writes the concrete function's
/// graph as it runs (after every pass: fused kernels, hoisted loops) and the current values of
/// the variables it reads or assigns. `kiln::load_function("model.kiln")` rebuilds the graph,
/// creates the variables with those values and compiles the same plan, so a call gives the
/// same results as the original's, bit for bit, at the same speed. The variables stay
/// variables: `loaded.variable("dense/kernel").assign(...)` changes what later calls compute,
/// and an exported train step that assigns its variables keeps training them.
///
/// The file is a safetensors file (so any safetensors tool lists its tensors): tensors
/// `variables/<i>` and `constants/<i>`, and in its metadata the graph as JSON
/// (`kiln.graph`), the format and version, and a checksum of the graph text. A truncated file,
/// an edited graph, a version from the future, an unknown primitive or a graph whose structure
/// does not hold together (inputs out of order, wrong counts, shapes that disagree with the
/// tensors) is a kiln::Error naming the file and the problem. The loader checks the graph's
/// structure and integrity; it does not re-derive every primitive's output shape, so a file
/// crafted on purpose, checksum included, must be trusted like code, as with any model format
/// that carries a graph.

#include <filesystem>
#include <string>
#include <vector>

#include "kiln/function.hpp"
#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln {

/// The version of the export format this kiln writes; it reads this version and older.
inline constexpr int function_format_version = 1;

/// Writes `function` (from Function::get_concrete_function) to `path` atomically. A variable
/// of the function that no longer exists is a kiln::Error.
void export_function(const ConcreteFunction& function, const std::filesystem::path& path);

/// A function loaded from an export file: its graph, compiled, and its own variables.
/// Cheap to copy; copies share the compiled graph and the variables. Thread-safe to call.
class LoadedFunction {
 public:
  /// Runs it on one tensor per argument of the traced signature, in order; returns every
  /// output, flattened in order. Arguments must have the signature's dtypes and shapes
  /// (dynamic dims, -1 in input_signature(), may have any size, the same one where the trace
  /// shared a dim). Not inside a kiln::function trace, and not while a GradientTape records
  /// (a loaded graph has no gradient): both are kiln::Errors.
  std::vector<Tensor> call(const std::vector<Tensor>& args) const;
  template <class... Ts>
  std::vector<Tensor> operator()(const Ts&... args) const {
    return call(std::vector<Tensor>{args...});
  }

  /// The function's name when it was exported.
  const std::string& name() const;
  /// Dtype and shape of each argument (dynamic dims as -1).
  const std::vector<TensorSpec>& input_signature() const;
  /// Dtype and shape of each output (dynamic dims as -1).
  const std::vector<TensorSpec>& output_signature() const;
  /// Its variables, in the order of the file; their names are those of the originals.
  const std::vector<Variable>& variables() const;
  /// The variable named `name`; kiln::Error listing the names when there is none.
  Variable variable(const std::string& name) const;
  /// The graph it runs.
  Graph graph() const;

  struct Impl;
  explicit LoadedFunction(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

/// Loads an export file written by export_function (see the file comment for what is checked).
LoadedFunction load_function(const std::filesystem::path& path);

/// The ONNX operator set export_onnx writes (ai.onnx, opset 17; IR version 8).
inline constexpr int onnx_opset = 17;

/// Writes `function` as an ONNX model to `path` atomically, checked by the ONNX checker first.
/// Inputs are `input_<i>` (dynamic dims as dim_params `d<k>`), outputs `output_<i>`; variables
/// become initializers holding their current values (ONNX models have no variables). Fused
/// LSTM and GRU recurrences become ONNX Scan loops over the step's math; fused elementwise
/// kernels are written as their operations. A function that assigns variables (a train step),
/// draws random numbers, computes gradients, or holds kiln's scan/while_loop/cond is a
/// kiln::Error naming the node and the reason, as is a kiln built without libonnx-dev.
void export_onnx(const ConcreteFunction& function, const std::filesystem::path& path);

}  // namespace kiln

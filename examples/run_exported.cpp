// Runs an exported function (kiln::export_function) on inputs read from .npy files and prints
// its outputs: a loader that knows nothing of the model, only the file.
// Usage: run_exported MODEL.kiln INPUT.npy... [--expect OUTPUT.npy]
// With --expect, exits 1 unless the first output equals the given array bit for bit.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: run_exported MODEL.kiln INPUT.npy... [--expect OUTPUT.npy]\n");
    return 2;
  }
  const kiln::LoadedFunction function = kiln::load_function(argv[1]);
  std::vector<kiln::Tensor> inputs;
  const char* expect = nullptr;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--expect" && i + 1 < argc)
      expect = argv[++i];
    else
      inputs.push_back(kiln::io::load_npy(argv[i]));
  }
  fmt::print("loaded '{}': {} inputs, {} outputs, {} variables, {} graph nodes\n", function.name(),
             function.input_signature().size(), function.output_signature().size(),
             function.variables().size(), function.graph().num_nodes());
  const std::vector<kiln::Tensor> outputs = function.call(inputs);
  for (std::size_t i = 0; i < outputs.size(); ++i)
    fmt::print("output {}: {} {::.6f}\n", i, outputs[i].shape(),
               kiln::cast(outputs[i], kiln::f64).to_vector<double>());
  if (expect == nullptr) return 0;
  const bool same = kiln::all(kiln::equal(outputs.at(0), kiln::io::load_npy(expect))).item<bool>();
  fmt::print("same as {}: {}\n", expect, same);
  return same ? 0 : 1;
}

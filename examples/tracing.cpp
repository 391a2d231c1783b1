// docs/guide/function.md and docs/guide/eager-vs-traced.md: one function run eagerly and
// traced, a dynamic batch dim, the graph listing, and the graph written as Graphviz DOT (and
// rendered to SVG when `dot` is on PATH).
//   build/examples/tracing [out.dot]     (default: kiln-graph.dot in the current folder)
#include <cstdlib>
#include <fstream>
#include <string>

#include <kiln/kiln.hpp>

int main(int argc, char** argv) {
  const std::string dot_path = argc > 1 ? argv[1] : "kiln-graph.dot";
  const kiln::Tensor w = kiln::random::normal({3, 4}, 0.0, 1.0, /*seed*/ 42);
  const auto layer = [&](const kiln::Tensor& x) {
    return kiln::relu(kiln::matmul(x, w) * 2.f + 1.f);
  };

  // Eager: ops run at once. Traced: the first call records a graph, later calls replay it.
  auto traced =
      kiln::function(layer, {.name = "layer", .input_signature = {kiln::TensorSpec({-1, 3})}});
  for (std::int64_t batch = 1; batch <= 16; ++batch) {
    const kiln::Tensor x = kiln::random::normal({batch, 3}, 0.0, 1.0, /*seed*/ 1);
    const float diff = kiln::max(kiln::abs(layer(x) - traced(x))).item<float>();
    if (diff > 1e-5f) {
      fmt::print("eager and traced results differ by {}\n", diff);
      return 1;
    }
  }
  fmt::print("16 batch sizes, eager and traced agree; traces: {}\n", traced.tracing_count());

  const kiln::Graph graph = traced.get_concrete_function(kiln::ones({2, 3})).graph();
  fmt::print("{} nodes:\n{}", graph.num_nodes(), graph.to_string());

  std::ofstream(dot_path) << graph.to_dot();
  fmt::print("wrote {}\n", dot_path);
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    fmt::print("Graphviz `dot` is not on PATH: skipping the SVG rendering\n");
    return 0;
  }
  const std::string svg_path = dot_path + ".svg";
  const std::string command = "dot -Tsvg '" + dot_path + "' -o '" + svg_path + "'";
  if (std::system(command.c_str()) != 0) {
    fmt::print("dot failed on {}\n", dot_path);
    return 1;
  }
  fmt::print("rendered {}\n", svg_path);
  return 0;
}

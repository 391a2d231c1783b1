// docs/guide/memory.md: the counters that prove nothing grows, for a cached function called
// with changing batch sizes and for weights loaded again and again. Exit status 1 if anything
// grew.
#include <filesystem>

#include <kiln/kiln.hpp>

namespace {

struct Model : kiln::Module {
  kiln::nn::LSTM lstm{16};
  kiln::nn::Dense out{1};
  Model() : Module("model") {
    add_module("lstm", lstm);
    add_module("out", out);
  }
  kiln::Tensor operator()(const kiln::Tensor& x) { return out(lstm(x)); }
};

struct Snapshot {
  kiln::MemoryStats stats;
  std::size_t variables;
  int traces;
};

}  // namespace

int main() {
  Model model;
  auto predict =
      kiln::function([&](const kiln::Tensor& x) { return model(x); },
                     {.name = "predict", .input_signature = {kiln::TensorSpec({-1, 6, 4})}});
  const auto path = std::filesystem::temp_directory_path() / "kiln-memory-example.safetensors";
  const auto snapshot = [&] {
    return Snapshot{kiln::memory_stats(), kiln::global_variables().size(), predict.tracing_count()};
  };
  const auto print = [](const char* label, const Snapshot& s) {
    fmt::print(
        "{:<8} traces {} variables {} cached functions {} graph nodes {} live tensors {} "
        "live bytes {}\n",
        label, s.traces, s.variables, s.stats.cached_functions, s.stats.live_graph_nodes,
        s.stats.live_tensors, s.stats.live_bytes);
  };

  predict(kiln::ones({8, 6, 4}));  // warm-up: builds the layers, traces once
  kiln::save_weights(model, path);
  const Snapshot before = snapshot();
  print("before", before);
  for (std::int64_t i = 0; i < 500; ++i) {
    predict(kiln::ones({1 + i % 32, 6, 4}));
    if (i % 5 == 0) kiln::load_weights(model, path);
  }
  const Snapshot after = snapshot();
  print("after", after);
  std::filesystem::remove(path);

  const bool steady = after.traces == before.traces && after.variables == before.variables &&
                      after.stats.live_bytes == before.stats.live_bytes &&
                      after.stats.live_tensors == before.stats.live_tensors &&
                      after.stats.live_graph_nodes == before.stats.live_graph_nodes &&
                      after.stats.cached_functions == before.stats.cached_functions;
  fmt::print("{}\n", steady ? "Nothing grew." : "Something grew!");
  return steady ? 0 : 1;
}

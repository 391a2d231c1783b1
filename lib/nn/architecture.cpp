// Architecture files: the module registry, to_json and from_json.
#include "kiln/nn/architecture.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/fail.hpp"
#include "io/atomic_file.hpp"
#include "io/mapped_file.hpp"
#include "jit/export_format.hpp"
#include "kiln/nn/attention.hpp"
#include "kiln/nn/bidirectional.hpp"
#include "kiln/nn/conv.hpp"
#include "kiln/nn/dense.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/fake_quant.hpp"
#include "kiln/nn/masking.hpp"
#include "kiln/nn/normalization.hpp"
#include "kiln/nn/pooling.hpp"
#include "kiln/nn/recurrent.hpp"
#include "kiln/nn/reshaping.hpp"
#include "kiln/nn/sequential.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view to_json_op = "nn.to_json";
constexpr std::string_view from_json_op = "nn.from_json";
constexpr std::string_view format_name = "kiln.architecture";
/// Far larger than any architecture (a few hundred bytes per layer); a bigger file is not one.
constexpr std::uint64_t max_architecture_bytes = std::uint64_t{64} << 20;

struct Entry {
  std::string name;
  detail::ToConfig to_config;
  detail::FromConfig from_config;
};

struct ModuleRegistry {
  std::mutex mutex;
  std::map<std::string, Entry, std::less<>> by_name;
  std::map<std::type_index, std::string> names;

  void add(std::string name, std::type_index type, detail::ToConfig to_config,
           detail::FromConfig from_config) {
    constexpr std::string_view op = "nn.register_module";
    if (name.empty()) kiln::detail::fail(op, "the name is empty");
    std::lock_guard lock(mutex);
    if (by_name.contains(name)) kiln::detail::fail(op, "the name '{}' is registered already", name);
    if (const auto it = names.find(type); it != names.end())
      kiln::detail::fail(op, "{} is registered already, as '{}'", detail::type_name(type),
                         it->second);
    names.emplace(type, name);
    by_name.emplace(name, Entry{name, std::move(to_config), std::move(from_config)});
  }
};

template <class M>
void add_builtin(ModuleRegistry& registry, std::string name) {
  registry.add(
      std::move(name), typeid(M),
      [](const Module& module) { return static_cast<const M&>(module).config(); },
      [](const Config& config) -> std::unique_ptr<Module> {
        return std::make_unique<M>(M::from_config(config));
      });
}

ModuleRegistry& registry() {
  static ModuleRegistry* instance = [] {
    auto* r = new ModuleRegistry;  // never destroyed: static registrars may outlive main
    add_builtin<Dense>(*r, "Dense");
    add_builtin<Embedding>(*r, "Embedding");
    add_builtin<LSTMCell>(*r, "LSTMCell");
    add_builtin<LSTM>(*r, "LSTM");
    add_builtin<GRU>(*r, "GRU");
    add_builtin<SimpleRNN>(*r, "SimpleRNN");
    add_builtin<Bidirectional>(*r, "Bidirectional");
    add_builtin<Dropout>(*r, "Dropout");
    add_builtin<Masking>(*r, "Masking");
    add_builtin<FakeQuant>(*r, "FakeQuant");
    add_builtin<Conv1D>(*r, "Conv1D");
    add_builtin<Conv2D>(*r, "Conv2D");
    add_builtin<Conv2DTranspose>(*r, "Conv2DTranspose");
    add_builtin<MaxPooling1D>(*r, "MaxPooling1D");
    add_builtin<MaxPooling2D>(*r, "MaxPooling2D");
    add_builtin<AveragePooling1D>(*r, "AveragePooling1D");
    add_builtin<AveragePooling2D>(*r, "AveragePooling2D");
    add_builtin<GlobalAveragePooling1D>(*r, "GlobalAveragePooling1D");
    add_builtin<GlobalAveragePooling2D>(*r, "GlobalAveragePooling2D");
    add_builtin<GlobalMaxPooling1D>(*r, "GlobalMaxPooling1D");
    add_builtin<GlobalMaxPooling2D>(*r, "GlobalMaxPooling2D");
    add_builtin<Flatten>(*r, "Flatten");
    add_builtin<Reshape>(*r, "Reshape");
    add_builtin<ActivationLayer>(*r, "Activation");
    add_builtin<LayerNormalization>(*r, "LayerNormalization");
    add_builtin<BatchNormalization>(*r, "BatchNormalization");
    add_builtin<MultiHeadAttention>(*r, "MultiHeadAttention");
    add_builtin<Sequential>(*r, "Sequential");
    return r;
  }();
  return *instance;
}

const Entry* find_entry(std::string_view name) {
  ModuleRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : &it->second;  // entries are never removed
}

std::string describe_path(const Module& module) {
  const std::string path = module.path();
  return path.empty() ? "the module" : "'" + path + "'";
}

}  // namespace

namespace detail {

void register_module(std::string name, std::type_index type, ToConfig to_config,
                     FromConfig from_config) {
  if (!to_config || !from_config)
    kiln::detail::fail("nn.register_module", "'{}': empty functions", name);
  registry().add(std::move(name), type, std::move(to_config), std::move(from_config));
}

std::string registered_name(std::type_index type) {
  ModuleRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.names.find(type);
  return it == r.names.end() ? std::string() : it->second;
}

std::string type_name(std::type_index type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : type.name();
  std::free(demangled);
  return out;
}

void wrong_module_type(const Module& module, std::type_index wanted, std::string_view source) {
  const std::string held = registered_name(typeid(module));
  kiln::detail::fail(from_json_op, "{}: the file holds a {}, not a {}", source,
                     held.empty() ? type_name(typeid(module)) : held, type_name(wanted));
}

}  // namespace detail

Config module_config(const Module& module) {
  const std::type_index type = typeid(module);
  const std::string name = detail::registered_name(type);
  if (name.empty())
    kiln::detail::fail(to_json_op,
                       "{} is a {}, which has no registered name; give it config() and "
                       "from_config() and add KILN_REGISTER_MODULE({}); at namespace scope",
                       describe_path(module), detail::type_name(type), detail::type_name(type));
  const Entry* entry = find_entry(name);
  Config settings;
  try {
    settings = entry->to_config(module);
  } catch (const Error& e) {
    kiln::detail::fail(to_json_op, "{} ({}): {}", describe_path(module), name, e.what());
  }
  Config spec("module");
  spec.set("class_name", name);
  spec.set("config", settings);
  return spec;
}

std::unique_ptr<Module> module_from_config(const Config& spec) {
  spec.check_keys({"class_name", "config"});
  const std::string name = spec.get_string("class_name");
  const Entry* entry = find_entry(name);
  if (entry == nullptr)
    kiln::detail::fail(from_json_op,
                       "{}: unknown class_name '{}' (not a built-in layer, and no module "
                       "registered under that name in this program: KILN_REGISTER_MODULE)",
                       spec.where(), name);
  const Config settings = spec.get_config("config");
  try {
    return entry->from_config(settings);
  } catch (const Error& e) {
    // Messages from the Config getters already say where; a constructor's does not.
    const std::string_view message = e.what();
    if (message.find(settings.where()) != std::string_view::npos) throw;
    kiln::detail::fail(from_json_op, "{} ({}): {}", settings.where(), name, message);
  }
}

std::unique_ptr<Layer> layer_from_config(const Config& spec) {
  std::unique_ptr<Module> module = module_from_config(spec);
  if (dynamic_cast<Layer*>(module.get()) == nullptr)
    kiln::detail::fail(from_json_op,
                       "{}: a {} is not an nn::Layer (a one-tensor forward call), which is what "
                       "this place holds",
                       spec.where(), spec.get_string("class_name"));
  return std::unique_ptr<Layer>(static_cast<Layer*>(module.release()));
}

std::string to_json(const Module& module, int indent) {
  Config document("architecture");
  document.set("format", format_name);
  document.set("version", architecture_format_version);
  document.set("module", module_config(module));
  if (const auto* layer = dynamic_cast<const Layer*>(&module); layer && layer->built_input()) {
    const InputSpec& spec = *layer->built_input();
    document.set("built_input",
                 Config()
                     .set("shape", std::vector<std::int64_t>(spec.shape.begin(), spec.shape.end()))
                     .set("dtype", dtype_name(spec.dtype)));
  }
  return document.to_json(indent);
}

std::unique_ptr<Module> from_json(std::string_view text, std::string_view source) {
  const Config document = Config::from_json(text, source);
  if (!document.has("format") || document.is_null("format") ||
      document.get_string("format") != format_name)
    kiln::detail::fail(from_json_op,
                       "{}: not a kiln architecture file (its \"format\" is not "
                       "\"{}\")",
                       source, format_name);
  const std::int64_t version = document.get_int("version");
  if (version > architecture_format_version)
    kiln::detail::fail(from_json_op,
                       "{}: written in architecture format version {}, by a newer kiln; this one "
                       "reads versions 1 to {}",
                       source, version, architecture_format_version);
  if (version < 1)
    kiln::detail::fail(from_json_op, "{}: invalid format version {}", source, version);
  document.check_keys({"format", "version", "module", "built_input"});
  std::unique_ptr<Module> module = module_from_config(document.get_config("module"));
  if (document.has("built_input")) {
    const Config input = document.get_config("built_input");
    input.check_keys({"shape", "dtype"});
    auto* layer = dynamic_cast<Layer*>(module.get());
    if (layer == nullptr) input.fail("the module is not an nn::Layer, so it has no built input");
    const std::vector<std::int64_t> dims = input.get_ints("shape");
    const std::string dtype_text = input.get_string("dtype");
    const std::optional<DType> dtype = kiln::detail::dtype_named(dtype_text);
    if (!dtype) input.fail("'dtype' must be f32, f64, i32, i64 or bool, got '" + dtype_text + "'");
    layer->build(Shape(dims), *dtype);
  }
  return module;
}

void save_architecture(const Module& module, const std::filesystem::path& path) {
  const std::string text = to_json(module) + "\n";
  io::detail::write_file_atomically(
      path, "nn.save_architecture",
      std::span(reinterpret_cast<const std::byte*>(text.data()), text.size()));
}

std::unique_ptr<Module> load_architecture(const std::filesystem::path& path) {
  constexpr std::string_view op = "nn.load_architecture";
  const io::detail::MappedFile file(path, std::string(op));
  if (file.bytes().size() > max_architecture_bytes)
    kiln::detail::fail(op, "{}: {} bytes is too large for an architecture file (limit {})",
                       path.string(), file.bytes().size(), max_architecture_bytes);
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()),
                              file.bytes().size());
  return from_json(text, path.string());
}

}  // namespace kiln::nn

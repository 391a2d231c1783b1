#pragma once
/// @file nn/architecture.hpp
/// Architecture files: a model's structure as JSON, rebuilt by a program that has none of its
/// code (Keras's `to_json` / `model_from_json`). Weights are not part of it: save them with
/// kiln::save_weights and load them into the rebuilt model.
///
/// A file is an object {"format": "kiln.architecture", "version": 1, "module": {"class_name":
/// "Sequential", "config": {...}}, "built_input": {"shape": [-1, 5, 10], "dtype": "f32"}}. Each
/// module is stored as its class name and its config() (layers nest: a Sequential's config
/// holds its layers'), initializers as their name and settings. "built_input" is the root
/// layer's Layer::built_input(), present once it has been built or called; from_json then
/// builds the new model for it, so it has every variable at once and takes load_weights
/// before its first call.
///
/// Every built-in layer is known. A user-written module joins with one line at namespace scope,
/// `KILN_REGISTER_MODULE(MyBlock);`, and two members: `kiln::Config config() const` (its
/// settings; kiln::Layer::base_config() gives a layer's name) and
/// `static MyBlock from_config(const kiln::Config&)`. The module's constructor makes its
/// children, as it does in the program that wrote the file, so their paths are the same.
///
/// The round trip keeps the model: from_json(to_json(m)) has the same variable paths, shapes
/// and dtypes, and after load_weights gives the same outputs.

#include <concepts>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <utility>

#include "kiln/config.hpp"
#include "kiln/error.hpp"
#include "kiln/module.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn {

/// The version of the architecture format this kiln writes; it reads this version and older.
inline constexpr int architecture_format_version = 1;

/// The architecture file text of `module` (see the file comment). A module in the tree whose
/// type is not registered, or an initializer that a file cannot name (from_value, an
/// unregistered custom one), is a kiln::Error naming its path.
std::string to_json(const Module& module, int indent = 2);
/// The module an architecture file describes, built for its stored input when the file has
/// one. Malformed JSON, another format, a version from the future, an unknown class name, a
/// misspelt or mistyped setting are kiln::Errors naming `source` and where in the file.
std::unique_ptr<Module> from_json(std::string_view text,
                                  std::string_view source = "architecture JSON");
/// from_json, checked to be an M ("the file holds a Sequential, not ...").
template <class M>
std::unique_ptr<M> from_json(std::string_view text, std::string_view source = "architecture JSON");

/// to_json written to `path` atomically (a crash leaves the old file or the new one).
void save_architecture(const Module& module, const std::filesystem::path& path);
/// from_json of the file at `path`; messages name the file.
std::unique_ptr<Module> load_architecture(const std::filesystem::path& path);
template <class M>
std::unique_ptr<M> load_architecture(const std::filesystem::path& path);

/// One module as a file stores it: {"class_name": ..., "config": module.config()}. For a
/// user-written container's config() to store its children, and for tests.
Config module_config(const Module& module);
/// The module a module_config() result describes.
std::unique_ptr<Module> module_from_config(const Config& spec);
/// module_from_config, checked to be an nn::Layer (what Sequential holds).
std::unique_ptr<Layer> layer_from_config(const Config& spec);

namespace detail {
using ToConfig = std::function<Config(const Module&)>;
using FromConfig = std::function<std::unique_ptr<Module>(const Config&)>;
/// Registers a module type under `name`; a name or type registered twice is a kiln::Error.
void register_module(std::string name, std::type_index type, ToConfig to_config,
                     FromConfig from_config);
/// The registered name of `type`, or "" when it has none.
std::string registered_name(std::type_index type);
/// The demangled C++ name of `type`, for messages.
std::string type_name(std::type_index type);
[[noreturn]] void wrong_module_type(const Module& module, std::type_index wanted,
                                    std::string_view source);
}  // namespace detail

/// Registers the module type M under `name` so architecture files can hold it. M needs
/// `Config config() const` and `static M from_config(const Config&)`. KILN_REGISTER_MODULE
/// calls this at start-up; call it yourself to choose the name.
template <class M>
requires std::derived_from<M, Module>
bool register_module(std::string name) {
  static_assert(
      requires(const M& m) {
        { m.config() } -> std::convertible_to<Config>;
      },
      "a module type registered for architecture files needs `kiln::Config config() const`");
  static_assert(
      requires(const Config& c) {
        { M::from_config(c) } -> std::convertible_to<M>;
      },
      "a module type registered for architecture files needs `static M from_config(const "
      "kiln::Config&)`");
  detail::register_module(
      std::move(name), typeid(M),
      [](const Module& module) { return static_cast<const M&>(module).config(); },
      [](const Config& config) -> std::unique_ptr<Module> {
        return std::make_unique<M>(M::from_config(config));
      });
  return true;
}

template <class M>
std::unique_ptr<M> from_json(std::string_view text, std::string_view source) {
  std::unique_ptr<Module> module = from_json(text, source);
  if (dynamic_cast<M*>(module.get()) == nullptr)
    detail::wrong_module_type(*module, typeid(M), source);
  return std::unique_ptr<M>(static_cast<M*>(module.release()));
}

template <class M>
std::unique_ptr<M> load_architecture(const std::filesystem::path& path) {
  std::unique_ptr<Module> module = load_architecture(path);
  if (dynamic_cast<M*>(module.get()) == nullptr)
    detail::wrong_module_type(*module, typeid(M), path.string());
  return std::unique_ptr<M>(static_cast<M*>(module.release()));
}

}  // namespace kiln::nn

#define KILN_REGISTER_MODULE_CONCAT_(a, b) a##b
#define KILN_REGISTER_MODULE_NAME_(line) KILN_REGISTER_MODULE_CONCAT_(kiln_registered_module_, line)
/// Registers the module type `Type` (namespace-qualified as written) under the name `#Type`
/// for architecture files. Use it once, at namespace scope in one .cpp file.
#define KILN_REGISTER_MODULE(Type)                                          \
  [[maybe_unused]] static const bool KILN_REGISTER_MODULE_NAME_(__LINE__) = \
      ::kiln::nn::register_module<Type>(#Type)

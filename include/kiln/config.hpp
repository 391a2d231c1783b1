#pragma once
/// @file config.hpp
/// kiln::Config: the settings of an initializer or a layer as a JSON object, which is what
/// architecture files (kiln::nn::to_json) are made of.
///
/// A Config is an ordered JSON object whose values are null, booleans, integers, numbers,
/// strings, lists of integers, nested Configs and lists of Configs. The getters are typed and
/// strict: a missing key or a value of another type is a kiln::Error that names where the
/// Config came from, the key and what it holds ("[config] model.json: module.config.layers[1]
/// .config: 'units' must be an integer, got "8""), so a user-written `from_config` reads its
/// settings in one line each and still reports bad files clearly.
///
/// A Config has value semantics: copies are independent.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class Config {
 public:
  /// An empty object, whose messages say it came from `where`.
  explicit Config(std::string where = "config");
  Config(const Config& other);
  Config& operator=(const Config& other);
  Config(Config&& other) noexcept;
  Config& operator=(Config&& other) noexcept;
  ~Config();

  /// Sets `key` (replacing an earlier value; keys keep their first insertion order).
  Config& set(std::string_view key, bool value);
  Config& set(std::string_view key, int value);
  Config& set(std::string_view key, std::int64_t value);
  Config& set(std::string_view key, std::uint64_t value);
  Config& set(std::string_view key, double value);
  Config& set(std::string_view key, std::string_view value);
  Config& set(std::string_view key, const char* value);
  Config& set(std::string_view key, const std::string& value);
  Config& set(std::string_view key, const std::vector<std::int64_t>& values);
  Config& set(std::string_view key, const Config& value);
  Config& set(std::string_view key, const std::vector<Config>& values);
  /// Sets `key` to null.
  Config& set(std::string_view key, std::nullopt_t);
  /// The value, or null when empty.
  template <class T>
  Config& set(std::string_view key, const std::optional<T>& value) {
    return value ? set(key, *value) : set(key, std::nullopt);
  }

  /// Whether `key` is present (null counts as present).
  bool has(std::string_view key) const;
  /// Whether `key` is present and null.
  bool is_null(std::string_view key) const;
  /// The keys in order.
  std::vector<std::string> keys() const;

  /// The value of `key`; a missing key or another type is a kiln::Error.
  bool get_bool(std::string_view key) const;
  std::int64_t get_int(std::string_view key) const;
  std::uint64_t get_uint(std::string_view key) const;
  /// A number (integers are accepted).
  double get_double(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::vector<std::int64_t> get_ints(std::string_view key) const;
  Config get_config(std::string_view key) const;
  std::vector<Config> get_configs(std::string_view key) const;

  /// The value of `key`, or `fallback` when the key is absent or null.
  bool get_bool(std::string_view key, bool fallback) const;
  std::int64_t get_int(std::string_view key, std::int64_t fallback) const;
  double get_double(std::string_view key, double fallback) const;
  std::string get_string(std::string_view key, std::string_view fallback) const;
  /// The value of `key`, or nullopt when it is absent or null (a seed, say).
  std::optional<std::uint64_t> get_optional_uint(std::string_view key) const;

  /// Throws a kiln::Error naming the first key not in `known` (and the known ones), so a
  /// misspelt setting in a file is an error rather than silently ignored.
  void check_keys(std::initializer_list<std::string_view> known) const;
  /// Throws "[config] <where>: <message>": for checks a from_config makes itself (a value
  /// out of range).
  [[noreturn]] void fail(std::string_view message) const;

  /// Where this Config came from ("model.json: module.config"), as messages say it.
  const std::string& where() const;

  /// The object as JSON text (`indent` < 0: one line).
  std::string to_json(int indent = 2) const;
  /// Parses a JSON object. Invalid JSON, a value that is not an object, invalid UTF-8,
  /// duplicate keys and nesting deeper than 64 levels are kiln::Errors naming `source`.
  static Config from_json(std::string_view text, std::string_view source = "JSON text");

  /// Same keys in the same order with equal values.
  bool operator==(const Config& other) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend struct ConfigAccess;
};

}  // namespace kiln

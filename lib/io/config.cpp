// kiln::Config: a JSON object with typed, strict getters.
#include "kiln/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/fail.hpp"
#include "io/elements.hpp"
#include "io/json.hpp"

namespace kiln {

namespace {

constexpr std::string_view config_op = "config";
/// Architecture files nest a level or two per layer; far more than any model needs.
constexpr std::size_t max_config_nesting = 64;

using Json = nlohmann::ordered_json;

/// "an integer", "the string \"8\"", ... for a message saying what a key holds instead.
std::string describe(const Json& value) {
  const std::string shown =
      io::detail::printable(value.dump(-1, ' ', false, Json::error_handler_t::replace));
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "the boolean " + shown;
    case Json::value_t::string:
      return "the string " + shown;
    case Json::value_t::array:
      return "the list " + shown;
    case Json::value_t::object:
      return "an object";
    default:
      return "the number " + shown;
  }
}

}  // namespace

struct Config::Impl {
  Json value = Json::object();
  std::string where;
  bool nested = false;  // a value inside another Config: its where() continues the parent's
};

/// Reaches the JSON value of a Config for the getters below.
struct ConfigAccess {
  static const Json& at(const Config& config, std::string_view key) {
    const auto it = config.impl_->value.find(key);
    if (it == config.impl_->value.end())
      kiln::detail::fail(config_op, "{}: the key '{}' is missing", config.where(),
                         io::detail::printable(key));
    return *it;
  }
  static const Json* find(const Config& config, std::string_view key) {
    const auto it = config.impl_->value.find(key);
    return it == config.impl_->value.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] static void wrong_type(const Config& config, std::string_view key,
                                      std::string_view expected, const Json& value) {
    kiln::detail::fail(config_op, "{}: '{}' must be {}, got {}", config.where(),
                       io::detail::printable(key), expected, describe(value));
  }
  /// The object `value` found at `key` ("layers[1]") of `parent`: "model.json: module" below
  /// the root, "model.json: module.config" below that.
  static Config child(const Config& parent, std::string_view key, const Json& value) {
    Config out(fmt::format("{}{}{}", parent.where(), parent.impl_->nested ? "." : ": ", key));
    out.impl_->value = value;
    out.impl_->nested = true;
    return out;
  }
  static Json& value(Config& config) { return config.impl_->value; }
  static const Json& value(const Config& config) { return config.impl_->value; }
};

namespace {

std::int64_t as_int(const Config& config, std::string_view key, const Json& value) {
  if (value.is_number_integer() &&
      !(value.is_number_unsigned() &&
        value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)))
    return value.get<std::int64_t>();
  ConfigAccess::wrong_type(config, key, "an integer", value);
}

double as_double(const Config& config, std::string_view key, const Json& value) {
  if (value.is_number()) return value.get<double>();
  ConfigAccess::wrong_type(config, key, "a number", value);
}

}  // namespace

Config::Config(std::string where) : impl_(std::make_unique<Impl>()) {
  impl_->where = std::move(where);
}
Config::Config(const Config& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Config& Config::operator=(const Config& other) {
  if (this != &other) *impl_ = *other.impl_;
  return *this;
}
Config::Config(Config&& other) noexcept : impl_(std::make_unique<Impl>()) {
  std::swap(impl_, other.impl_);
}
Config& Config::operator=(Config&& other) noexcept {
  std::swap(impl_, other.impl_);
  return *this;
}
Config::~Config() = default;

Config& Config::set(std::string_view key, bool value) {
  impl_->value[std::string(key)] = value;
  return *this;
}
Config& Config::set(std::string_view key, int value) {
  return set(key, static_cast<std::int64_t>(value));
}
Config& Config::set(std::string_view key, std::int64_t value) {
  impl_->value[std::string(key)] = value;
  return *this;
}
Config& Config::set(std::string_view key, std::uint64_t value) {
  impl_->value[std::string(key)] = value;
  return *this;
}
Config& Config::set(std::string_view key, double value) {
  if (!std::isfinite(value))
    kiln::detail::fail(config_op, "{}: '{}' cannot be {} (JSON has no such number)", where(), key,
                       value);
  impl_->value[std::string(key)] = value;
  return *this;
}
Config& Config::set(std::string_view key, std::string_view value) {
  impl_->value[std::string(key)] = std::string(value);
  return *this;
}
Config& Config::set(std::string_view key, const char* value) {
  return set(key, std::string_view(value));
}
Config& Config::set(std::string_view key, const std::string& value) {
  return set(key, std::string_view(value));
}
Config& Config::set(std::string_view key, const std::vector<std::int64_t>& values) {
  impl_->value[std::string(key)] = values;
  return *this;
}
Config& Config::set(std::string_view key, const Config& value) {
  impl_->value[std::string(key)] = value.impl_->value;
  return *this;
}
Config& Config::set(std::string_view key, const std::vector<Config>& values) {
  Json list = Json::array();
  for (const Config& c : values) list.push_back(c.impl_->value);
  impl_->value[std::string(key)] = std::move(list);
  return *this;
}
Config& Config::set(std::string_view key, std::nullopt_t) {
  impl_->value[std::string(key)] = nullptr;
  return *this;
}

bool Config::has(std::string_view key) const { return impl_->value.contains(key); }

bool Config::is_null(std::string_view key) const {
  const auto it = impl_->value.find(key);
  return it != impl_->value.end() && it->is_null();
}

std::vector<std::string> Config::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, value] : impl_->value.items()) out.push_back(key);
  return out;
}

bool Config::get_bool(std::string_view key) const {
  const Json& value = ConfigAccess::at(*this, key);
  if (!value.is_boolean()) ConfigAccess::wrong_type(*this, key, "true or false", value);
  return value.get<bool>();
}

std::int64_t Config::get_int(std::string_view key) const {
  return as_int(*this, key, ConfigAccess::at(*this, key));
}

std::uint64_t Config::get_uint(std::string_view key) const {
  const Json& value = ConfigAccess::at(*this, key);
  if (!value.is_number_unsigned()) ConfigAccess::wrong_type(*this, key, "an integer >= 0", value);
  return value.get<std::uint64_t>();
}

double Config::get_double(std::string_view key) const {
  return as_double(*this, key, ConfigAccess::at(*this, key));
}

std::string Config::get_string(std::string_view key) const {
  const Json& value = ConfigAccess::at(*this, key);
  if (!value.is_string()) ConfigAccess::wrong_type(*this, key, "a string", value);
  return value.get<std::string>();
}

std::vector<std::int64_t> Config::get_ints(std::string_view key) const {
  const Json& value = ConfigAccess::at(*this, key);
  if (!value.is_array()) ConfigAccess::wrong_type(*this, key, "a list of integers", value);
  std::vector<std::int64_t> out;
  for (const Json& item : value) {
    if (!item.is_number_integer())
      ConfigAccess::wrong_type(*this, key, "a list of integers", value);
    out.push_back(as_int(*this, key, item));
  }
  return out;
}

Config Config::get_config(std::string_view key) const {
  const Json& value = ConfigAccess::at(*this, key);
  if (!value.is_object()) ConfigAccess::wrong_type(*this, key, "an object", value);
  return ConfigAccess::child(*this, key, value);
}

std::vector<Config> Config::get_configs(std::string_view key) const {
  const Json& value = ConfigAccess::at(*this, key);
  if (!value.is_array()) ConfigAccess::wrong_type(*this, key, "a list of objects", value);
  std::vector<Config> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_object())
      kiln::detail::fail(config_op, "{}: '{}[{}]' must be an object, got {}", where(), key, i,
                         describe(value[i]));
    out.push_back(ConfigAccess::child(*this, fmt::format("{}[{}]", key, i), value[i]));
  }
  return out;
}

bool Config::get_bool(std::string_view key, bool fallback) const {
  return ConfigAccess::find(*this, key) ? get_bool(key) : fallback;
}
std::int64_t Config::get_int(std::string_view key, std::int64_t fallback) const {
  return ConfigAccess::find(*this, key) ? get_int(key) : fallback;
}
double Config::get_double(std::string_view key, double fallback) const {
  return ConfigAccess::find(*this, key) ? get_double(key) : fallback;
}
std::string Config::get_string(std::string_view key, std::string_view fallback) const {
  return ConfigAccess::find(*this, key) ? get_string(key) : std::string(fallback);
}
std::optional<std::uint64_t> Config::get_optional_uint(std::string_view key) const {
  if (!ConfigAccess::find(*this, key)) return std::nullopt;
  return get_uint(key);
}

void Config::check_keys(std::initializer_list<std::string_view> known) const {
  for (const auto& [key, value] : impl_->value.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", k);
    kiln::detail::fail(config_op, "{}: unknown key '{}'; the keys are {}", where(),
                       io::detail::printable(key), list.empty() ? "none" : list);
  }
}

void Config::fail(std::string_view message) const {
  kiln::detail::fail(config_op, "{}: {}", where(), message);
}

const std::string& Config::where() const { return impl_->where; }

std::string Config::to_json(int indent) const {
  return impl_->value.dump(indent < 0 ? -1 : indent, ' ', false, Json::error_handler_t::strict);
}

Config Config::from_json(std::string_view text, std::string_view source) {
  const std::string where(source);
  // ordered_json keeps the text's key order (nlohmann::json would sort them).
  Json parsed = io::detail::parse_json_strictly<Json>(text, max_config_nesting,
                                                      std::string(config_op), where, "JSON text");
  if (!parsed.is_object()) kiln::detail::fail(config_op, "{}: JSON text is not an object", where);
  Config out(where);
  out.impl_->value = std::move(parsed);
  return out;
}

bool Config::operator==(const Config& other) const { return impl_->value == other.impl_->value; }

}  // namespace kiln

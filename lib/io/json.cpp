// Strict JSON parsing for files kiln reads (safetensors headers, architecture files).
#include "io/json.hpp"

#include <set>
#include <vector>

#include "core/fail.hpp"
#include "io/elements.hpp"

namespace kiln::io::detail {

namespace {

using kiln::detail::fail;

/// Rejects JSON that nests arrays and objects more than `max_nesting` deep. Brackets inside
/// strings do not count; the text is known to be valid UTF-8.
void check_nesting(std::string_view text, std::size_t max_nesting, const std::string& op,
                   const std::string& source, std::string_view what) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_nesting)
        fail(op, "{}: {} nests deeper than {} levels (at byte {} of the {})", source, what,
             max_nesting, i, what);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // unbalanced brackets are the JSON parser's to report
    }
  }
}

}  // namespace

template <class Json>
Json parse_json_strictly(std::string_view text, std::size_t max_nesting, const std::string& op,
                         const std::string& source, std::string_view what) {
  if (!is_valid_utf8(text)) fail(op, "{}: {} is not valid UTF-8", source, what);
  check_nesting(text, max_nesting, op, source, what);
  std::string duplicate;
  std::vector<std::set<std::string>> open_objects;
  auto check = [&](int, typename Json::parse_event_t event, Json& value) {
    using Event = typename Json::parse_event_t;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Event::key && !open_objects.empty() && duplicate.empty()) {
      const auto& key = value.template get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), check);
  } catch (const nlohmann::json::exception& e) {
    fail(op, "{}: {} is not valid JSON: {}", source, what, printable(e.what()));
  }
  if (!duplicate.empty())
    fail(op, "{}: {} has the key '{}' twice", source, what, printable(duplicate));
  return json;
}

template nlohmann::json parse_json_strictly<nlohmann::json>(std::string_view, std::size_t,
                                                            const std::string&, const std::string&,
                                                            std::string_view);
template nlohmann::ordered_json parse_json_strictly<nlohmann::ordered_json>(
    std::string_view, std::size_t, const std::string&, const std::string&, std::string_view);

std::string excerpt(const nlohmann::json& value) {
  return printable(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace kiln::io::detail

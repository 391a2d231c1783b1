#pragma once
// Reading JSON from files kiln did not write: strict parsing with limits, and quoting values in
// error messages. nlohmann-json stays inside lib/ (public headers never include it).

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kiln::io::detail {

/// Parses `text` as JSON the way every kiln reader must: valid UTF-8, nested at most
/// `max_nesting` arrays and objects deep (checked before parsing, since printing or parsing a
/// deep value recurses once per level), and no object with the same key twice (a plain parse
/// keeps the last one silently). Failures throw "[op] <source>: <what> ..." ("header is not
/// valid JSON: ...", "header has the key 'x' twice").
/// Json is nlohmann::json (keys sorted) or nlohmann::ordered_json (keys in the text's order).
template <class Json = nlohmann::json>
Json parse_json_strictly(std::string_view text, std::size_t max_nesting, const std::string& op,
                         const std::string& source, std::string_view what);

/// A JSON value as an error message may quote it: compact, escaped and cut to a few hundred
/// bytes.
std::string excerpt(const nlohmann::json& value);

}  // namespace kiln::io::detail

// The folders under lib/ are layers; a file may include headers of its own layer and of layers
// below it only. The order is the "layer order (bottom to top):" line of docs/architecture.md.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.hpp"

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Each folder's level from a line "layer order (bottom to top): core a|b c": folders joined by
/// '|' share a level.
std::map<std::string, int> layer_levels(const std::string& doc) {
  const std::string marker = "layer order (bottom to top):";
  std::map<std::string, int> levels;
  const auto at = doc.find(marker);
  if (at == std::string::npos) return levels;
  std::istringstream words(doc.substr(at + marker.size(), doc.find('\n', at) - at - marker.size()));
  int level = 0;
  for (std::string word; words >> word; ++level) {
    std::size_t start = 0;
    for (std::size_t bar; (bar = word.find('|', start)) != std::string::npos; start = bar + 1)
      levels[word.substr(start, bar - start)] = level;
    levels[word.substr(start)] = level;
  }
  return levels;
}

}  // namespace

TEST_CASE("files under lib/ include only their own layer and layers below", "[layering]") {
  const fs::path source = test_paths::source_dir();
  const auto levels = layer_levels(read_text(source / "docs" / "architecture.md"));
  REQUIRE(levels.size() >= 5);
  const fs::path lib = source / "lib";
  const std::regex include_line(R"(^\s*#\s*include\s*"([^"/]+)/[^"]+")");
  std::vector<std::string> unplaced, upward;
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(lib)) {
    if (!entry.is_regular_file()) continue;
    const auto ext = entry.path().extension();
    if (ext != ".cpp" && ext != ".hpp" && ext != ".def") continue;
    const fs::path relative = fs::relative(entry.path(), lib);
    const std::string folder = relative.begin()->string();
    if (relative.begin()->string() == relative.string()) continue;  // a file directly in lib/
    const auto own = levels.find(folder);
    if (own == levels.end()) {
      unplaced.push_back(folder);
      continue;
    }
    std::ifstream in(entry.path());
    int line_number = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_number;
      std::smatch match;
      if (!std::regex_search(line, match, include_line)) continue;
      const std::string target = match[1];
      if (target == folder || !fs::exists(lib / target)) continue;  // public or system header
      ++checked;
      const auto other = levels.find(target);
      if (other == levels.end()) {
        unplaced.push_back(target);
      } else if (other->second >= own->second) {
        upward.push_back(relative.string() + ":" + std::to_string(line_number) + " includes " +
                         line.substr(line.find('"')));
      }
    }
  }
  INFO("folders the layer order does not place: " << Catch::Detail::stringify(unplaced));
  CHECK(unplaced.empty());
  INFO("includes of a layer above (or beside) the file's own:\n  " << [&] {
    std::string all;
    for (const auto& u : upward) all += u + "\n  ";
    return all;
  }());
  CHECK(upward.empty());
  CHECK(checked > 20);  // the walk found the includes it should check
}

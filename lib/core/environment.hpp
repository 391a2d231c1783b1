#pragma once
// Switches read from the environment, for A/B measurements of kiln's optimizations.

#include <cstdlib>
#include <string_view>

namespace kiln::detail {

/// Whether the optimization behind environment variable `name` is on: it is unless the
/// variable is set to "0" (KILN_FUSED_LOOPS=0, KILN_FUSED_GROUPS=0). Callers read it once.
inline bool switched_on_by_environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::string_view(value) != "0";
}

}  // namespace kiln::detail

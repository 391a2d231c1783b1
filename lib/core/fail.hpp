#pragma once
// Building kiln::Error messages: "[op] message".

#include <fmt/format.h>

#include <string_view>

#include "kiln/error.hpp"
#include "kiln/format.hpp"
#include "kiln/shape.hpp"

namespace kiln::detail {

/// Throws kiln::Error("[op] " + formatted message).
template <class... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> message, Args&&... args) {
  throw Error(fmt::format("[{}] {}", op, fmt::format(message, std::forward<Args>(args)...)));
}

}  // namespace kiln::detail

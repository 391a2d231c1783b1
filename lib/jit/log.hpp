#pragma once
// kiln's warnings: to the sink set by kiln::set_log_sink, else to standard error.

#include <string>

namespace kiln::detail {

void log_warning(const std::string& message);

}  // namespace kiln::detail

#pragma once
// Shared by load_weights/save_weights and Checkpoint.

namespace kiln::detail {

/// Throws "[op] cannot run while a function is being traced ..." inside a trace: loading and
/// saving assign and read variables in place and belong outside traced functions.
void refuse_while_tracing(const char* op);

}  // namespace kiln::detail

#pragma once
// Reversing the time axis of a sequence whose time dim may be dynamic (shared by the recurrent
// layers' go_backwards and nn::Bidirectional).

#include "kiln/tensor.hpp"

namespace kiln::nn {

/// Reverses the leading (time) axis of a [time, ...] tensor, eagerly or while tracing (also when
/// the time dim is dynamic); its gradient is the same reversal of the output gradient.
Tensor reverse_time(const Tensor& seq);

}  // namespace kiln::nn

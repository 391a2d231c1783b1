#pragma once
// The optimizer's current learning rate as a number (a schedule evaluated at its iteration
// count), for fit's logs and LearningRateScheduler.

#include "kiln/optim.hpp"

namespace kiln::train::detail {

double learning_rate_value(const optim::Optimizer& optimizer);

}  // namespace kiln::train::detail

#pragma once
/// @file kiln.hpp
/// Everything public in kiln. (The xtensor interop header kiln/xtensor.hpp is opt-in.)

#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/format.hpp"
#include "kiln/function.hpp"
#include "kiln/init.hpp"
#include "kiln/memory.hpp"
#include "kiln/module.hpp"
#include "kiln/name_scope.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/optim.hpp"
#include "kiln/random.hpp"
#include "kiln/session.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"
#include "kiln/train.hpp"
#include "kiln/variable.hpp"
#include "kiln/variable_store.hpp"

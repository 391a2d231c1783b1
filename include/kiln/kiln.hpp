#pragma once
/// @file kiln.hpp
/// Everything public in kiln. (The xtensor interop header kiln/xtensor.hpp is opt-in.)

#include "kiln/autodiff.hpp"
#include "kiln/creation.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/format.hpp"
#include "kiln/function.hpp"
#include "kiln/io.hpp"
#include "kiln/memory.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

#pragma once
/// @file nn.hpp
/// Layers (kiln::nn: dense, recurrent, convolution, pooling, reshaping, normalization, attention),
/// normalization and attention functions (kiln::nn, nn/functional.hpp) and losses
/// (kiln::nn::losses).

#include "kiln/nn/architecture.hpp"
#include "kiln/nn/attention.hpp"
#include "kiln/nn/bidirectional.hpp"
#include "kiln/nn/conv.hpp"
#include "kiln/nn/dense.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/fake_quant.hpp"
#include "kiln/nn/functional.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/losses.hpp"
#include "kiln/nn/masking.hpp"
#include "kiln/nn/normalization.hpp"
#include "kiln/nn/pooling.hpp"
#include "kiln/nn/recurrent.hpp"
#include "kiln/nn/reshaping.hpp"
#include "kiln/nn/sequential.hpp"

#pragma once
/// @file random.hpp
/// Seeded, reproducible random tensors.
///
/// Values come from a counter-based generator (Philox-4x32-10): element i of a tensor
/// drawn with seed s depends only on (s, i), so results do not depend on thread count or
/// on what else was drawn before.

#include <cstdint>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln::random {

/// Normal(mean, stddev) samples (f32 or f64).
Tensor normal(const Shape& shape, double mean, double stddev, std::uint64_t seed,
              DType dtype = f32);
/// Uniform samples in [low, high) (f32 or f64).
Tensor uniform(const Shape& shape, double low, double high, std::uint64_t seed, DType dtype = f32);
/// Normal(mean, stddev) samples, redrawn until within two standard deviations of the mean.
Tensor truncated_normal(const Shape& shape, double mean, double stddev, std::uint64_t seed,
                        DType dtype = f32);

/// Overloads without a seed draw from a global stream: each call takes the next seed.
Tensor normal(const Shape& shape, double mean = 0.0, double stddev = 1.0, DType dtype = f32);
Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0, DType dtype = f32);
Tensor truncated_normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
                        DType dtype = f32);
/// Restarts the global stream from `seed` (the stream starts from 0 at program start).
void set_global_seed(std::uint64_t seed);
/// The seed the global stream was last started from (0 unless set_global_seed was called).
/// kiln::clear_session() restarts the stream from it.
std::uint64_t global_seed();
/// Takes the next seed of the global stream (what the unseeded overloads and unseeded
/// initializers use); thread-safe.
std::uint64_t next_seed();

}  // namespace kiln::random

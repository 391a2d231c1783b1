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
/// Integers in [low, high), every one equally likely (i32 or i64; low < high): class labels,
/// token ids, indices.
Tensor uniform_int(const Shape& shape, std::int64_t low, std::int64_t high, std::uint64_t seed,
                   DType dtype = i32);
/// Normal(mean, stddev) samples, redrawn until within two standard deviations of the mean.
Tensor truncated_normal(const Shape& shape, double mean, double stddev, std::uint64_t seed,
                        DType dtype = f32);

/// Uniform samples in [low, high) (f32 or f64) determined by `key`, an i64 tensor of shape [2]
/// holding (seed, counter): the same key always gives the same values, and with counter 0 they
/// equal uniform(shape, low, high, seed) for [low, high) = [0, 1) (other ranges scale those samples,
/// so rounding may reach `high`). Unlike the functions above, this is an op: inside a
/// kiln::function it becomes a graph node whose key is read at every call, so a cached graph
/// draws new values when the key changes (e.g. a key built from a counter Variable that the
/// graph increments, which is how kiln::nn::Dropout gets a new mask per call). `shape` may
/// hold dynamic dims while tracing.
Tensor stateless_uniform(const Shape& shape, const Tensor& key, double low = 0.0,
                         double high = 1.0, DType dtype = f32);

/// Overloads without a seed draw from a global stream: each call takes the next seed.
Tensor normal(const Shape& shape, double mean = 0.0, double stddev = 1.0, DType dtype = f32);
Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0, DType dtype = f32);
Tensor uniform_int(const Shape& shape, std::int64_t low, std::int64_t high, DType dtype = i32);
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

#include "kiln/random.hpp"

#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <string_view>
#include <type_traits>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/parallel.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"
#include "kernels/philox.hpp"

namespace kiln::random {

namespace {

constexpr std::string_view normal_op = "random.normal";
constexpr std::string_view uniform_op = "random.uniform";
constexpr std::string_view truncated_normal_op = "random.truncated_normal";

// Element `index` of a tensor drawn with `seed` reads the block at counter
// (index, attempt); attempt > 0 only for truncated_normal's redraws.
detail::PhiloxCounter random_block(std::uint64_t seed, std::uint64_t index, std::uint32_t attempt) {
  const detail::PhiloxKey key{static_cast<std::uint32_t>(seed),
                              static_cast<std::uint32_t>(seed >> 32)};
  const detail::PhiloxCounter counter{static_cast<std::uint32_t>(index),
                                      static_cast<std::uint32_t>(index >> 32), attempt, 0};
  return detail::philox4x32_10(counter, key);
}

// [0, 1) from the top 24 bits of one word (exact in float).
float unit_interval_f32(std::uint32_t word) { return static_cast<float>(word >> 8) * 0x1p-24f; }

// [0, 1) from the top 53 bits of two words (exact in double).
double unit_interval_f64(std::uint32_t high_word, std::uint32_t low_word) {
  const std::uint64_t bits = (std::uint64_t{high_word} << 32) | low_word;
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// Box-Muller on two 53-bit uniforms; the radius uniform lies in (0, 1], so log() is finite.
double standard_normal(const detail::PhiloxCounter& block) {
  const double radius_uniform = 1.0 - unit_interval_f64(block[0], block[1]);
  const double angle_uniform = unit_interval_f64(block[2], block[3]);
  return std::sqrt(-2.0 * std::log(radius_uniform)) *
         std::cos(2.0 * std::numbers::pi * angle_uniform);
}

template <class T>
T uniform_sample(const detail::PhiloxCounter& block, T low, T high) {
  T unit;
  if constexpr (std::is_same_v<T, float>) {
    unit = unit_interval_f32(block[0]);
  } else {
    unit = unit_interval_f64(block[0], block[1]);
  }
  const T span = high - low;
  T value = std::isfinite(span) ? low + span * unit : low * (T{1} - unit) + high * unit;
  // Rounding may land on `high`; keep the interval half-open.
  if (value >= high) value = std::nextafter(high, low);
  if (value < low) value = low;
  return value;
}

void check_dtype_and_shape(std::string_view op, const Shape& shape, DType dtype) {
  if (!is_floating(dtype)) detail::fail(op, "dtype must be f32 or f64, got {}", dtype_name(dtype));
  if (shape.has_dynamic_dims())
    detail::fail(op,
                 "shape {} has a dynamic dim: random tensors are drawn eagerly, with a static "
                 "shape (draw them outside the traced function, or give the dim a static size)",
                 shape);
  std::int64_t count = 1;
  for (auto d : shape) {
    if (d < 0) detail::fail(op, "negative dimension in shape {}", shape);
    if (__builtin_mul_overflow(count, d, &count))
      detail::fail(op, "shape {} has too many elements", shape);
  }
}

// A finite parameter that is also finite once converted to dtype.
void check_parameter(std::string_view op, std::string_view name, double value, DType dtype) {
  if (!std::isfinite(value)) detail::fail(op, "{} must be finite, got {}", name, value);
  if (dtype == DType::f32 && std::abs(value) > std::numeric_limits<float>::max())
    detail::fail(op, "{} {} is out of range for f32", name, value);
}

void check_normal(std::string_view op, const Shape& shape, double mean, double stddev,
                  DType dtype) {
  check_dtype_and_shape(op, shape, dtype);
  check_parameter(op, "mean", mean, dtype);
  check_parameter(op, "stddev", stddev, dtype);
  if (stddev < 0.0) detail::fail(op, "stddev must be >= 0, got {}", stddev);
}

void check_uniform(const Shape& shape, double low, double high, DType dtype) {
  check_dtype_and_shape(uniform_op, shape, dtype);
  check_parameter(uniform_op, "low", low, dtype);
  check_parameter(uniform_op, "high", high, dtype);
  if (low > high) detail::fail(uniform_op, "low {} is greater than high {}", low, high);
}

// Elements per chunk when the draw is split across threads; every element is computed on
// its own, so the split does not change the values.
constexpr std::int64_t elements_per_chunk = 1 << 14;

/// A new tensor whose element i is sample(i), written as T.
template <class T, class Sample>
Tensor generate(std::string_view op, const Shape& shape, DType dtype, const Sample& sample) {
  Tensor out = detail::empty(shape, dtype, op.data());  // op names are literals
  T* values = detail::data_ptr<T>(out);
  auto fill_range = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) values[i] = sample(static_cast<std::uint64_t>(i));
  };
  detail::parallel_for(shape.numel(), elements_per_chunk, fill_range);
  return out;
}

template <class T>
Tensor normal_tensor(std::string_view op, const Shape& shape, double mean, double stddev,
                     std::uint64_t seed, DType dtype, bool truncated) {
  const auto mean_t = static_cast<T>(mean);
  const auto stddev_t = static_cast<T>(stddev);
  return generate<T>(op, shape, dtype, [&](std::uint64_t index) {
    double z = standard_normal(random_block(seed, index, 0));
    for (std::uint32_t attempt = 1; truncated && std::abs(z) > 2.0; ++attempt)
      z = standard_normal(random_block(seed, index, attempt));
    return mean_t + stddev_t * static_cast<T>(z);
  });
}

Tensor draw_normal(std::string_view op, const Shape& shape, double mean, double stddev,
                   std::uint64_t seed, DType dtype, bool truncated) {
  check_normal(op, shape, mean, stddev, dtype);
  if (dtype == DType::f32)
    return normal_tensor<float>(op, shape, mean, stddev, seed, dtype, truncated);
  return normal_tensor<double>(op, shape, mean, stddev, seed, dtype, truncated);
}

template <class T>
Tensor uniform_tensor(const Shape& shape, double low, double high, std::uint64_t seed,
                      DType dtype) {
  const auto low_t = static_cast<T>(low);
  const auto high_t = static_cast<T>(high);
  return generate<T>(uniform_op, shape, dtype, [&](std::uint64_t index) {
    return uniform_sample<T>(random_block(seed, index, 0), low_t, high_t);
  });
}

constexpr std::string_view uniform_int_op = "random.uniform_int";

void check_uniform_int(const Shape& shape, std::int64_t low, std::int64_t high, DType dtype) {
  if (dtype != DType::i32 && dtype != DType::i64)
    detail::fail(uniform_int_op, "dtype must be i32 or i64, got {}", dtype_name(dtype));
  check_dtype_and_shape(uniform_int_op, shape, DType::f32);  // the shape checks
  if (low >= high)
    detail::fail(uniform_int_op, "low {} must be less than high {} (the range is [low, high))", low,
                 high);
  if (dtype == DType::i32 && (low < std::numeric_limits<std::int32_t>::min() ||
                              high - 1 > std::numeric_limits<std::int32_t>::max()))
    detail::fail(uniform_int_op, "[{}, {}) is out of range for i32", low, high);
}

template <class T>
Tensor uniform_int_tensor(const Shape& shape, std::int64_t low, std::int64_t high,
                          std::uint64_t seed, DType dtype) {
  // Every value of [low, high) equally likely: 64 random bits modulo the range's size, redrawn
  // (the next attempt of the element's counter) while they fall in the uneven remainder.
  const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  const std::uint64_t uneven = (0 - range) % range;  // 2^64 mod range
  return generate<T>(uniform_int_op, shape, dtype, [&](std::uint64_t index) {
    for (std::uint32_t attempt = 0;; ++attempt) {
      const detail::PhiloxCounter block = random_block(seed, index, attempt);
      const std::uint64_t bits = (std::uint64_t{block[0]} << 32) | block[1];
      if (bits >= uneven)
        return static_cast<T>(static_cast<std::uint64_t>(low) + bits % range);
    }
  });
}

// The global stream: a SplitMix64 sequence whose state advances atomically per call.
constexpr std::uint64_t splitmix_increment = 0x9E3779B97F4A7C15ull;
std::atomic<std::uint64_t> global_stream_state{0};
std::atomic<std::uint64_t> global_stream_start{0};

std::uint64_t next_global_seed() {
  std::uint64_t z = global_stream_state.fetch_add(splitmix_increment, std::memory_order_relaxed) +
                    splitmix_increment;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Tensor normal(const Shape& shape, double mean, double stddev, std::uint64_t seed, DType dtype) {
  return draw_normal(normal_op, shape, mean, stddev, seed, dtype, false);
}

Tensor truncated_normal(const Shape& shape, double mean, double stddev, std::uint64_t seed,
                        DType dtype) {
  return draw_normal(truncated_normal_op, shape, mean, stddev, seed, dtype, true);
}

Tensor uniform(const Shape& shape, double low, double high, std::uint64_t seed, DType dtype) {
  check_uniform(shape, low, high, dtype);
  if (dtype == DType::f32) return uniform_tensor<float>(shape, low, high, seed, dtype);
  return uniform_tensor<double>(shape, low, high, seed, dtype);
}

// The unseeded overloads validate first so that a rejected call does not advance the stream.
Tensor normal(const Shape& shape, double mean, double stddev, DType dtype) {
  check_normal(normal_op, shape, mean, stddev, dtype);
  return normal(shape, mean, stddev, next_global_seed(), dtype);
}

Tensor uniform_int(const Shape& shape, std::int64_t low, std::int64_t high, std::uint64_t seed,
                   DType dtype) {
  check_uniform_int(shape, low, high, dtype);
  if (dtype == DType::i32) return uniform_int_tensor<std::int32_t>(shape, low, high, seed, dtype);
  return uniform_int_tensor<std::int64_t>(shape, low, high, seed, dtype);
}

Tensor uniform_int(const Shape& shape, std::int64_t low, std::int64_t high, DType dtype) {
  check_uniform_int(shape, low, high, dtype);
  return uniform_int(shape, low, high, next_global_seed(), dtype);
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype) {
  check_uniform(shape, low, high, dtype);
  return uniform(shape, low, high, next_global_seed(), dtype);
}

Tensor truncated_normal(const Shape& shape, double mean, double stddev, DType dtype) {
  check_normal(truncated_normal_op, shape, mean, stddev, dtype);
  return truncated_normal(shape, mean, stddev, next_global_seed(), dtype);
}

Tensor stateless_uniform(const Shape& shape, const Tensor& key, double low, double high,
                         DType dtype) {
  constexpr std::string_view op = "random.stateless_uniform";
  detail::check_defined(key, op, 0);
  if (key.dtype() != DType::i64 || key.shape() != Shape{2})
    detail::fail(op, "key must be i64 [2] (seed, counter), got {} {}", dtype_name(key.dtype()),
                 key.shape());
  if (!is_floating(dtype)) detail::fail(op, "dtype must be f32 or f64, got {}", dtype_name(dtype));
  if (shape.has_dynamic_dims())
    detail::check_dims(shape, op);
  else
    check_dtype_and_shape(op, shape, dtype);
  check_parameter(op, "low", low, dtype);
  check_parameter(op, "high", high, dtype);
  if (low > high) detail::fail(op, "low {} is greater than high {}", low, high);
  Tensor unit =
      detail::apply(detail::Prim::random_uniform, {key}, detail::no_attrs(), dtype, shape);
  if (low == 0.0 && high == 1.0) return unit;
  return unit * (high - low) + low;
}

void set_global_seed(std::uint64_t seed) {
  global_stream_start.store(seed, std::memory_order_relaxed);
  global_stream_state.store(seed, std::memory_order_relaxed);
}

std::uint64_t global_seed() { return global_stream_start.load(std::memory_order_relaxed); }

std::uint64_t next_seed() { return next_global_seed(); }

}  // namespace kiln::random

#include "kiln/init.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kernels/linalg.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::init {

namespace {

// Standard deviation of a standard normal truncated to [-2, 2]: dividing by it makes a
// truncated normal's standard deviation the one asked for (Keras's constant).
constexpr double truncated_stddev_factor = 0.87962566103423978;

std::string op_name(std::string_view name) { return fmt::format("init.{}", name); }

void check_floating(std::string_view name, DType dtype) {
  if (!is_floating(dtype))
    detail::fail(op_name(name), "dtype must be f32 or f64, got {}", dtype_name(dtype));
}

std::uint64_t resolve(std::optional<std::uint64_t> seed) {
  return seed ? *seed : random::next_seed();
}

// The orthogonal value of a [rows, cols] matrix in T (float or double), reshaped to `shape`.
// A standard normal [tall, narrow] matrix read column-major (column j is elements
// [j*tall, (j+1)*tall) of the draw) becomes its Q factor with R's diagonal positive, the sign
// convention that makes the result uniformly distributed and determined by the draw.
template <class T>
Tensor orthogonal_matrix(const Shape& shape, DType dtype, double gain, std::uint64_t seed,
                         std::size_t rows, std::size_t cols) {
  const std::size_t tall = std::max(rows, cols), narrow = std::min(rows, cols);
  std::vector<T> q =
      random::normal(Shape{static_cast<std::int64_t>(tall * narrow)}, 0.0, 1.0, seed, dtype)
          .to_vector<T>();
  detail::qr_orthonormal("init.orthogonal", q.data(), static_cast<std::int64_t>(tall),
                         static_cast<std::int64_t>(narrow));
  // Q (tall x narrow, column-major) is Q^T (narrow x tall) in row-major order: the value
  // itself when rows < cols, its transpose otherwise.
  std::vector<T> out;
  if (rows < cols) {
    out = std::move(q);
  } else {
    out.resize(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) out[r * cols + c] = q[c * tall + r];
  }
  if (gain != 1.0)
    for (T& x : out) x = static_cast<T>(gain * x);
  return tensor(out, shape);
}

Tensor orthogonal_value(const Shape& shape, DType dtype, double gain, std::uint64_t seed) {
  check_floating("orthogonal", dtype);
  if (shape.size() < 2)
    detail::fail("init.orthogonal", "needs a shape of rank 2 or more, got {}", shape);
  if (shape.numel() == 0) return kiln::zeros(shape, dtype);
  const auto cols = static_cast<std::size_t>(shape.back());
  const auto rows = static_cast<std::size_t>(shape.numel()) / cols;
  // Computed in the variable's precision: f32 LAPACK for f32, f64 for f64.
  return dtype == f64 ? orthogonal_matrix<double>(shape, dtype, gain, seed, rows, cols)
                      : orthogonal_matrix<float>(shape, dtype, gain, seed, rows, cols);
}

}  // namespace

Initializer::Initializer(std::string name, Rule rule)
    : name_(std::move(name)), rule_(std::make_shared<const Rule>(std::move(rule))) {
  if (!*rule_) detail::fail("init", "initializer '{}' has an empty rule", name_);
}

Tensor Initializer::operator()(const Shape& shape, DType dtype) const {
  for (auto d : shape)
    if (d < 0) detail::fail(op_name(name_), "negative dimension in shape {}", shape);
  // Initial values are computed eagerly, even while a function is being traced.
  detail::TraceSuspension no_trace;
  Tensor value = (*rule_)(shape, dtype);
  if (!value.defined()) detail::fail(op_name(name_), "returned an undefined tensor");
  if (value.impl()->is_symbolic())
    detail::fail(op_name(name_), "returned a symbolic tensor; initial values must be concrete");
  if (value.dtype() != dtype || value.shape() != shape)
    detail::fail(op_name(name_), "returned {} {} for a requested {} {}", value.dtype(),
                 value.shape(), dtype, shape);
  return value.contiguous();
}

Fans compute_fans(const Shape& shape) {
  Fans fans;
  if (shape.size() == 1) {
    fans.fan_in = fans.fan_out = static_cast<double>(shape[0]);
  } else if (shape.size() == 2) {
    fans.fan_in = static_cast<double>(shape[0]);
    fans.fan_out = static_cast<double>(shape[1]);
  } else if (shape.size() > 2) {
    double receptive = 1;
    for (std::size_t i = 0; i + 2 < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
    fans.fan_in = static_cast<double>(shape[shape.size() - 2]) * receptive;
    fans.fan_out = static_cast<double>(shape.back()) * receptive;
  }
  return fans;
}

Initializer zeros() {
  return {"zeros", [](const Shape& shape, DType dtype) { return kiln::zeros(shape, dtype); }};
}

Initializer ones() {
  return {"ones", [](const Shape& shape, DType dtype) { return kiln::ones(shape, dtype); }};
}

Initializer constant(double value) {
  if (!std::isfinite(value)) detail::fail("init.constant", "value must be finite, got {}", value);
  return {"constant",
          [value](const Shape& shape, DType dtype) { return full(shape, value, dtype); }};
}

Initializer from_value(const Tensor& value) {
  if (!value.defined()) detail::fail("init.from_value", "the value is an undefined tensor");
  if (value.impl()->is_symbolic())
    detail::fail("init.from_value", "the value is symbolic; initial values must be concrete");
  return {"from_value", [value](const Shape& shape, DType dtype) {
            if (value.shape() != shape || value.dtype() != dtype)
              detail::fail("init.from_value", "the value is {} {}; the variable is {} {}",
                           value.dtype(), value.shape(), dtype, shape);
            return value;
          }};
}

Initializer random_normal(double mean, double stddev, std::optional<std::uint64_t> seed) {
  return {"random_normal", [=](const Shape& shape, DType dtype) {
            check_floating("random_normal", dtype);
            return random::normal(shape, mean, stddev, resolve(seed), dtype);
          }};
}

Initializer random_uniform(double low, double high, std::optional<std::uint64_t> seed) {
  return {"random_uniform", [=](const Shape& shape, DType dtype) {
            check_floating("random_uniform", dtype);
            return random::uniform(shape, low, high, resolve(seed), dtype);
          }};
}

Initializer truncated_normal(double mean, double stddev, std::optional<std::uint64_t> seed) {
  return {"truncated_normal", [=](const Shape& shape, DType dtype) {
            check_floating("truncated_normal", dtype);
            return random::truncated_normal(shape, mean, stddev, resolve(seed), dtype);
          }};
}

Initializer glorot_uniform(std::optional<std::uint64_t> seed) {
  return {"glorot_uniform", [=](const Shape& shape, DType dtype) {
            check_floating("glorot_uniform", dtype);
            const Fans fans = compute_fans(shape);
            const double limit = std::sqrt(6.0 / std::max(1.0, fans.fan_in + fans.fan_out));
            return random::uniform(shape, -limit, limit, resolve(seed), dtype);
          }};
}

Initializer he_normal(std::optional<std::uint64_t> seed) {
  return {"he_normal", [=](const Shape& shape, DType dtype) {
            check_floating("he_normal", dtype);
            const double stddev = std::sqrt(2.0 / std::max(1.0, compute_fans(shape).fan_in)) /
                                  truncated_stddev_factor;
            return random::truncated_normal(shape, 0.0, stddev, resolve(seed), dtype);
          }};
}

Initializer orthogonal(double gain, std::optional<std::uint64_t> seed) {
  if (!std::isfinite(gain)) detail::fail("init.orthogonal", "gain must be finite, got {}", gain);
  return {"orthogonal", [=](const Shape& shape, DType dtype) {
            return orthogonal_value(shape, dtype, gain, resolve(seed));
          }};
}

}  // namespace kiln::init

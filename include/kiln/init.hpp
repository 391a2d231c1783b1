#pragma once
/// @file init.hpp
/// Initializers: rules that make the initial value of a variable from its shape and dtype.
///
/// Every random initializer is reproducible. Given a seed, it is a pure function of (seed,
/// shape, dtype): calling it twice gives the same values. Without a seed, each call takes the
/// next seed of kiln's global random stream (kiln::random::next_seed()), so two variables get
/// different values, and a program that calls kiln::random::set_global_seed(s) (or
/// kiln::clear_session()) first gets the same values on every run.
///
/// Fan-in and fan-out, used by glorot_uniform and he_normal, follow Keras's convention:
/// rank 0: 1 and 1; rank 1 [n]: n and n; rank 2 [in, out]: in and out; rank k > 2 (a
/// convolution kernel [h, w, ..., in, out]): with receptive = the product of the leading k-2
/// dims, fan_in = in * receptive and fan_out = out * receptive.
///
/// Initial values are always computed eagerly: an initializer called while a kiln::function is
/// tracing computes concrete values (it does not add graph nodes).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/config.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln::init {

/// A named rule (shape, dtype) -> initial value. Cheap to copy; copies share the rule.
class Initializer {
 public:
  using Rule = std::function<Tensor(const Shape&, DType)>;

  /// A custom initializer. `rule` must return a concrete tensor of exactly the requested
  /// shape and dtype (checked on every call).
  Initializer(std::string name, Rule rule);
  /// A custom initializer that architecture files can name: `config` holds its settings,
  /// and a program that reads the file must have called
  /// init::register_initializer(name, factory) first.
  Initializer(std::string name, Rule rule, Config config);

  /// The initial value for a variable of this shape and dtype. Throws kiln::Error
  /// ("[init.<name>] ...") for unsupported dtypes or shapes.
  Tensor operator()(const Shape& shape, DType dtype = f32) const;

  /// "glorot_uniform", "zeros", ... (or the custom name).
  const std::string& name() const { return name_; }
  /// Its settings ({"seed": null}, {"mean": 0.0, "stddev": 0.05, "seed": 7}, ...); empty for
  /// a custom initializer made without them.
  const Config& config() const { return *config_; }

 private:
  std::string name_;
  std::shared_ptr<const Rule> rule_;
  std::shared_ptr<const Config> config_;
};

/// The initializer as architecture files store it: {"class_name": name, "config": settings}.
/// Throws kiln::Error for from_value (it holds a tensor: save it with save_weights) and for a
/// custom initializer whose name is not registered.
Config to_config(const Initializer& initializer);
/// The initializer a to_config() result describes: a built-in one by name with its settings
/// checked (unknown keys and wrong types are errors), or a registered custom one.
Initializer from_config(const Config& spec);
/// Lets architecture files name a custom initializer: from_config calls `factory` with the
/// stored settings. Names are unique (the built-in ones are taken); thread-safe.
void register_initializer(std::string name, std::function<Initializer(const Config&)> factory);

/// Fan-in and fan-out of a variable shape (see the file comment for the convention).
struct Fans {
  double fan_in = 1;
  double fan_out = 1;
};
Fans compute_fans(const Shape& shape);

/// All zeros (any dtype).
Initializer zeros();
/// All ones (any dtype).
Initializer ones();
/// Every element equal to `value` converted to the dtype (any dtype).
Initializer constant(double value);
/// Exactly `value`, which must have the requested shape and dtype (e.g. loaded weights).
Initializer from_value(const Tensor& value);

/// Normal(mean, stddev) samples (f32, f64).
Initializer random_normal(double mean = 0.0, double stddev = 0.05,
                          std::optional<std::uint64_t> seed = std::nullopt);
/// Uniform samples in [low, high) (f32, f64).
Initializer random_uniform(double low = -0.05, double high = 0.05,
                           std::optional<std::uint64_t> seed = std::nullopt);
/// Normal(mean, stddev) samples redrawn until within two standard deviations of the mean.
Initializer truncated_normal(double mean = 0.0, double stddev = 0.05,
                             std::optional<std::uint64_t> seed = std::nullopt);
/// Glorot (Xavier) uniform: U(-limit, limit) with limit = sqrt(6 / (fan_in + fan_out)).
Initializer glorot_uniform(std::optional<std::uint64_t> seed = std::nullopt);
/// He normal, as in Keras: a normal truncated at two standard deviations whose standard
/// deviation after truncation is sqrt(2 / fan_in).
Initializer he_normal(std::optional<std::uint64_t> seed = std::nullopt);
/// A (semi-)orthogonal matrix times `gain`. The shape is flattened to a matrix
/// [product of all but the last dim, last dim] (rank >= 2 required); the matrix is the Q factor
/// of a QR decomposition of a standard normal matrix, with signs fixed so that R's diagonal is
/// positive (Keras's and PyTorch's construction). Rows (or columns, whichever are fewer) are
/// orthonormal: Q^T Q = I when rows >= columns, Q Q^T = I otherwise. The draw and the QR are
/// computed in the requested dtype (f32 or f64); a numerically rank-deficient draw (vanishingly
/// rare) is an error.
Initializer orthogonal(double gain = 1.0, std::optional<std::uint64_t> seed = std::nullopt);

}  // namespace kiln::init

#include "kiln/init.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
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

/// The settings of a seeded initializer: `settings` plus "seed" (null when drawn per call).
Config settings(std::initializer_list<std::pair<const char*, double>> values,
                std::optional<std::uint64_t> seed) {
  Config config("initializer config");
  for (const auto& [key, value] : values) config.set(key, value);
  config.set("seed", seed);
  return config;
}

}  // namespace

Initializer::Initializer(std::string name, Rule rule)
    : Initializer(std::move(name), std::move(rule), Config("initializer config")) {}

Initializer::Initializer(std::string name, Rule rule, Config config)
    : name_(std::move(name)),
      rule_(std::make_shared<const Rule>(std::move(rule))),
      config_(std::make_shared<const Config>(std::move(config))) {
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
  return {"zeros", [](const Shape& shape, DType dtype) { return kiln::zeros(shape, dtype); },
          Config("initializer config")};
}

Initializer ones() {
  return {"ones", [](const Shape& shape, DType dtype) { return kiln::ones(shape, dtype); },
          Config("initializer config")};
}

Initializer constant(double value) {
  if (!std::isfinite(value)) detail::fail("init.constant", "value must be finite, got {}", value);
  return {"constant",
          [value](const Shape& shape, DType dtype) { return full(shape, value, dtype); },
          Config("initializer config").set("value", value)};
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
  return {"random_normal",
          [=](const Shape& shape, DType dtype) {
            check_floating("random_normal", dtype);
            return random::normal(shape, mean, stddev, resolve(seed), dtype);
          },
          settings({{"mean", mean}, {"stddev", stddev}}, seed)};
}

Initializer random_uniform(double low, double high, std::optional<std::uint64_t> seed) {
  return {"random_uniform",
          [=](const Shape& shape, DType dtype) {
            check_floating("random_uniform", dtype);
            return random::uniform(shape, low, high, resolve(seed), dtype);
          },
          settings({{"low", low}, {"high", high}}, seed)};
}

Initializer truncated_normal(double mean, double stddev, std::optional<std::uint64_t> seed) {
  return {"truncated_normal",
          [=](const Shape& shape, DType dtype) {
            check_floating("truncated_normal", dtype);
            return random::truncated_normal(shape, mean, stddev, resolve(seed), dtype);
          },
          settings({{"mean", mean}, {"stddev", stddev}}, seed)};
}

Initializer glorot_uniform(std::optional<std::uint64_t> seed) {
  return {"glorot_uniform",
          [=](const Shape& shape, DType dtype) {
            check_floating("glorot_uniform", dtype);
            const Fans fans = compute_fans(shape);
            const double limit = std::sqrt(6.0 / std::max(1.0, fans.fan_in + fans.fan_out));
            return random::uniform(shape, -limit, limit, resolve(seed), dtype);
          },
          settings({}, seed)};
}

Initializer he_normal(std::optional<std::uint64_t> seed) {
  return {"he_normal",
          [=](const Shape& shape, DType dtype) {
            check_floating("he_normal", dtype);
            const double stddev = std::sqrt(2.0 / std::max(1.0, compute_fans(shape).fan_in)) /
                                  truncated_stddev_factor;
            return random::truncated_normal(shape, 0.0, stddev, resolve(seed), dtype);
          },
          settings({}, seed)};
}

Initializer orthogonal(double gain, std::optional<std::uint64_t> seed) {
  if (!std::isfinite(gain)) detail::fail("init.orthogonal", "gain must be finite, got {}", gain);
  return {"orthogonal",
          [=](const Shape& shape, DType dtype) {
            return orthogonal_value(shape, dtype, gain, resolve(seed));
          },
          settings({{"gain", gain}}, seed)};
}

namespace {

using Factory = std::function<Initializer(const Config&)>;

/// The built-in initializers by name, each reading back the settings its factory stores.
std::map<std::string, Factory, std::less<>> builtin_factories() {
  std::map<std::string, Factory, std::less<>> out;
  out["zeros"] = [](const Config& c) {
    c.check_keys({});
    return zeros();
  };
  out["ones"] = [](const Config& c) {
    c.check_keys({});
    return ones();
  };
  out["constant"] = [](const Config& c) {
    c.check_keys({"value"});
    return constant(c.get_double("value"));
  };
  out["random_normal"] = [](const Config& c) {
    c.check_keys({"mean", "stddev", "seed"});
    return random_normal(c.get_double("mean", 0.0), c.get_double("stddev", 0.05),
                         c.get_optional_uint("seed"));
  };
  out["random_uniform"] = [](const Config& c) {
    c.check_keys({"low", "high", "seed"});
    return random_uniform(c.get_double("low", -0.05), c.get_double("high", 0.05),
                          c.get_optional_uint("seed"));
  };
  out["truncated_normal"] = [](const Config& c) {
    c.check_keys({"mean", "stddev", "seed"});
    return truncated_normal(c.get_double("mean", 0.0), c.get_double("stddev", 0.05),
                            c.get_optional_uint("seed"));
  };
  out["glorot_uniform"] = [](const Config& c) {
    c.check_keys({"seed"});
    return glorot_uniform(c.get_optional_uint("seed"));
  };
  out["he_normal"] = [](const Config& c) {
    c.check_keys({"seed"});
    return he_normal(c.get_optional_uint("seed"));
  };
  out["orthogonal"] = [](const Config& c) {
    c.check_keys({"gain", "seed"});
    return orthogonal(c.get_double("gain", 1.0), c.get_optional_uint("seed"));
  };
  return out;
}

struct InitializerRegistry {
  std::mutex mutex;
  std::map<std::string, Factory, std::less<>> factories = builtin_factories();
};

InitializerRegistry& registry() {
  static InitializerRegistry instance;
  return instance;
}

Factory find_factory(std::string_view name) {
  InitializerRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.factories.find(name);
  return it == r.factories.end() ? Factory{} : it->second;
}

}  // namespace

Config to_config(const Initializer& initializer) {
  constexpr std::string_view op = "init.to_config";
  if (initializer.name() == "from_value")
    detail::fail(op,
                 "a from_value initializer holds a tensor, which an architecture file does not "
                 "store; save the values with save_weights and load them after building");
  if (!find_factory(initializer.name()))
    detail::fail(op,
                 "the initializer '{}' is not registered, so a file could not name it; call "
                 "kiln::init::register_initializer(\"{}\", factory) (in every program that "
                 "writes or reads the file)",
                 initializer.name(), initializer.name());
  Config out("initializer");
  out.set("class_name", initializer.name());
  out.set("config", initializer.config());
  return out;
}

Initializer from_config(const Config& spec) {
  spec.check_keys({"class_name", "config"});
  const std::string name = spec.get_string("class_name");
  const Factory factory = find_factory(name);
  if (!factory)
    detail::fail("init.from_config",
                 "{}: unknown initializer '{}' (not built in and not registered with "
                 "kiln::init::register_initializer)",
                 spec.where(), name);
  return factory(spec.has("config") ? spec.get_config("config") : Config(spec.where()));
}

void register_initializer(std::string name, std::function<Initializer(const Config&)> factory) {
  constexpr std::string_view op = "init.register_initializer";
  if (name.empty()) detail::fail(op, "the name is empty");
  if (!factory) detail::fail(op, "'{}': the factory is empty", name);
  InitializerRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second)
    detail::fail(op, "'{}' is registered already (names are unique; the built-in ones are taken)",
                 name);
}

}  // namespace kiln::init

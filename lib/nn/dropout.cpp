// nn::Dropout: masks drawn from (seed, counter variable), so cached graphs draw anew per call.
#include "kiln/nn/dropout.hpp"

#include <cmath>

#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::nn {

namespace {
constexpr std::string_view dropout_op = "nn.Dropout";
}  // namespace

Dropout::Dropout(double rate, std::optional<std::uint64_t> seed, std::string name)
    : Layer("dropout", std::move(name)), rate_(rate), seed_(seed ? *seed : random::next_seed()) {
  if (!(rate >= 0.0 && rate < 1.0))
    detail::fail(dropout_op, "{}: rate must be in [0, 1), got {}", path(), rate);
}

Tensor Dropout::operator()(const Tensor& x) { return (*this)(x, learning_phase()); }

Tensor Dropout::operator()(const Tensor& x, bool training) {
  if (!x.defined()) detail::fail(dropout_op, "{}: the input is an undefined tensor", path());
  if (!is_floating(x.dtype()))
    detail::fail(dropout_op, "{}: needs f32 or f64 inputs, got {} {}", path(),
                 dtype_name(x.dtype()), x.shape());
  if (!training || rate_ == 0.0) return x;
  const Variable counter = weight("rng_counter", {}, init::zeros(), /*trainable*/ false, i64);
  const Tensor count = counter.value();
  const Tensor key =
      concat({tensor<std::int64_t>({static_cast<std::int64_t>(seed_)}), reshape(count, {1})}, 0);
  counter.assign(count + std::int64_t{1});
  const Tensor draw = random::stateless_uniform(x.shape(), key, 0.0, 1.0, x.dtype());
  return where(draw >= rate_, x * (1.0 / (1.0 - rate_)), zeros({}, x.dtype()));
}

}  // namespace kiln::nn

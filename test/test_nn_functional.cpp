// kiln::nn's normalization and attention functions (kiln/nn/functional.hpp): reference values
// from plain loops in f32 and f64, gradients against finite differences in f64, eager against
// traced, and every error message.
#include <fmt/format.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>
#include <nlohmann/json.hpp>

#include "io_test_support.hpp"
#include "nn_ops_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::test::Args;
using kiln::test::as_seen;
using kiln::test::check_close;
using kiln::test::check_gradient;
using kiln::test::check_traced;
using kiln::test::host_values;
using kiln::test::make_tensor;

namespace {

constexpr kiln::DType float_dtypes[] = {kiln::f32, kiln::f64};

/// x as `outer` rows of `inner` elements, each row standardized with its mean and biased
/// variance: (x - mean) / sqrt(var + eps).
std::vector<double> standardize_rows(const std::vector<double>& x, std::size_t inner, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t row = 0; row * inner < x.size(); ++row) {
    double m = 0, v = 0;
    for (std::size_t i = 0; i < inner; ++i) m += x[row * inner + i];
    m /= static_cast<double>(inner);
    for (std::size_t i = 0; i < inner; ++i) v += std::pow(x[row * inner + i] - m, 2);
    v /= static_cast<double>(inner);
    for (std::size_t i = 0; i < inner; ++i)
      y[row * inner + i] = (x[row * inner + i] - m) / std::sqrt(v + eps);
  }
  return y;
}

/// The same values as an f64 input for gradients and an f32/f64 input for values.
struct Input {
  std::vector<double> values;
  Shape shape;
  Tensor in(kiln::DType dtype) const { return make_tensor(values, shape, dtype); }
  std::vector<double> seen(kiln::DType dtype) const { return as_seen(values, dtype); }
};

Input input(const Shape& shape, std::uint32_t seed, double lo = -1, double hi = 1) {
  return {host_values(static_cast<std::size_t>(kiln::test::element_count(shape)), seed, lo, hi),
          shape};
}

/// The function's value against want(dtype) in f32 and f64, traced (f32) and its gradient (f64).
void check_op(const std::string& name, const kiln::test::OpFn& f, const std::vector<Input>& inputs,
              const Shape& out_shape, const std::function<std::vector<double>(kiln::DType)>& want) {
  INFO(name);
  for (kiln::DType dtype : float_dtypes) {
    INFO(kiln::dtype_name(dtype));
    Args args;
    for (const Input& i : inputs) args.push_back(i.in(dtype));
    check_close(f(args), out_shape, want(dtype), 1e-9);
    if (dtype == kiln::f32)
      check_traced(name, f, args);
    else
      check_gradient(name, f, args);
  }
}

}  // namespace

TEST_CASE("moments are the mean and the biased variance", "[nn_ops]") {
  const Input x = input({2, 3, 4}, 1);
  for (bool keepdims : {false, true}) {
    for (kiln::DType dtype : float_dtypes) {
      const std::vector<double> v = x.seen(dtype);
      std::vector<double> want_mean(3), want_var(3);
      for (std::size_t j = 0; j < 3; ++j) {
        for (std::size_t i = 0; i < 2; ++i)
          for (std::size_t k = 0; k < 4; ++k) want_mean[j] += v[(i * 3 + j) * 4 + k] / 8;
        for (std::size_t i = 0; i < 2; ++i)
          for (std::size_t k = 0; k < 4; ++k)
            want_var[j] += std::pow(v[(i * 3 + j) * 4 + k] - want_mean[j], 2) / 8;
      }
      const auto [m, var] = kiln::nn::moments(x.in(dtype), {0, -1}, keepdims);
      const Shape shape = keepdims ? Shape{1, 3, 1} : Shape{3};
      check_close(m, shape, want_mean);
      check_close(var, shape, want_var);
    }
  }
  check_traced("moments variance",
               [](const Args& a) {
                 return kiln::nn::moments(a[0], {0, 2}).second;
               },
               {x.in(kiln::f32)});
  check_gradient("moments mean+variance",
                 [](const Args& a) {
                   const auto [m, v] = kiln::nn::moments(a[0], {1});
                   return m * 2.0 + v;
                 },
                 {x.in(kiln::f64)});
  const auto [m0, v0] = kiln::nn::moments(x.in(kiln::f64), {});
  CHECK(kiln::max(kiln::abs(v0)).item<double>() == 0.0);
  CHECK(m0.shape() == x.shape);
}

TEST_CASE("layer_norm and rms_norm normalize the trailing axes", "[nn_ops]") {
  const Input x = input({2, 3, 4}, 2, -2, 2);
  const Input gamma4 = input({4}, 3, 0.5, 1.5), gamma34 = input({3, 4}, 4, 0.5, 1.5);
  const Input beta4 = input({4}, 5), beta1 = input({1, 4}, 6);
  const double eps = 1e-3;
  // axis -1: rows of 4, gamma [4], beta [4].
  check_op(
      "layer_norm axis -1",
      [eps](const Args& a) { return kiln::nn::layer_norm(a[0], a[1], a[2], -1, eps); },
      {x, gamma4, beta4}, x.shape,
      [&](kiln::DType d) {
        auto y = standardize_rows(x.seen(d), 4, eps);
        const auto g = gamma4.seen(d), b = beta4.seen(d);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = y[i] * g[i % 4] + b[i % 4];
        return y;
      });
  // axis 1: rows of 12, gamma [3,4], no beta.
  check_op(
      "layer_norm axis 1",
      [eps](const Args& a) { return kiln::nn::layer_norm(a[0], a[1], Tensor(), 1, eps); },
      {x, gamma34}, x.shape,
      [&](kiln::DType d) {
        auto y = standardize_rows(x.seen(d), 12, eps);
        const auto g = gamma34.seen(d);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] *= g[i % 12];
        return y;
      });
  // No gamma, a beta; default epsilon.
  check_op(
      "layer_norm beta only",
      [](const Args& a) { return kiln::nn::layer_norm(a[0], Tensor(), a[1], 1); }, {x, beta1},
      x.shape,
      [&](kiln::DType d) {
        auto y = standardize_rows(x.seen(d), 12, 1e-5);
        const auto b = beta1.seen(d);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] += b[i % 4];
        return y;
      });
  const auto rms = [&](const std::vector<double>& v, std::size_t inner, double e) {
    std::vector<double> y(v.size());
    for (std::size_t row = 0; row * inner < v.size(); ++row) {
      double ms = 0;
      for (std::size_t i = 0; i < inner; ++i) ms += v[row * inner + i] * v[row * inner + i];
      ms /= static_cast<double>(inner);
      for (std::size_t i = 0; i < inner; ++i)
        y[row * inner + i] = v[row * inner + i] / std::sqrt(ms + e);
    }
    return y;
  };
  check_op(
      "rms_norm axis -1", [](const Args& a) { return kiln::nn::rms_norm(a[0], a[1]); }, {x, gamma4},
      x.shape,
      [&](kiln::DType d) {
        auto y = rms(x.seen(d), 4, 1e-6);
        const auto g = gamma4.seen(d);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] *= g[i % 4];
        return y;
      });
  check_op(
      "rms_norm axis -2 no gamma",
      [eps](const Args& a) { return kiln::nn::rms_norm(a[0], Tensor(), -2, eps); }, {x}, x.shape,
      [&](kiln::DType d) { return rms(x.seen(d), 12, eps); });
}

TEST_CASE("batch_norm uses the given statistics per channel", "[nn_ops]") {
  const Input mean = input({3}, 11), var = input({3}, 12, 0.2, 2);
  const Input gamma = input({3}, 13, 0.5, 1.5), beta = input({3}, 14);
  for (const auto& [shape, axis, stride] :
       {std::tuple<Shape, std::int64_t, std::size_t>{{2, 3, 2, 2}, 1, 4},
        std::tuple<Shape, std::int64_t, std::size_t>{{2, 2, 3}, -1, 1}}) {
    const Input x = input(shape, 10, -2, 2);
    const std::int64_t channel_axis = axis;
    check_op(
        "batch_norm axis " + std::to_string(axis),
        [channel_axis](const Args& a) {
          return kiln::nn::batch_norm(a[0], a[1], a[2], a[3], a[4], 1e-3, channel_axis);
        },
        {x, mean, var, gamma, beta}, shape,
        [&, stride](kiln::DType d) {
          const auto v = x.seen(d), m = mean.seen(d), s = var.seen(d), g = gamma.seen(d),
                     b = beta.seen(d);
          std::vector<double> y(v.size());
          for (std::size_t i = 0; i < v.size(); ++i) {
            const std::size_t c = (i / stride) % 3;
            y[i] = (v[i] - m[c]) / std::sqrt(s[c] + 1e-3) * g[c] + b[c];
          }
          return y;
        });
  }
  const Input x = input({2, 3, 2}, 15);
  check_op(
      "batch_norm without gamma and beta",
      [](const Args& a) { return kiln::nn::batch_norm(a[0], a[1], a[2], Tensor(), Tensor()); },
      {x, mean, var}, x.shape,
      [&](kiln::DType d) {
        const auto v = x.seen(d), m = mean.seen(d), s = var.seen(d);
        std::vector<double> y(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
          const std::size_t c = (i / 2) % 3;
          y[i] = (v[i] - m[c]) / std::sqrt(s[c] + 1e-5);
        }
        return y;
      });
}

TEST_CASE("instance_norm and group_norm normalize per sample", "[nn_ops]") {
  const Input x = input({2, 3, 4}, 20, -2, 2);
  const Input gamma = input({3}, 21, 0.5, 1.5), beta = input({3}, 22);
  check_op(
      "instance_norm",
      [](const Args& a) { return kiln::nn::instance_norm(a[0], a[1], a[2], 1e-3); },
      {x, gamma, beta}, x.shape,
      [&](kiln::DType d) {
        auto y = standardize_rows(x.seen(d), 4, 1e-3);
        const auto g = gamma.seen(d), b = beta.seen(d);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = y[i] * g[(i / 4) % 3] + b[(i / 4) % 3];
        return y;
      });
  const Input x4 = input({2, 4, 3}, 23, -2, 2);
  const Input gamma4 = input({4}, 24, 0.5, 1.5), beta4 = input({4}, 25);
  for (std::int64_t groups : {1, 2, 4}) {
    check_op(
        "group_norm groups " + std::to_string(groups),
        [groups](const Args& a) { return kiln::nn::group_norm(a[0], groups, a[1], a[2]); },
        {x4, gamma4, beta4}, x4.shape,
        [&](kiln::DType d) {
          auto y = standardize_rows(x4.seen(d), static_cast<std::size_t>(12 / groups), 1e-5);
          const auto g = gamma4.seen(d), b = beta4.seen(d);
          for (std::size_t i = 0; i < y.size(); ++i) y[i] = y[i] * g[(i / 3) % 4] + b[(i / 3) % 4];
          return y;
        });
  }
  const Input x2 = input({3, 4}, 26);
  check_op(
      "group_norm rank 2, no gamma or beta",
      [](const Args& a) { return kiln::nn::group_norm(a[0], 2, Tensor(), Tensor()); }, {x2},
      x2.shape, [&](kiln::DType d) { return standardize_rows(x2.seen(d), 2, 1e-5); });
}

namespace {

/// Attention by loops: batch of B, q [B, Lq, E], k [B, Lk, E], v [B, Lk, Ev]; allowed(b, i, j)
/// and bias(b, i, j) give the mask. A row with nothing allowed is zero.
std::vector<double> attention_reference(
    const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
    std::size_t B, std::size_t Lq, std::size_t Lk, std::size_t E, std::size_t Ev, double scale,
    const std::function<bool(std::size_t, std::size_t, std::size_t)>& allowed,
    const std::function<double(std::size_t, std::size_t, std::size_t)>& bias) {
  std::vector<double> out(B * Lq * Ev, 0.0);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Lq; ++i) {
      std::vector<double> s(Lk, 0.0);
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < Lk; ++j) {
        for (std::size_t e = 0; e < E; ++e)
          s[j] += q[(b * Lq + i) * E + e] * k[(b * Lk + j) * E + e];
        s[j] = s[j] * scale + bias(b, i, j);
        if (allowed(b, i, j)) top = std::max(top, s[j]);
      }
      double total = 0;
      std::vector<double> p(Lk, 0.0);
      for (std::size_t j = 0; j < Lk; ++j)
        if (allowed(b, i, j)) total += p[j] = std::exp(s[j] - top);
      if (total == 0) continue;
      for (std::size_t j = 0; j < Lk; ++j)
        for (std::size_t e = 0; e < Ev; ++e)
          out[(b * Lq + i) * Ev + e] += p[j] / total * v[(b * Lk + j) * Ev + e];
    }
  return out;
}

}  // namespace

TEST_CASE("scaled_dot_product_attention", "[nn_ops]") {
  const Input q = input({2, 3, 4}, 30, -2, 2), k = input({2, 5, 4}, 31, -2, 2);
  const Input v = input({2, 5, 3}, 32);
  const Input bias = input({3, 5}, 33);
  const Shape out{2, 3, 3};
  const auto none = [](std::size_t, std::size_t, std::size_t) { return 0.0; };
  const auto all = [](std::size_t, std::size_t, std::size_t) { return true; };
  const auto reference = [&](kiln::DType d, double scale, auto allowed, auto add) {
    return attention_reference(q.seen(d), k.seen(d), v.seen(d), 2, 3, 5, 4, 3, scale, allowed, add);
  };
  check_op(
      "attention",
      [](const Args& a) { return kiln::nn::scaled_dot_product_attention(a[0], a[1], a[2]); },
      {q, k, v}, out, [&](kiln::DType d) { return reference(d, 0.5, all, none); });
  check_op(
      "attention scale 0.3",
      [](const Args& a) {
        return kiln::nn::scaled_dot_product_attention(a[0], a[1], a[2], {.scale = 0.3});
      },
      {q, k, v}, out, [&](kiln::DType d) { return reference(d, 0.3, all, none); });
  check_op(
      "attention causal",
      [](const Args& a) {
        return kiln::nn::scaled_dot_product_attention(a[0], a[1], a[2], {.causal = true});
      },
      {q, k, v}, out,
      [&](kiln::DType d) {
        return reference(
            d, 0.5, [](std::size_t, std::size_t i, std::size_t j) { return j <= i; }, none);
      });
  // A boolean mask [Lq, Lk] with row 1 fully masked (that row gives zeros), combined with causal.
  const std::vector<bool> keep = {true,  false, true, true, false, false, false, false,
                                  false, false, true, true, false, true,  true};
  const auto keep_at = [&keep](std::size_t, std::size_t i, std::size_t j) {
    return keep[i * 5 + j];
  };
  check_op(
      "attention boolean mask",
      [&keep](const Args& a) {
        return kiln::nn::scaled_dot_product_attention(a[0], a[1], a[2],
                                                      {.mask = kiln::tensor(keep, {3, 5})});
      },
      {q, k, v}, out, [&](kiln::DType d) { return reference(d, 0.5, keep_at, none); });
  check_op(
      "attention boolean mask and causal",
      [&keep](const Args& a) {
        return kiln::nn::scaled_dot_product_attention(
            a[0], a[1], a[2], {.mask = kiln::tensor(keep, {3, 5}), .causal = true});
      },
      {q, k, v}, out,
      [&](kiln::DType d) {
        return reference(
            d, 0.5,
            [&](std::size_t b, std::size_t i, std::size_t j) { return keep_at(b, i, j) && j <= i; },
            none);
      });
  // An additive float mask (an input, so its gradient is checked too).
  check_op(
      "attention float mask",
      [](const Args& a) {
        return kiln::nn::scaled_dot_product_attention(a[0], a[1], a[2], {.mask = a[3]});
      },
      {q, k, v, bias}, out,
      [&](kiln::DType d) {
        const auto bv = bias.seen(d);
        return reference(d, 0.5, all, [&bv](std::size_t, std::size_t i, std::size_t j) {
          return bv[i * 5 + j];
        });
      });
  // -inf entries of a float mask forbid; a row of them gives zeros.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> minus(15, 0.0);
  for (std::size_t j = 0; j < 5; ++j) minus[5 + j] = -inf;
  minus[2] = -inf;
  check_op(
      "attention -inf mask",
      [&minus](const Args& a) {
        return kiln::nn::scaled_dot_product_attention(
            a[0], a[1], a[2], {.mask = kiln::cast(kiln::tensor(minus, {3, 5}), a[0].dtype())});
      },
      {q, k, v}, out,
      [&](kiln::DType d) {
        return reference(
            d, 0.5,
            [&](std::size_t, std::size_t i, std::size_t j) { return minus[i * 5 + j] == 0.0; },
            none);
      });
  // Broadcast batch dims: one k and v for both queries' batches.
  const Input k1 = input({5, 4}, 34), v1 = input({1, 5, 3}, 35);
  check_op(
      "attention broadcast batch",
      [](const Args& a) { return kiln::nn::scaled_dot_product_attention(a[0], a[1], a[2]); },
      {q, k1, v1}, out,
      [&](kiln::DType d) {
        std::vector<double> kk = k1.seen(d), vv = v1.seen(d);
        kk.insert(kk.end(), kk.begin(), kk.end());
        vv.insert(vv.end(), vv.begin(), vv.end());
        return attention_reference(q.seen(d), kk, vv, 2, 3, 5, 4, 3, 0.5, all, none);
      });
}

TEST_CASE("normalization and attention errors", "[nn_ops]") {
  using Catch::StartsWith;
  const Tensor x = kiln::zeros({2, 3, 4}), c3 = kiln::ones({3}),
               ints = kiln::zeros({2, 3}, kiln::i32);
  CHECK_THROWS_WITH(kiln::nn::moments(ints, {0}), "[moments] x must be f32 or f64, got i32 [2,3]");
  CHECK_THROWS_WITH(kiln::nn::moments(x, {0, -3}), "[moments] axis 0 listed twice");
  CHECK_THROWS_WITH(kiln::nn::moments(x, {3}), "[moments] axis 3 out of range for rank 3");
  CHECK_THROWS_WITH(kiln::nn::moments(Tensor(), {}), "[moments] x is an undefined tensor");

  CHECK_THROWS_WITH(kiln::nn::layer_norm(ints, Tensor(), Tensor()),
                    "[layer_norm] x must be f32 or f64, got i32 [2,3]");
  CHECK_THROWS_WITH(kiln::nn::layer_norm(x, c3, Tensor()),
                    "[layer_norm] gamma of shape [3] does not broadcast to x.shape[2:] = [4]");
  CHECK_THROWS_WITH(kiln::nn::layer_norm(x, Tensor(), kiln::ones({2, 3, 4}), 1),
                    "[layer_norm] beta of shape [2,3,4] does not broadcast to x.shape[1:] = [3,4]");
  CHECK_THROWS_WITH(kiln::nn::layer_norm(x, kiln::ones({4}, kiln::f64), Tensor()),
                    "[layer_norm] gamma has dtype f64, but x has f32 (use kiln::cast)");
  CHECK_THROWS_WITH(kiln::nn::layer_norm(x, Tensor(), Tensor(), 3),
                    "[layer_norm] axis 3 out of range for rank 3");
  CHECK_THROWS_WITH(kiln::nn::rms_norm(x, kiln::ones({3, 1})),
                    "[rms_norm] gamma of shape [3,1] does not broadcast to x.shape[2:] = [4]");
  CHECK_THROWS_WITH(kiln::nn::rms_norm(ints, Tensor()),
                    "[rms_norm] x must be f32 or f64, got i32 [2,3]");
  CHECK_THROWS_WITH(kiln::nn::rms_norm(x, kiln::ones({4}, kiln::i32)),
                    "[rms_norm] gamma must be f32 or f64, got i32 [4]");

  CHECK_THROWS_WITH(kiln::nn::batch_norm(kiln::zeros({3}), c3, c3, c3, c3),
                    "[batch_norm] x needs rank >= 2 (a batch with a channel axis), got shape [3]");
  CHECK_THROWS_WITH(kiln::nn::batch_norm(x, Tensor(), c3, c3, c3),
                    "[batch_norm] mean is an undefined tensor");
  CHECK_THROWS_WITH(kiln::nn::batch_norm(x, c3, Tensor(), c3, c3),
                    "[batch_norm] variance is an undefined tensor");
  CHECK_THROWS_WITH(kiln::nn::batch_norm(x, c3, c3, kiln::ones({4}), c3),
                    "[batch_norm] gamma must have shape [3] (one value per channel of x [2,3,4] "
                    "along axis 1), got [4]");
  CHECK_THROWS_WITH(kiln::nn::batch_norm(x, c3, c3, c3, c3, 1e-5, -1),
                    StartsWith("[batch_norm] mean must have shape [4]"));
  CHECK_THROWS_WITH(kiln::nn::batch_norm(x, c3, c3, c3, c3, 1e-5, 3),
                    "[batch_norm] axis 3 out of range for rank 3");
  CHECK_THROWS_WITH(kiln::nn::batch_norm(x, c3, kiln::ones({3}, kiln::f64), c3, c3),
                    "[batch_norm] variance has dtype f64, but x has f32 (use kiln::cast)");

  CHECK_THROWS_WITH(
      kiln::nn::instance_norm(kiln::zeros({2, 3}), c3, c3),
      "[instance_norm] x needs rank >= 3 (N, C and at least one spatial axis), got shape [2,3]");
  CHECK_THROWS_WITH(kiln::nn::instance_norm(x, kiln::ones({2}), c3),
                    StartsWith("[instance_norm] gamma must have shape [3]"));
  CHECK_THROWS_WITH(kiln::nn::instance_norm(x, c3, kiln::ones({3, 1})),
                    StartsWith("[instance_norm] beta must have shape [3]"));
  CHECK_THROWS_WITH(kiln::nn::group_norm(x, 2, c3, c3),
                    "[group_norm] groups 2 does not divide the 3 channels of x [2,3,4]");
  CHECK_THROWS_WITH(kiln::nn::group_norm(x, 0, c3, c3),
                    "[group_norm] groups must be positive, got 0");
  CHECK_THROWS_WITH(kiln::nn::group_norm(kiln::zeros({3}), 1, c3, c3),
                    "[group_norm] x needs rank >= 2 (N, C and any spatial axes), got shape [3]");
  CHECK_THROWS_WITH(kiln::nn::group_norm(x, 3, kiln::ones({4}), c3),
                    StartsWith("[group_norm] gamma must have shape [3]"));
  kiln::FunctionOptions o;
  o.input_signature = {kiln::TensorSpec({2, -1, 4})};
  auto dynamic_channels = kiln::function(
      [](const Tensor& t) { return kiln::nn::group_norm(t, 1, Tensor(), Tensor()); }, o);
  CHECK_THROWS_WITH(dynamic_channels(x),
                    StartsWith("[group_norm] a channel or spatial dim is a dynamic dim"));

  const Tensor q = kiln::zeros({2, 3, 4}), k = kiln::zeros({2, 5, 4}), v = kiln::zeros({2, 5, 3});
  const auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c,
                       const kiln::nn::AttentionOptions& opt = {}) {
    return kiln::nn::scaled_dot_product_attention(a, b, c, opt);
  };
  CHECK_THROWS_WITH(sdpa(ints, k, v),
                    "[scaled_dot_product_attention] q must be f32 or f64, got i32 [2,3]");
  CHECK_THROWS_WITH(sdpa(q, Tensor(), v),
                    "[scaled_dot_product_attention] k is an undefined tensor");
  CHECK_THROWS_WITH(
      sdpa(q, k, kiln::zeros({2, 5, 3}, kiln::f64)),
      "[scaled_dot_product_attention] v has dtype f64, but q has f32 (use kiln::cast)");
  CHECK_THROWS_WITH(sdpa(kiln::zeros({4}), k, v),
                    "[scaled_dot_product_attention] q, k and v need rank >= 2 ([..., L, E]), got "
                    "shapes [4], [2,5,4] and [2,5,3]");
  CHECK_THROWS_WITH(sdpa(q, kiln::zeros({2, 5, 3}), v),
                    "[scaled_dot_product_attention] q [2,3,4] and k [2,5,3] have different feature "
                    "sizes E (4 vs 3)");
  CHECK_THROWS_WITH(sdpa(q, k, kiln::zeros({2, 4, 3})),
                    "[scaled_dot_product_attention] k [2,5,4] and v [2,4,3] have different key "
                    "counts Lk (5 vs 4)");
  CHECK_THROWS_WITH(sdpa(q, kiln::zeros({3, 5, 4}), v),
                    StartsWith("[scaled_dot_product_attention] shapes [2] and [3] cannot be "
                               "broadcast"));
  CHECK_THROWS_WITH(sdpa(q, k, v, {.mask = kiln::zeros({3, 5}, kiln::i32)}),
                    "[scaled_dot_product_attention] mask must be boolean or f32 like q, got i32");
  CHECK_THROWS_WITH(sdpa(q, k, v, {.mask = kiln::zeros({5, 3})}),
                    "[scaled_dot_product_attention] mask of shape [5,3] does not broadcast to the "
                    "scores' shape [2,3,5] ([..., Lq, Lk])");
  CHECK_THROWS_WITH(sdpa(q, k, v, {.mask = kiln::zeros({1, 2, 3, 5})}),
                    StartsWith("[scaled_dot_product_attention] mask of shape [1,2,3,5] does not "
                               "broadcast"));
  o.input_signature = {kiln::TensorSpec({2, -1, 4})};
  auto dynamic_queries =
      kiln::function([&](const Tensor& t) { return sdpa(t, k, v, {.causal = true}); }, o);
  CHECK_THROWS_WITH(dynamic_queries(q),
                    StartsWith("[scaled_dot_product_attention] Lq (for the causal mask) is a "
                               "dynamic dim"));
  CHECK(kiln::function([&](const Tensor& t) { return sdpa(t, k, v); }, o)(q).shape() ==
        Shape{2, 3, 3});
  o.input_signature = {kiln::TensorSpec({2, 3, -1})};
  const Tensor v3 = kiln::zeros({2, 3, 3});
  auto dynamic_features = kiln::function([&](const Tensor& t) { return sdpa(t, t, v3); }, o);
  CHECK_THROWS_WITH(dynamic_features(q),
                    StartsWith("[scaled_dot_product_attention] the feature size E (for the "
                               "default scale) is a dynamic dim"));
  auto scaled = kiln::function([&](const Tensor& t) { return sdpa(t, t, v3, {.scale = 0.5}); }, o);
  CHECK(scaled(q).shape() == Shape{2, 3, 3});
}

TEST_CASE("the composite ops export to ONNX and onnxruntime agrees", "[nn_ops][onnx]") {
  const std::string python = io_test::test_python("onnx, onnxruntime");
  if (!KILN_HAVE_ONNX || python.empty()) {
    WARN("skipped: kiln without ONNX, or no Python with onnx and onnxruntime");
    return;
  }
  const Tensor x = kiln::random::uniform({2, 4, 5, 6}, -1, 1, 1);
  const Tensor w = kiln::random::uniform({2, 4, 7, 6}, -1, 1, 2);
  const Tensor g4 = kiln::random::uniform({4}, 0.5, 1.5, 3),
               b4 = kiln::random::uniform({4}, -1, 1, 4);
  const Tensor g6 = kiln::random::uniform({6}, 0.5, 1.5, 5);
  const auto model = [&](const Tensor& in) {
    const Tensor scores = kiln::einsum("bhqd,bhkd->bhqk", {in, w});
    const Tensor padded =
        kiln::pad(kiln::tril(scores, 1), {{0, 0}, {0, 0}, {2, 1}, {1, 3}}, kiln::PadMode::reflect);
    const Tensor edge = kiln::pad(in, {{0, 0}, {0, 0}, {1, 1}, {2, 0}}, kiln::PadMode::edge);
    const Tensor wrapped = kiln::pad(in, {{0, 0}, {0, 0}, {0, 2}, {3, 1}}, kiln::PadMode::wrap);
    const Tensor up = kiln::resize(in, {2, 4, 9, 4}, {.mode = kiln::ResizeMode::linear});
    const Tensor near = kiln::resize(
        in, {2, 4, 3, 11},
        {.coordinates = kiln::CoordinateMode::asymmetric, .nearest = kiln::NearestRounding::ceil});
    const Tensor normed = kiln::nn::group_norm(kiln::nn::layer_norm(in, g6, Tensor()), 2, g4, b4);
    const Tensor attended =
        kiln::nn::scaled_dot_product_attention(kiln::nn::rms_norm(in, g6), w, w, {.causal = true});
    const auto [m, v] = kiln::nn::moments(kiln::triu(in), {1, 3});
    return std::vector<Tensor>{padded,   edge,  wrapped,
                               up,       near,  kiln::nn::instance_norm(normed, g4, b4),
                               attended, m + v, kiln::nn::batch_norm(in, b4, g4, g4, b4, 1e-3, 1)};
  };
  io_test::TempDir dir;
  auto f = kiln::function(model, {.name = "nn_ops"});
  kiln::export_onnx(f.get_concrete_function(x), dir / "nn_ops.onnx");
  nlohmann::json outputs = nlohmann::json::array();
  int file = 0;
  const auto save = [&](const Tensor& t) {
    const std::string name = fmt::format("t{}.npy", file++);
    kiln::io::save_npy(dir / name, t);
    return name;
  };
  for (const Tensor& out : f(x)) outputs.push_back(save(out));
  nlohmann::json manifest = nlohmann::json::array();
  manifest.push_back(
      {{"model", "nn_ops.onnx"}, {"runs", {{{"inputs", {save(x)}}, {"outputs", outputs}}}}});
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  const std::string command = fmt::format("'{}' '{}/check_onnx.py' '{}'", python,
                                          test_paths::data_dir(), dir.path().string());
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

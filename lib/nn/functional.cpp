// kiln::nn's normalization and attention functions, written with kiln ops: each validates its
// arguments (so its errors name it) and then composes public ops; layer_norm and rms_norm run as
// primitives over contiguous static rows (normalized_rows).
#include "kiln/nn/functional.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln::nn {

namespace {

using detail::fail;

/// x, after "[op] <what> is an undefined tensor" and "[op] <what> must be f32 or f64".
const Tensor& floating(const Tensor& x, std::string_view op, std::string_view what) {
  if (!x.defined()) fail(op, "{} is an undefined tensor", what);
  if (!is_floating(x.dtype()))
    fail(op, "{} must be f32 or f64, got {} {}", what, x.dtype(), x.shape());
  return x;
}

/// Checks a parameter that must share x's (floating) dtype.
void check_like(const Tensor& t, const Tensor& x, std::string_view op, std::string_view what,
                std::string_view x_name = "x") {
  floating(t, op, what);
  if (t.dtype() != x.dtype())
    fail(op, "{} has dtype {}, but {} has {} (use kiln::cast)", what, t.dtype(), x_name, x.dtype());
}

/// The axes [first, rank).
std::vector<std::int64_t> axes_from(std::int64_t first, std::int64_t rank) {
  std::vector<std::int64_t> axes;
  for (std::int64_t a = first; a < rank; ++a) axes.push_back(a);
  return axes;
}

/// Checks that an optional parameter broadcasts to x.shape[first:] (right-aligned, each dim
/// equal or 1) without growing it.
void check_broadcasts_to_tail(const Tensor& t, const Tensor& x, std::int64_t first,
                              std::string_view op, std::string_view what) {
  if (!t.defined()) return;
  check_like(t, x, op, what);
  const Shape& tail_source = x.shape();
  const auto tail_rank = static_cast<std::size_t>(x.ndim() - first);
  bool ok = t.shape().size() <= tail_rank;
  for (std::size_t i = 0; ok && i < t.shape().size(); ++i) {
    const std::int64_t d = t.shape()[t.shape().size() - 1 - i];
    ok = d == 1 || d == tail_source[tail_source.size() - 1 - i];
  }
  if (!ok) {
    Shape tail;
    for (std::size_t i = static_cast<std::size_t>(first); i < tail_source.size(); ++i)
      tail.push_back(tail_source[i]);
    fail(op, "{} of shape {} does not broadcast to x.shape[{}:] = {}", what, t.shape(), first,
         tail);
  }
}

/// A per-channel vector [C] reshaped to broadcast along x's axis `channel` (undefined stays).
Tensor per_channel(const Tensor& t, const Tensor& x, std::size_t channel, std::string_view op,
                   std::string_view what) {
  if (!t.defined()) return t;
  check_like(t, x, op, what);
  const std::int64_t channels = x.shape()[channel];
  if (t.ndim() != 1 || t.dim(0) != channels)
    fail(op, "{} must have shape [{}] (one value per channel of x {} along axis {}), got {}", what,
         detail::dim_text(channels), x.shape(), channel, t.shape());
  Shape shape(std::vector<std::int64_t>(x.shape().size(), 1));
  shape[channel] = channels;
  return reshape(t, shape);
}

/// y * gamma + beta, either optional.
Tensor affine(Tensor y, const Tensor& gamma, const Tensor& beta) {
  if (gamma.defined()) y = y * gamma;
  if (beta.defined()) y = y + beta;
  return y;
}

/// (x - mean) / sqrt(var + epsilon) * gamma + beta, the last two optional.
Tensor standardized(const Tensor& x, const Tensor& mean, const Tensor& var, double epsilon,
                    const Tensor& gamma, const Tensor& beta) {
  return affine((x - mean) * rsqrt(var + epsilon), gamma, beta);
}

/// The layer_norm or rms_norm primitive over the rows x.shape[first:], with gamma and beta (where
/// defined) broadcast to the rows' shape; an undefined Tensor where it does not apply (a dynamic
/// dim, an empty x), and the caller's composite runs. The primitive reads each row from memory
/// once and writes it once; the composite makes five passes over x and four temporaries.
Tensor normalized_rows(detail::Prim p, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       std::int64_t first, double epsilon) {
  if (x.shape().has_dynamic_dims() || x.size() == 0) return Tensor();
  Shape tail;
  for (std::size_t d = static_cast<std::size_t>(first); d < x.shape().size(); ++d)
    tail.push_back(x.shape()[d]);
  detail::Attrs attrs;
  attrs.axes = Shape{first};
  attrs.value = epsilon;
  std::vector<Tensor> inputs{x};
  const auto add = [&](const Tensor& t) {  // the layout detail::normalize_inputs reads
    attrs.ints.push_back(t.defined() ? 1 : 0);
    if (t.defined()) inputs.push_back(t.shape() == tail ? t : broadcast_to(t, tail));
  };
  add(gamma);
  if (p == detail::Prim::layer_norm) add(beta);
  return detail::apply(p, inputs, attrs, x.dtype(), x.shape());
}

void check_rank(const Tensor& x, std::int64_t min_rank, std::string_view op,
                std::string_view layout) {
  if (x.ndim() < min_rank)
    fail(op, "x needs rank >= {} ({}), got shape {}", min_rank, layout, x.shape());
}

}  // namespace

std::pair<Tensor, Tensor> moments(const Tensor& x, const std::vector<std::int64_t>& axes,
                                  bool keepdims) {
  floating(x, "moments", "x");
  std::array<bool, Shape::max_rank> seen{};
  std::vector<std::int64_t> normalized;
  for (auto axis : axes) {
    const auto a = detail::normalize_axis(axis, x.ndim(), "moments");
    if (seen[static_cast<std::size_t>(a)]) fail("moments", "axis {} listed twice", a);
    seen[static_cast<std::size_t>(a)] = true;
    normalized.push_back(a);
  }
  const Tensor kept_mean = mean(x, normalized, true);
  const Tensor variance = mean(square(x - kept_mean), normalized, keepdims);
  return {keepdims ? kept_mean : squeeze(kept_mean, normalized), variance};
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t axis,
                  double epsilon) {
  constexpr std::string_view op = "layer_norm";
  floating(x, op, "x");
  const std::int64_t first = detail::normalize_axis(axis, x.ndim(), op);
  check_broadcasts_to_tail(gamma, x, first, op, "gamma");
  check_broadcasts_to_tail(beta, x, first, op, "beta");
  if (Tensor y = normalized_rows(detail::Prim::layer_norm, x, gamma, beta, first, epsilon);
      y.defined())
    return y;
  const std::vector<std::int64_t> axes = axes_from(first, x.ndim());
  const Tensor m = mean(x, axes, true);
  const Tensor var = mean(square(x - m), axes, true);
  return standardized(x, m, var, epsilon, gamma, beta);
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, std::int64_t axis, double epsilon) {
  constexpr std::string_view op = "rms_norm";
  floating(x, op, "x");
  const std::int64_t first = detail::normalize_axis(axis, x.ndim(), op);
  check_broadcasts_to_tail(gamma, x, first, op, "gamma");
  if (Tensor y = normalized_rows(detail::Prim::rms_norm, x, gamma, Tensor(), first, epsilon);
      y.defined())
    return y;
  const Tensor y = x * rsqrt(mean(square(x), axes_from(first, x.ndim()), true) + epsilon);
  return gamma.defined() ? y * gamma : y;
}

Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& variance, const Tensor& gamma,
                  const Tensor& beta, double epsilon, std::int64_t channel_axis) {
  constexpr std::string_view op = "batch_norm";
  floating(x, op, "x");
  check_rank(x, 2, op, "a batch with a channel axis");
  const auto channel = static_cast<std::size_t>(detail::normalize_axis(channel_axis, x.ndim(), op));
  if (!mean.defined()) fail(op, "mean is an undefined tensor");
  if (!variance.defined()) fail(op, "variance is an undefined tensor");
  const Tensor m = per_channel(mean, x, channel, op, "mean");
  const Tensor var = per_channel(variance, x, channel, op, "variance");
  const Tensor g = per_channel(gamma, x, channel, op, "gamma");
  const Tensor b = per_channel(beta, x, channel, op, "beta");
  Tensor scale = rsqrt(var + epsilon);
  if (g.defined()) scale = scale * g;
  return affine((x - m) * scale, Tensor(), b);
}

Tensor instance_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon) {
  constexpr std::string_view op = "instance_norm";
  floating(x, op, "x");
  check_rank(x, 3, op, "N, C and at least one spatial axis");
  const Tensor g = per_channel(gamma, x, 1, op, "gamma");
  const Tensor b = per_channel(beta, x, 1, op, "beta");
  const std::vector<std::int64_t> axes = axes_from(2, x.ndim());
  const Tensor m = kiln::mean(x, axes, true);
  const Tensor var = kiln::mean(square(x - m), axes, true);
  return standardized(x, m, var, epsilon, g, b);
}

Tensor group_norm(const Tensor& x, std::int64_t groups, const Tensor& gamma, const Tensor& beta,
                  double epsilon) {
  constexpr std::string_view op = "group_norm";
  floating(x, op, "x");
  check_rank(x, 2, op, "N, C and any spatial axes");
  for (std::size_t d = 1; d < x.shape().size(); ++d)
    detail::require_static_dim(x.shape()[d], op, "a channel or spatial dim");
  const std::int64_t channels = x.dim(1);
  if (groups <= 0) fail(op, "groups must be positive, got {}", groups);
  if (channels % groups != 0)
    fail(op, "groups {} does not divide the {} channels of x {}", groups, channels, x.shape());
  const Tensor g = per_channel(gamma, x, 1, op, "gamma");
  const Tensor b = per_channel(beta, x, 1, op, "beta");
  std::int64_t per_group = channels / groups;
  for (std::size_t d = 2; d < x.shape().size(); ++d) per_group *= x.shape()[d];
  const Tensor grouped = reshape(x, Shape{x.dim(0), groups, per_group});
  const Tensor m = kiln::mean(grouped, {2}, true);
  const Tensor var = kiln::mean(square(grouped - m), {2}, true);
  const Tensor y = reshape((grouped - m) * rsqrt(var + epsilon), x.shape());
  return affine(y, g, b);
}

namespace {

/// attention_weights for op `op` (whose name errors carry).
Tensor attention_weights_of(const Tensor& q, const Tensor& k, const AttentionOptions& options,
                            std::string_view op) {
  floating(q, op, "q");
  check_like(k, q, op, "k", "q");
  if (q.ndim() < 2 || k.ndim() < 2)
    fail(op, "q and k need rank >= 2 ([..., L, E]), got shapes {} and {}", q.shape(), k.shape());
  if (q.dim(-1) != k.dim(-1))
    fail(op, "q {} and k {} have different feature sizes E ({} vs {})", q.shape(), k.shape(),
         detail::dim_text(q.dim(-1)), detail::dim_text(k.dim(-1)));
  const auto batch_of = [](const Tensor& t) {
    Shape batch;
    for (std::size_t d = 0; d + 2 < t.shape().size(); ++d) batch.push_back(t.shape()[d]);
    return batch;
  };
  const Shape batch = detail::broadcast_shapes(batch_of(q), batch_of(k), op);
  double scale = 0;
  if (options.scale) {
    scale = *options.scale;
  } else {
    detail::require_static_dim(q.dim(-1), op, "the feature size E (for the default scale)");
    scale = 1.0 / std::sqrt(static_cast<double>(q.dim(-1)));
  }
  const std::int64_t lq = q.dim(-2), lk = k.dim(-2);
  Shape scores_shape = batch;
  scores_shape.push_back(lq);
  scores_shape.push_back(lk);

  std::vector<std::int64_t> swap_last = axes_from(0, k.ndim());
  std::swap(swap_last[swap_last.size() - 1], swap_last[swap_last.size() - 2]);
  // q scaled before the product: [.., Lq, E] elements instead of the scores' [.., Lq, Lk].
  Tensor scores = matmul(q * scale, transpose(k, swap_last));
  Tensor allowed;  // undefined: every key may be attended to
  if (options.mask.defined()) {
    const Tensor& mask = options.mask;
    if (mask.dtype() != DType::boolean && mask.dtype() != q.dtype())
      fail(op, "mask must be boolean or {} like q, got {}", q.dtype(), mask.dtype());
    bool ok = mask.shape().size() <= scores_shape.size();
    for (std::size_t i = 0; ok && i < mask.shape().size(); ++i) {
      const std::int64_t d = mask.shape()[mask.shape().size() - 1 - i];
      ok = d == 1 || d == scores_shape[scores_shape.size() - 1 - i];
    }
    if (!ok)
      fail(op, "mask of shape {} does not broadcast to the scores' shape {} ([..., Lq, Lk])",
           mask.shape(), scores_shape);
    if (mask.dtype() == DType::boolean) {
      allowed = mask;
    } else {
      scores = scores + mask;
      allowed = not_equal(mask, -std::numeric_limits<double>::infinity());
    }
  }
  if (options.causal) {
    detail::require_static_dim(lq, op, "Lq (for the causal mask)");
    detail::require_static_dim(lk, op, "Lk (for the causal mask)");
    const Tensor causal =
        reshape(arange(lk, i64), Shape{1, lk}) <= reshape(arange(lq, i64), Shape{lq, 1});
    allowed = allowed.defined() ? logical_and(allowed, causal) : causal;
  }
  if (!allowed.defined()) return softmax(scores, -1);
  // Forbidden scores become -inf; a row with nothing allowed gets finite scores (any values) so
  // that its softmax is not NaN, and its weights are then zeroed with every forbidden one.
  const Tensor zero = detail::scalar_like(0.0, scores);
  scores =
      where(allowed, scores, detail::scalar_like(-std::numeric_limits<double>::infinity(), scores));
  scores = where(any(allowed, {-1}, true), scores, zero);
  return where(allowed, softmax(scores, -1), zero);
}

}  // namespace

Tensor attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  return attention_weights_of(q, k, options, "attention_weights");
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  constexpr std::string_view op = "scaled_dot_product_attention";
  floating(q, op, "q");
  check_like(k, q, op, "k", "q");
  check_like(v, q, op, "v", "q");
  if (q.ndim() < 2 || k.ndim() < 2 || v.ndim() < 2)
    fail(op, "q, k and v need rank >= 2 ([..., L, E]), got shapes {}, {} and {}", q.shape(),
         k.shape(), v.shape());
  if (k.dim(-2) != v.dim(-2))
    fail(op, "k {} and v {} have different key counts Lk ({} vs {})", k.shape(), v.shape(),
         detail::dim_text(k.dim(-2)), detail::dim_text(v.dim(-2)));
  const Tensor weights = attention_weights_of(q, k, options, op);
  const auto batch_of = [](const Shape& s) {
    return Shape(std::span<const std::int64_t>(s.data(), s.size() - 2));
  };
  (void)detail::broadcast_shapes(batch_of(weights.shape()), batch_of(v.shape()), op);
  return matmul(weights, v);
}

}  // namespace kiln::nn

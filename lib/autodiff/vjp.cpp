// Vector-Jacobian rules of the primitives, written with kiln ops so that they work eagerly, under
// an outer tape (higher derivatives) and while tracing.
#include <numeric>

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"
#include "ops/recurrent.hpp"
#include "ops/rows.hpp"

namespace kiln::detail {

namespace {

/// Sums g over the dims that broadcasting added to reach g's shape from `shape`.
Tensor unbroadcast(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const std::size_t lead = g.shape().size() - shape.size();
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < g.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1))
      axes.push_back(static_cast<std::int64_t>(i));
  return reshape(sum(g, axes, /*keepdims*/ true), shape);
}

/// g of a reduction over attrs.axes reshaped so it broadcasts against the input.
Tensor with_kept_dims(const Tensor& g, const Shape& in_shape, const Attrs& attrs) {
  if (attrs.keepdims) return g;
  Shape kept = in_shape;
  for (auto a : attrs.axes) kept[static_cast<std::size_t>(a)] = 1;
  return reshape(g, kept);
}

std::vector<std::int64_t> axes_vector(const Shape& axes) { return {axes.begin(), axes.end()}; }

Tensor swap_last_two(const Tensor& t) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(t.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(t, perm);
}

/// Gradient of one strided slice axis: places g (count n along `axis`) at positions
/// start, start+step, ... of an axis of size `dim`, zeros elsewhere.
Tensor unslice_axis(const Tensor& g, std::int64_t axis, std::int64_t dim, std::int64_t start,
                    std::int64_t step) {
  const std::int64_t n = g.shape()[static_cast<std::size_t>(axis)];
  const auto rank = static_cast<std::size_t>(g.ndim());
  std::vector<std::pair<std::int64_t, std::int64_t>> widths(rank, {0, 0});
  if (n == 0) {
    widths[static_cast<std::size_t>(axis)] = {0, dim};
    return pad(g, widths);
  }
  Tensor h = g;
  if (step < 0) {  // positions start, start-|step|, ...: the reversed g walks forward from first
    h = slice(g, axis, Slice::none, Slice::none, -1);
    start = start + (n - 1) * step;
    step = -step;
  }
  if (step > 1) {  // interleave step-1 zeros after every element, then drop the trailing ones
    Tensor e = expand_dims(h, axis + 1);
    std::vector<std::pair<std::int64_t, std::int64_t>> w(rank + 1, {0, 0});
    w[static_cast<std::size_t>(axis) + 1] = {0, step - 1};
    Shape merged = h.shape();
    merged[static_cast<std::size_t>(axis)] = n * step;
    h = slice(reshape(pad(e, w), merged), axis, 0, (n - 1) * step + 1);
  }
  const std::int64_t span = (n - 1) * step + 1;
  widths[static_cast<std::size_t>(axis)] = {start, dim - start - span};
  return pad(h, widths);
}

/// The gradients of the KILN_BINARY rows whose grad column is custom_grad.
std::vector<Tensor> custom_elementwise_vjp(const TapeEntry& e, const Tensor& g) {
  const Tensor& a = e.inputs[0];
  const Tensor& b = e.inputs[1];
  const Tensor& y = e.output;
  switch (e.prim) {
    case Prim::pow: {
      Tensor ga = g * b * pow(a, b - 1.0);
      Tensor positive = a > 0.0;
      Tensor safe_a = where(positive, a, ones_like(a));
      Tensor gb = where(positive, g * y * log(safe_a), zeros_like(g));
      return {unbroadcast(ga, a.shape()), unbroadcast(gb, b.shape())};
    }
    case Prim::maximum: {
      Tensor pick_a = a >= b;
      return {unbroadcast(where(pick_a, g, zeros_like(g)), a.shape()),
              unbroadcast(where(pick_a, zeros_like(g), g), b.shape())};
    }
    case Prim::minimum: {
      Tensor pick_a = a <= b;
      return {unbroadcast(where(pick_a, g, zeros_like(g)), a.shape()),
              unbroadcast(where(pick_a, zeros_like(g), g), b.shape())};
    }
    default:
      fail("gradient", "primitives.def marks {} custom_grad, but vjp.cpp has no rule for it",
           name(e.prim));
  }
}

/// The gradients of the KILN_UNARY and KILN_BINARY rows, from their grad column.
std::vector<Tensor> elementwise_vjp(const TapeEntry& e, const Tensor& g) {
  const Tensor& y = e.output;
  switch (e.prim) {
    // grad(dx): x is the input, y the output.
#define KILN_UNARY(name, accepts, output, kernel, label, grad) \
  case Prim::name: {                                           \
    const Tensor& x = e.inputs[0];                             \
    (void)x;                                                   \
    (void)y;                                                   \
    KILN_UNARY_VJP_##grad                                      \
  }
#define KILN_UNARY_VJP_grad(dx) return {dx};
    // grad(da, db): each summed back to its input's shape.
#define KILN_BINARY(name, accepts, output, kernel, label, grad) \
  case Prim::name: {                                            \
    const Tensor& a = e.inputs[0];                              \
    const Tensor& b = e.inputs[1];                              \
    (void)a;                                                    \
    (void)b;                                                    \
    (void)y;                                                    \
    KILN_BINARY_VJP_##grad                                      \
  }
#define KILN_BINARY_VJP_grad(da, db) \
  return {unbroadcast(da, a.shape()), unbroadcast(db, b.shape())};
#define KILN_UNARY_VJP_no_grad break;
#define KILN_BINARY_VJP_no_grad break;
#define KILN_UNARY_VJP_custom_grad return custom_elementwise_vjp(e, g);
#define KILN_BINARY_VJP_custom_grad return custom_elementwise_vjp(e, g);
#include "primitives/primitives.def"
#undef KILN_UNARY_VJP_grad
#undef KILN_BINARY_VJP_grad
#undef KILN_UNARY_VJP_no_grad
#undef KILN_BINARY_VJP_no_grad
#undef KILN_UNARY_VJP_custom_grad
#undef KILN_BINARY_VJP_custom_grad
    default:
      break;
  }
  return std::vector<Tensor>(e.inputs.size());  // not differentiable
}

/// Columns [from, to) of step 0 of a fused recurrence's backward output r [T, B, row]: the
/// gradients of the initial state. A dynamic time dim cannot be sliced while tracing, so there
/// the sum over time is taken: the backward kernels leave those columns zero after step 0 (see
/// ops/recurrent.hpp).
Tensor first_step(const Tensor& r, std::int64_t from, std::int64_t to) {
  const Tensor columns = slice(r, 2, from, to);
  if (is_dynamic_dim(r.dim(0))) return sum(columns, {0});
  return squeeze(slice(columns, 0, 0, 1), {0});
}

/// The gradients of a and b in matmul(a, b) from g, the product's gradient (each left
/// undefined when not wanted).
std::vector<Tensor> matmul_vjp(const Tensor& a, const Tensor& b, const Tensor& g,
                               bool want_a = true, bool want_b = true) {
  Tensor grad_a, grad_b;
  if (want_a) grad_a = unbroadcast(matmul(g, swap_last_two(b)), a.shape());
  if (!want_b) return {grad_a, grad_b};
  if (b.ndim() == 2 && a.ndim() > 2 && !a.shape().has_dynamic_dims()) {
    // One matrix b shared by a batch of a's: d b = sum over the batch of a_i^T g_i, which
    // is a single [k, batch*m] x [batch*m, n] product (instead of a batched product of
    // batch [k, n] matrices reduced afterwards).
    const std::int64_t k = a.dim(-1), n = g.dim(-1);
    grad_b = matmul(transpose(reshape(a, {-1, k})), reshape(g, {-1, n}));
  } else {
    grad_b = unbroadcast(matmul(swap_last_two(a), g), b.shape());
  }
  return {grad_a, grad_b};
}

/// A fused recurrence that projects its inputs (six inputs: x first, its kernel last; attrs.ints
/// {1} when x is batch-major): grads[0], the gradient of the projection xp = x W_in computed
/// from dxp [T, B, G U], becomes x's, and W_in's is appended.
void projected_input_grads(const TapeEntry& e, const Tensor& dxp, std::vector<Tensor>& grads,
                           const WantedInputs& wanted) {
  const bool batch_major = !e.attrs.ints.empty() && e.attrs.ints[0] == 1;
  const Tensor& x = e.inputs[0];
  const Tensor time_major = batch_major ? transpose(x, {1, 0, 2}) : x;
  std::vector<Tensor> projection =
      matmul_vjp(time_major, e.inputs[5], dxp, is_wanted(wanted, 0), is_wanted(wanted, 5));
  grads[0] = batch_major && projection[0].defined() ? transpose(projection[0], {1, 0, 2})
                                                    : std::move(projection[0]);
  grads.push_back(std::move(projection[1]));
}

}  // namespace

/// Gradients of layer_norm and rms_norm (x, then gamma and beta where the entry has them), from
/// x recomputed with kiln ops: xhat = (x - mean) r, r = 1 / sqrt(var + epsilon) (no mean, and
/// the mean square for var, in rms_norm). With dxhat = g gamma, dx = r (dxhat - mean(dxhat) -
/// xhat mean(dxhat xhat)) over the rows (no mean(dxhat) in rms_norm); dgamma is the sum of
/// g xhat over the leading axes, dbeta the sum of g.
std::vector<Tensor> normalize_vjp(const TapeEntry& e, const Tensor& g) {
  const Tensor& x = e.inputs[0];
  const bool centered = e.prim == Prim::layer_norm;
  std::vector<std::int64_t> row_axes, leading_axes;
  for (std::int64_t a = 0; a < x.ndim(); ++a)
    (a < e.attrs.axes[0] ? leading_axes : row_axes).push_back(a);
  const Tensor xc = centered ? x - mean(x, row_axes, true) : x;
  const Tensor r = rsqrt(mean(square(xc), row_axes, true) + e.attrs.value);
  const Tensor xhat = xc * r;
  const NormalizeInputs at = normalize_inputs(e.attrs);
  const Tensor gamma = at.gamma >= 0 ? e.inputs[static_cast<std::size_t>(at.gamma)] : Tensor();
  const Tensor dxhat = gamma.defined() ? g * gamma : g;
  Tensor inner = dxhat - xhat * mean(dxhat * xhat, row_axes, true);
  if (centered) inner = inner - mean(dxhat, row_axes, true);
  std::vector<Tensor> grads{r * inner};
  const auto over_rows = [&](const Tensor& t) {
    return leading_axes.empty() ? t : sum(t, leading_axes);
  };
  if (gamma.defined()) grads.push_back(over_rows(g * xhat));
  if (at.beta >= 0) grads.push_back(over_rows(g));
  return grads;
}

bool is_differentiable(Prim p) { return info(p).differentiable; }

std::vector<Tensor> primitive_vjp(const TapeEntry& e, const Tensor& g, const WantedInputs& wanted) {
  if (info(e.prim).row_kernel) return elementwise_vjp(e, g);
  if (info(e.prim).family == Family::indexing) return indexing_vjp(e, g);
  if (info(e.prim).family == Family::window) return window_vjp(e, g, wanted);
  if (e.prim == Prim::layer_norm || e.prim == Prim::rms_norm) return normalize_vjp(e, g);
  const auto& in = e.inputs;
  const Tensor& y = e.output;
  auto x = [&](std::size_t i) -> const Tensor& { return in[i]; };
  switch (e.prim) {
    case Prim::cast:
      return {is_floating(x(0).dtype()) ? cast(g, x(0).dtype()) : Tensor()};
    case Prim::where: {
      Tensor zero = zeros_like(g);
      return {Tensor(), unbroadcast(where(x(0), g, zero), x(1).shape()),
              unbroadcast(where(x(0), zero, g), x(2).shape())};
    }

    case Prim::reduce_sum:
      return {broadcast_to(with_kept_dims(g, x(0).shape(), e.attrs), x(0).shape())};
    case Prim::reduce_max:
    case Prim::reduce_min: {
      const auto axes = axes_vector(e.attrs.axes);
      Tensor yk = with_kept_dims(y, x(0).shape(), e.attrs);
      Tensor mask = cast(equal(x(0), yk), x(0).dtype());
      Tensor count = sum(mask, axes, /*keepdims*/ true);
      return {mask * with_kept_dims(g, x(0).shape(), e.attrs) / count};
    }
    case Prim::softmax: {
      const auto axes = axes_vector(e.attrs.axes);
      return {y * (g - sum(g * y, axes, /*keepdims*/ true))};
    }
    case Prim::logsumexp: {  // softmax(x) g, as exp(x - y)
      const Tensor& a = x(0);
      return {with_kept_dims(g, a.shape(), e.attrs) *
              exp(a - with_kept_dims(y, a.shape(), e.attrs))};
    }
    case Prim::log_softmax: {  // d/dx of x - logsumexp(x): g - softmax(x) sum(g)
      const auto axes = axes_vector(e.attrs.axes);
      return {g - exp(y) * sum(g, axes, /*keepdims*/ true)};
    }
    case Prim::reduce_prod: {
      // Exact with zeros: d prod / d x_i is the product of the other entries.
      const auto axes = axes_vector(e.attrs.axes);
      const Tensor& a = x(0);
      Tensor is_zero = equal(a, 0.0);
      Tensor nonzero = where(is_zero, ones_like(a), a);
      Tensor prod_nonzero = prod(nonzero, axes, /*keepdims*/ true);
      Tensor zero_count = sum(cast(is_zero, a.dtype()), axes, /*keepdims*/ true);
      Tensor zero = zeros_like(a);
      Tensor others =
          where(is_zero, where(equal(zero_count, 1.0), broadcast_to(prod_nonzero, a.shape()), zero),
                where(equal(zero_count, 0.0), prod_nonzero / nonzero, zero));
      return {others * with_kept_dims(g, a.shape(), e.attrs)};
    }

    case Prim::reshape:
      return {reshape(g, x(0).shape())};
    case Prim::transpose: {
      std::vector<std::int64_t> inverse(e.attrs.axes.size());
      for (std::size_t i = 0; i < inverse.size(); ++i)
        inverse[static_cast<std::size_t>(e.attrs.axes[i])] = static_cast<std::int64_t>(i);
      return {transpose(g, inverse)};
    }
    case Prim::broadcast_to:
      return {unbroadcast(g, x(0).shape())};
    case Prim::slice: {
      Tensor h = g;
      const Shape& s = x(0).shape();
      for (std::size_t d = 0; d < s.size(); ++d) {
        const std::int64_t start = e.attrs.ints[2 * d], step = e.attrs.ints[2 * d + 1];
        if (step == 1 && start == 0 && g.shape()[d] == s[d]) continue;
        h = unslice_axis(h, static_cast<std::int64_t>(d), s[d], start, step);
      }
      return {h};
    }
    case Prim::concat: {
      std::vector<Tensor> parts;
      std::int64_t offset = 0;
      for (const Tensor& t : in) {
        const std::int64_t n = t.shape()[static_cast<std::size_t>(e.attrs.axis)];
        parts.push_back(slice(g, e.attrs.axis, offset, offset + n));
        offset += n;
      }
      return parts;
    }
    case Prim::pad: {
      std::vector<Slice> ranges;
      const Shape& s = x(0).shape();
      for (std::size_t d = 0; d < s.size(); ++d)
        ranges.push_back(Slice{e.attrs.ints[2 * d], e.attrs.ints[2 * d] + s[d], 1});
      return {slice(g, ranges)};
    }
    case Prim::unique_rows:
      return {Tensor()};
    case Prim::segment_rows: {  // each value row went to its id's row
      const Tensor& ids = x(1);
      Tensor table = g;  // [entries, row...]: one row per id
      if (ids.ndim() != 1) {
        require_static_shape(ids.shape(), "segment_rows", "the gradient's ids");
        Shape rows{ids.size()};
        for (std::size_t d = ids.shape().size(); d < g.shape().size(); ++d)
          rows.push_back(g.shape()[d]);
        table = reshape(g, rows);
      }
      const Tensor positions =
          unique_rows(ids, e.attrs.axis, /*inverse*/ true, e.attrs.ints[0] != 0);
      return {take_rows(table, positions, /*padded*/ true), Tensor()};
    }
    case Prim::take_rows:
      return {make_slices(x(1), g, x(0).shape(), false, e.attrs.ints[0] != 0), Tensor()};
    case Prim::dense_rows:
      return {Tensor(), take_rows(g, x(0), e.attrs.ints[0] != 0)};
    case Prim::scatter_rows: {
      const auto mode = static_cast<RowUpdate>(e.attrs.ints[0]);
      const bool padded = e.attrs.ints[1] != 0;
      const Tensor taken = take_rows(g, x(1), padded);
      switch (mode) {
        case RowUpdate::add:
          return {g, Tensor(), taken};
        case RowUpdate::sub:
          return {g, Tensor(), neg(taken)};
        case RowUpdate::assign:  // the base's assigned rows did not reach the output
          return {scatter_rows(g, x(1), zeros_like(taken), RowUpdate::assign, padded), Tensor(),
                  taken};
      }
      return {};
    }
    case Prim::gather: {
      const Tensor& data = x(0);
      const Tensor& indices = x(1);
      const auto axis = static_cast<std::size_t>(e.attrs.axis);
      const std::int64_t dim = data.shape()[axis];
      // Along axis 0 of a table with a known row count (an embedding): indexed slices, the
      // touched rows once each with their gradient rows summed (kiln/sparse.hpp).
      if (axis == 0 && !is_dynamic_dim(dim))
        return {gather_gradient_slices(g, indices, data.shape()), Tensor()};
      // Otherwise grad_x[.., j, ..] = sum over index positions m with indices[m] == j of
      // g[.., m, ..], computed as one_hot(indices)^T @ g.
      std::int64_t pre = 1, post = 1;
      for (std::size_t i = 0; i < axis; ++i) pre *= data.shape()[i];
      for (std::size_t i = axis + 1; i < data.shape().size(); ++i) post *= data.shape()[i];
      Tensor wrapped = where(indices < 0, indices + dim, indices);
      const Shape& is = indices.shape();
      if (is.has_dynamic_dims() && !data.shape().has_dynamic_dims() && !is.empty() &&
          is_dynamic_dim(is[0]) &&
          !Shape(std::span<const std::int64_t>(is.begin() + 1, is.end())).has_dynamic_dims()) {
        // Indices [s, r...] with a dynamic leading dim s (a batch of token ids): the products
        // that merge s with other dims cannot be formed while tracing, so contract per s and sum:
        // grad[p, j, q] = sum over (s, r) of hot[s, r, j] * g[p, s, r, q].
        std::int64_t rest = 1;
        for (std::size_t i = 1; i < is.size(); ++i) rest *= is[i];
        Tensor hot = one_hot(reshape(wrapped, {-1, rest}), dim, data.dtype());   // [s, r, dim]
        Tensor g4 = transpose(reshape(g, {pre, -1, rest, post}), {1, 2, 0, 3});  // [s, r, p, q]
        Tensor per_s = matmul(transpose(hot, {0, 2, 1}), reshape(g4, {-1, rest, pre * post}));
        Tensor summed = reshape(sum(per_s, {0}), {dim, pre, post});  // [dim, p, q]
        return {reshape(transpose(summed, {1, 0, 2}), data.shape()), Tensor()};
      }
      const std::int64_t m = indices.size();
      Tensor hot = one_hot(reshape(wrapped, {m}), dim, data.dtype());  // [m, dim]
      Tensor gm = reshape(g, {pre, m, post});
      return {reshape(matmul(transpose(hot), gm), data.shape()), Tensor()};
    }

    case Prim::matmul:
      return matmul_vjp(x(0), x(1), g, is_wanted(wanted, 0), is_wanted(wanted, 1));
    case Prim::lstm_sequence: {
      // y holds the saved gates (the front end saves them while a tape records or a trace
      // runs); r holds dz, h_{t-1} and the state gradients per step (ops/recurrent.hpp).
      const std::int64_t units = x(1).dim(1);
      if (y.dim(2) != 6 * units)
        fail("lstm_sequence",
             "the gradient needs the gate activations, which the forward pass saves only while "
             "a GradientTape records");
      const Tensor r = lstm_sequence_grad(slice(g, 2, 0, 2 * units), y, x(1), x(2), x(3));
      const Tensor state = first_step(r, 5 * units, 7 * units);
      const Tensor dz = slice(r, 2, 0, 4 * units);
      std::vector<Tensor> grads{dz, slice(state, 1, 0, units), slice(state, 1, units, 2 * units),
                                recurrent_weight_grad(r, units, 4, 4 * units, 0), sum(dz, {0, 1})};
      if (e.inputs.size() == 6) projected_input_grads(e, dz, grads, wanted);
      return grads;
    }
    case Prim::gru_sequence: {
      // r holds per step the gradients of x's projection and of q = h W + b_rec, h_{t-1} and
      // the gradient of h_{t-1} (ops/recurrent.hpp).
      const std::int64_t units = x(1).dim(1);
      if (y.dim(2) != 5 * units)
        fail("gru_sequence",
             "the gradient needs the gate activations, which the forward pass saves only while "
             "a GradientTape records");
      const Tensor r = gru_sequence_grad(slice(g, 2, 0, units), y, x(1), x(2));
      const Tensor dq = slice(r, 2, 3 * units, 6 * units);
      const Tensor dx = slice(r, 2, 0, 3 * units);
      std::vector<Tensor> grads{dx, first_step(r, 7 * units, 8 * units),
                                recurrent_weight_grad(r, units, 3, 6 * units, 3 * units),
                                sum(dx, {0, 1}), sum(dq, {0, 1})};
      if (e.inputs.size() == 6) projected_input_grads(e, dx, grads, wanted);
      return grads;
    }
    case Prim::lstm_sequence_grad:
    case Prim::gru_sequence_grad:
    case Prim::recurrent_weight_grad:
      fail(name(e.prim),
           "a second-order gradient through a fused LSTM or GRU is not supported; construct the "
           "layer with fused = false (its steps then run as ordinary ops in a kiln::scan)");
    default:
      return std::vector<Tensor>(in.size());
  }
}

}  // namespace kiln::detail

// ONNX conformance mapping table: Attention (opsets 23-25), written with kiln's ops the way
// ONNX's reference computes it: 3-D inputs split into heads, the past key and value cache,
// boolean or additive masks padded to the keys, causal and sliding-window masks aligned to the
// cache (bottom right), grouped key/value heads, softcap, the four qk_matmul_output modes, and
// rows with nothing to attend to giving zeros.
#include <cmath>
#include <limits>

#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// [B, S, heads * size] -> [B, heads, S, size].
Tensor split_heads(const Tensor& x, std::int64_t heads) {
  return kiln::transpose(kiln::reshape(x, {x.dim(0), x.dim(1), heads, x.dim(2) / heads}),
                         {0, 2, 1, 3});
}

/// The additive form of a mask: 0 where true (attend), -inf where false.
Tensor additive(const Tensor& mask, const Tensor& like) {
  if (mask.dtype() != kiln::boolean) return mask;
  return kiln::where(mask, kiln::scalar(0.0, like.dtype()), kiln::scalar(-kInf, like.dtype()));
}

/// Whether key j may be seen from query i: j <= i + offset (causal), or within the window
/// around i + offset; offset is a scalar or one per batch ([B]).
Tensor window_allowed(std::int64_t q, std::int64_t kv, const Tensor& offset, std::int64_t left,
                      std::int64_t right, bool causal) {
  const Tensor i = kiln::reshape(kiln::arange(q, kiln::i64), {q, 1});
  const Tensor j = kiln::reshape(kiln::arange(kv, kiln::i64), {1, kv});
  // offset [B] -> [B, 1, 1, 1] (a batch axis before the heads); a scalar stays one.
  const Tensor off = offset.ndim() == 0 ? offset : kiln::reshape(offset, {-1, 1, 1, 1});
  const Tensor diff = kiln::sub(kiln::add(i, off), j);  // (i + offset) - j
  Tensor allowed = causal ? kiln::greater_equal(diff, kiln::scalar(std::int64_t{0}))
                          : kiln::cast(kiln::ones_like(diff), kiln::boolean);
  if (left >= 0) allowed = kiln::logical_and(allowed, kiln::less_equal(diff, kiln::scalar(left)));
  if (right >= 0)
    allowed = kiln::logical_and(allowed, kiln::less_equal(kiln::neg(diff), kiln::scalar(right)));
  return allowed;
}

Outputs attention(const Case& c) {
  Tensor q = c.in(0), k = c.in(1), v = c.in(2);
  const kiln::DType dtype = q.dtype();
  const bool three_d = q.ndim() == 3;
  std::int64_t q_heads = c.i("q_num_heads", 0), kv_heads = c.i("kv_num_heads", 0);
  if (three_d) {
    if (q_heads <= 0 || kv_heads <= 0) throw NotMapped("3-D Attention without head counts");
    q = split_heads(q, q_heads);
    k = split_heads(k, kv_heads);
    v = split_heads(v, kv_heads);
  }
  if (c.i("softmax_precision", 0) != 0 && dtype_from_onnx(c.i("softmax_precision", 0)) != dtype)
    throw NotMapped("softmax_precision other than the input dtype");
  const double scale =
      c.has_attr("scale") ? c.f("scale", 1.0) : 1.0 / std::sqrt(static_cast<double>(q.dim(3)));
  const Tensor root = kiln::scalar(std::sqrt(scale), dtype);
  const Tensor present_key = c.has(4) ? kiln::concat({c.in(4), k}, 2) : k;
  const Tensor present_value = c.has(5) ? kiln::concat({c.in(5), v}, 2) : v;
  k = present_key;
  v = present_value;
  const std::int64_t lq = q.dim(2), lk = k.dim(2);

  Tensor mask;
  if (c.has(3)) {
    mask = c.in(3);
    if (const std::int64_t short_by = lk - mask.dim(-1); short_by > 0) {
      std::vector<std::pair<std::int64_t, std::int64_t>> widths(
          static_cast<std::size_t>(mask.ndim()), {0, 0});
      widths.back() = {0, short_by};
      mask = kiln::pad(mask, widths, mask.dtype() == kiln::boolean ? 0.0 : -kInf);
    }
  }
  // Where the query block starts among the keys: after the cache, or (a static cache)
  // nonpad_kv_seqlen - Lq per batch.
  Tensor offset = kiln::scalar(std::int64_t{c.has(4) ? c.in(4).dim(2) : 0});
  const bool external_cache = !c.has(4) && c.has(6);
  if (external_cache) offset = kiln::sub(kiln::cast(c.in(6), kiln::i64), kiln::scalar(lq));
  Tensor bias = kiln::zeros({lq, lk}, dtype);
  const bool causal = c.i("is_causal", 0) != 0;
  if (causal) {
    const Tensor base = mask.defined() ? additive(mask, q) : bias;
    bias = kiln::add(base, additive(window_allowed(lq, lk, offset, -1, -1, true), q));
  } else if (mask.defined()) {
    bias = kiln::add(bias, additive(mask, q));
  }
  const std::int64_t left = c.i("left_window_size", -1), right = c.i("right_window_size", -1);
  if (left >= 0 || right >= 0)
    bias = kiln::add(bias, additive(window_allowed(lq, lk, offset, left, right, false), q));
  if (c.has(6)) {  // keys past each batch's length are padding
    const Tensor lengths = kiln::reshape(kiln::cast(c.in(6), kiln::i64), {-1, 1, 1, 1});
    const Tensor keys = kiln::reshape(kiln::arange(lk, kiln::i64), {1, 1, 1, lk});
    bias = kiln::add(bias, additive(kiln::less(keys, lengths), q));
  }

  // Grouped key/value heads: each repeated for its group of query heads (h0, h0, h1, h1, ..).
  const std::int64_t qh = q.dim(1), kh = k.dim(1);
  if (qh != kh && qh % kh == 0 && kh == v.dim(1)) {
    std::vector<std::int64_t> heads;
    for (std::int64_t h = 0; h < kh; ++h)
      for (std::int64_t r = 0; r < qh / kh; ++r) heads.push_back(h);
    const Tensor picked = kiln::tensor(heads, kiln::Shape{qh});
    k = kiln::gather(k, picked, 1);
    v = kiln::gather(v, picked, 1);
  }
  Tensor qk = kiln::matmul(kiln::mul(q, root), kiln::transpose(kiln::mul(k, root), {0, 1, 3, 2}));
  const double softcap = c.f("softcap", 0.0);
  if (softcap > 0) {
    const Tensor cap = kiln::scalar(softcap, dtype);
    qk = kiln::mul(kiln::tanh(kiln::div(qk, cap)), cap);
  }
  const Tensor with_bias = kiln::add(qk, bias);
  // A row whose bias is -inf everywhere has nothing to attend to: zeros (decided on the bias,
  // not the logits, as ONNX's reference does).
  const Tensor none_allowed = kiln::equal(kiln::max(bias, {-1}, true), kiln::scalar(-kInf, dtype));
  const Tensor zero = kiln::scalar(0.0, dtype);
  const Tensor weights = kiln::where(none_allowed, zero, kiln::softmax(with_bias, -1));
  Tensor y = kiln::matmul(weights, v);
  if (three_d) y = kiln::reshape(kiln::transpose(y, {0, 2, 1, 3}), {y.dim(0), y.dim(2), -1});
  Tensor qk_out;
  switch (c.i("qk_matmul_output_mode", 0)) {
    case 0:
    case 1:
      qk_out = qk;
      break;
    case 2:
      qk_out = with_bias;
      break;
    case 3:
      qk_out = weights;
      break;
    default:
      throw NotMapped("an unknown qk_matmul_output_mode");
  }
  return {y, present_key, present_value, qk_out};
}

}  // namespace

namespace {

/// ONNX RotaryEmbedding (opset 23): input [B, H, S, D] or [B, S, H * D] (num_heads given); the
/// first rotary_embedding_dim features of each head rotated by the cached angles of their
/// positions (position_ids picks rows of the caches, else the caches are [B, S, dim / 2]),
/// pairing the two halves, or neighbours when interleaved.
Outputs rotary_embedding(const Case& c) {
  c.only({"interleaved", "rotary_embedding_dim", "num_heads"});
  const Tensor& input = c.in(0);
  Tensor x = input;  // as [B, S, H, D]
  if (x.ndim() == 4) {
    x = kiln::transpose(x, {0, 2, 1, 3});
  } else {
    const std::int64_t heads = c.i("num_heads", 0);
    if (x.ndim() != 3 || heads <= 0) throw NotMapped("RotaryEmbedding input layout");
    x = kiln::reshape(x, {x.dim(0), x.dim(1), heads, x.dim(2) / heads});
  }
  const std::int64_t head = x.dim(3);
  std::int64_t dim = c.i("rotary_embedding_dim", 0);
  if (dim == 0) dim = head;
  const std::int64_t half = dim / 2;
  Tensor cos = c.in(1), sin = c.in(2);
  if (c.has(3)) {
    cos = kiln::gather(cos, c.in(3), 0);
    sin = kiln::gather(sin, c.in(3), 0);
  }
  cos = kiln::expand_dims(cos, 2);  // [B, S, 1, half]
  sin = kiln::expand_dims(sin, 2);
  const Tensor rotate = kiln::slice(x, 3, 0, dim);
  const bool interleaved = c.i("interleaved", 0) != 0;
  Tensor x1, x2;
  if (interleaved) {
    const Tensor pairs = kiln::reshape(rotate, {x.dim(0), x.dim(1), x.dim(2), half, 2});
    x1 = kiln::squeeze(kiln::slice(pairs, 4, 0, 1), {4});
    x2 = kiln::squeeze(kiln::slice(pairs, 4, 1, 2), {4});
  } else {
    x1 = kiln::slice(rotate, 3, 0, half);
    x2 = kiln::slice(rotate, 3, half, dim);
  }
  const Tensor real = kiln::sub(kiln::mul(cos, x1), kiln::mul(sin, x2));
  const Tensor imag = kiln::add(kiln::mul(sin, x1), kiln::mul(cos, x2));
  Tensor rotated = interleaved ? kiln::reshape(kiln::stack({real, imag}, 4), rotate.shape())
                               : kiln::concat({real, imag}, 3);
  Tensor out = kiln::concat({rotated, kiln::slice(x, 3, dim, head)}, 3);
  if (input.ndim() == 4) return {kiln::transpose(out, {0, 2, 1, 3})};
  return {kiln::reshape(out, input.shape())};
}

/// ONNX SwiGLU: a * sigmoid(alpha * a) * b.
Outputs swiglu(const Case& c) {
  c.only({"alpha"});
  const Tensor& a = c.in(0);
  const Tensor alpha = kiln::scalar(c.f("alpha", 1.0), a.dtype());
  return {kiln::mul(kiln::mul(a, kiln::sigmoid(kiln::mul(alpha, a))), c.in(1))};
}

/// ONNX TensorScatter (a KV-cache update): update written into past_cache along `axis`,
/// batch entry b from position write_indices[b] on (wrapping around in circular mode).
Outputs tensor_scatter(const Case& c) {
  c.only({"mode", "axis"});
  const Tensor& past = c.in(0);
  const Tensor& update = c.in(1);
  const std::int64_t rank = past.ndim();
  const std::int64_t axis = normalize_axis(c.i("axis", -2), rank);
  const std::string mode = c.s("mode", "linear");
  if (mode != "linear" && mode != "circular") throw NotMapped("TensorScatter mode " + mode);
  const Tensor write =
      c.has(2) ? kiln::cast(c.in(2), kiln::i64) : kiln::zeros({past.dim(0)}, kiln::i64);
  std::vector<std::int64_t> batch_dims(static_cast<std::size_t>(rank), 1);
  std::vector<std::int64_t> step_dims = batch_dims;
  batch_dims[0] = past.dim(0);
  step_dims[static_cast<std::size_t>(axis)] = update.dim(axis);
  Tensor index =
      kiln::add(kiln::reshape(write, kiln::Shape(batch_dims)),
                kiln::reshape(kiln::arange(update.dim(axis), kiln::i64), kiln::Shape(step_dims)));
  if (mode == "circular") index = kiln::mod(index, kiln::scalar(past.dim(axis), kiln::i64));
  return {kiln::scatter(past, kiln::broadcast_to(index, update.shape()), update, axis)};
}

/// (B, T, H * D) -> (B, H, T, D).
Tensor heads_first(const Tensor& x, std::int64_t heads) {
  return kiln::transpose(kiln::reshape(x, {x.dim(0), x.dim(1), heads, x.dim(2) / heads}),
                         {0, 2, 1, 3});
}

/// ONNX LinearAttention (opset 27): a recurrent state S [B, Hkv, Dk, Dv] per step t decayed by
/// exp(decay) (gated rules), corrected toward v by beta (delta rules), plus k v^T; the output
/// is scale * q S, each group of query heads reading its key/value head. In f32, as ONNX's
/// reference computes.
Outputs linear_attention(const Case& c) {
  c.only({"chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"});
  const std::string rule = c.s("update_rule", "gated_delta");
  const bool gating = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  if (!gating && !delta && rule != "linear") throw NotMapped("update_rule " + rule);
  const std::int64_t hq = c.i("q_num_heads", 0), hkv = c.i("kv_num_heads", 0);
  const kiln::DType out_dtype = c.in(0).dtype();
  const auto f32 = [](const Tensor& t) { return kiln::cast(t, kiln::f32); };
  const Tensor q = f32(heads_first(c.in(0), hq));  // [B, Hq, T, Dk]
  const Tensor k = f32(heads_first(c.in(1), hkv));
  const Tensor v = f32(heads_first(c.in(2), hkv));  // [B, Hkv, T, Dv]
  const std::int64_t b = q.dim(0), steps = q.dim(2), dk = q.dim(3), dv = v.dim(3);
  Tensor decay, beta;
  if (gating) {
    const Tensor& d = c.in(4);
    decay =
        f32(d.dim(2) == hkv ? kiln::transpose(kiln::reshape(d, {b, steps, hkv, 1}), {0, 2, 1, 3})
                            : heads_first(d, hkv));  // [B, Hkv, T, 1 or Dk]
  }
  if (delta) {
    const Tensor& bt = c.in(5);
    beta = f32(kiln::transpose(kiln::reshape(bt, {b, steps, bt.dim(2), 1}), {0, 2, 1, 3}));
  }
  const kiln::DType state_dtype = c.has(3) ? c.in(3).dtype() : out_dtype;
  Tensor state = c.has(3) ? f32(c.in(3)) : kiln::zeros({b, hkv, dk, dv}, kiln::f32);
  const double given = c.f("scale", 0.0);
  const double scale = given == 0.0 ? 1.0 / std::sqrt(static_cast<double>(dk)) : given;
  const auto at = [](const Tensor& x, std::int64_t t) {  // [B, H, T, D] -> [B, H, D]
    return kiln::squeeze(kiln::slice(x, 2, t, t + 1), {2});
  };
  std::vector<Tensor> outputs;
  for (std::int64_t t = 0; t < steps; ++t) {
    const Tensor kt = at(k, t);
    Tensor vt = at(v, t);
    if (gating) state = kiln::mul(state, kiln::expand_dims(kiln::exp(at(decay, t)), 3));
    if (delta) {
      const Tensor retrieved =
          kiln::squeeze(kiln::matmul(kiln::expand_dims(kt, 2), state), {2});  // [B, H, Dv]
      vt = kiln::mul(at(beta, t), kiln::sub(vt, retrieved));
    }
    state = kiln::add(state, kiln::mul(kiln::expand_dims(kt, 3), kiln::expand_dims(vt, 2)));
    Tensor read = state;  // each key/value head serves hq / hkv query heads, in order
    if (hq != hkv)
      read =
          kiln::reshape(kiln::broadcast_to(kiln::expand_dims(state, 2), {b, hkv, hq / hkv, dk, dv}),
                        {b, hq, dk, dv});
    const Tensor out = kiln::squeeze(kiln::matmul(kiln::expand_dims(at(q, t), 2), read), {2});
    outputs.push_back(kiln::mul(out, kiln::scalar(scale, kiln::f32)));  // [B, Hq, Dv]
  }
  const Tensor y = kiln::reshape(kiln::stack(outputs, 1), {b, steps, hq * dv});
  return {kiln::cast(y, out_dtype), kiln::cast(state, state_dtype)};
}

}  // namespace

void add_attention_ops(OpTable& t) {
  t["LinearAttention"] = linear_attention;
  t["TensorScatter"] = tensor_scatter;
  t["Attention"] = attention;
  t["RotaryEmbedding"] = rotary_embedding;
  t["SwiGLU"] = swiglu;
}

}  // namespace onnx_conformance

// ONNX conformance mapping table, the preview domains: the training optimizers Adagrad, Adam
// and Momentum (ai.onnx.preview.training) and FlexAttention without its graph attributes
// (ai.onnx.preview), written with kiln's ops (see onnx_conformance.hpp).
#include <cmath>

#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

Tensor f64(double v) { return kiln::scalar(v, kiln::f64); }
Tensor wide(const Tensor& t) { return kiln::cast(t, kiln::f64); }

/// The optimizers' inputs: R (learning rate), T (step count), then `groups` runs of n tensors
/// each (X..., G..., and the optimizer's states), n = (inputs - 2) / groups.
struct Groups {
  Tensor rate, step;
  std::int64_t n = 0;
  const Case* c = nullptr;
  std::int64_t groups = 0;
  Tensor at(std::int64_t group, std::int64_t i) const {
    return c->in(static_cast<std::size_t>(2 + group * n + i));
  }
};

Groups groups_of(const Case& c, std::int64_t groups) {
  Groups g;
  g.c = &c;
  g.groups = groups;
  g.n = (static_cast<std::int64_t>(c.inputs.size()) - 2) / groups;
  g.rate = wide(c.in(0));
  g.step = wide(c.in(1));
  return g;
}

/// In f64, as ONNX's reference mixes its f32 tensors with Python floats and the i64 count;
/// each result cast back to its input's dtype.
Outputs adagrad(const Case& c) {
  c.only({"decay_factor", "epsilon", "norm_coefficient"});
  const Groups g = groups_of(c, 3);
  const Tensor rate =
      kiln::div(g.rate, kiln::add(f64(1), kiln::mul(g.step, f64(c.f("decay_factor", 0)))));
  Outputs xs, hs;
  for (std::int64_t i = 0; i < g.n; ++i) {
    const Tensor x = wide(g.at(0, i)), h = wide(g.at(2, i));
    const Tensor grad = kiln::add(kiln::mul(f64(c.f("norm_coefficient", 0)), x), wide(g.at(1, i)));
    const Tensor h_new = kiln::add(h, kiln::square(grad));
    const Tensor scale = kiln::add(kiln::sqrt(h_new), f64(c.f("epsilon", 0)));
    xs.push_back(
        kiln::cast(kiln::sub(x, kiln::div(kiln::mul(rate, grad), scale)), g.at(0, i).dtype()));
    hs.push_back(kiln::cast(h_new, g.at(2, i).dtype()));
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

Outputs adam(const Case& c) {
  c.only({"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"});
  const Groups g = groups_of(c, 4);
  const double alpha = c.f("alpha", 0.9), beta = c.f("beta", 0.999);
  const double t = scalar_value(c.in(1));
  Tensor rate = g.rate;
  if (t > 0)
    rate = kiln::mul(rate, f64(std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t))));
  Outputs xs, vs, hs;
  for (std::int64_t i = 0; i < g.n; ++i) {
    const Tensor x = wide(g.at(0, i));
    const Tensor grad = kiln::add(kiln::mul(f64(c.f("norm_coefficient", 0)), x), wide(g.at(1, i)));
    const Tensor v =
        kiln::add(kiln::mul(f64(alpha), wide(g.at(2, i))), kiln::mul(f64(1 - alpha), grad));
    const Tensor h = kiln::add(kiln::mul(f64(beta), wide(g.at(3, i))),
                               kiln::mul(f64(1 - beta), kiln::square(grad)));
    const Tensor step = kiln::div(v, kiln::add(kiln::sqrt(h), f64(c.f("epsilon", 0))));
    const Tensor x_new =
        kiln::mul(f64(1 - c.f("norm_coefficient_post", 0)), kiln::sub(x, kiln::mul(rate, step)));
    xs.push_back(kiln::cast(x_new, g.at(0, i).dtype()));
    vs.push_back(kiln::cast(v, g.at(2, i).dtype()));
    hs.push_back(kiln::cast(h, g.at(3, i).dtype()));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

Outputs momentum(const Case& c) {
  c.only({"alpha", "beta", "mode", "norm_coefficient"});
  const Groups g = groups_of(c, 3);
  const std::string mode = c.s("mode", "standard");
  if (mode != "standard" && mode != "nesterov") throw NotMapped("Momentum mode " + mode);
  const double alpha = c.f("alpha", 0), beta = scalar_value(c.in(1)) > 0 ? c.f("beta", 0) : 1.0;
  Outputs xs, vs;
  for (std::int64_t i = 0; i < g.n; ++i) {
    const Tensor x = wide(g.at(0, i));
    const Tensor grad = kiln::add(kiln::mul(f64(c.f("norm_coefficient", 0)), x), wide(g.at(1, i)));
    const Tensor v = kiln::add(kiln::mul(f64(alpha), wide(g.at(2, i))), kiln::mul(f64(beta), grad));
    const Tensor step = mode == "standard" ? v : kiln::add(grad, kiln::mul(f64(alpha), v));
    xs.push_back(kiln::cast(kiln::sub(x, kiln::mul(g.rate, step)), g.at(0, i).dtype()));
    vs.push_back(kiln::cast(v, g.at(2, i).dtype()));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

/// FlexAttention without score_mod / prob_mod graphs: softmax(q k^T * scale) v, the scale split
/// as sqrt over q and k, key/value heads repeated for groups of query heads, the softmax and the
/// last product in f32 for 16-bit inputs.
Outputs flex_attention(const Case& c) {
  c.only({"scale", "softmax_precision"});
  if (c.has_attr("softmax_precision")) throw NotMapped("FlexAttention softmax_precision");
  const Tensor& q = c.in(0);
  Tensor k = c.in(1), v = c.in(2);
  const std::int64_t hq = q.dim(1), hkv = k.dim(1);
  if (hq != hkv) {
    const auto repeat = [&](const Tensor& t) {
      return kiln::reshape(kiln::broadcast_to(kiln::expand_dims(t, 2),
                                              {t.dim(0), hkv, hq / hkv, t.dim(2), t.dim(3)}),
                           {t.dim(0), hq, t.dim(2), t.dim(3)});
    };
    k = repeat(k);
    v = repeat(v);
  }
  const double scale = c.f("scale", 1.0 / std::sqrt(static_cast<double>(q.dim(3))));
  const Tensor root = kiln::cast(kiln::scalar(std::sqrt(static_cast<float>(scale))), q.dtype());
  const Tensor scores =
      kiln::matmul(kiln::mul(q, root), kiln::transpose(kiln::mul(k, root), {0, 1, 3, 2}));
  const kiln::DType precision =
      q.dtype() == kiln::f16 || q.dtype() == kiln::bf16 ? kiln::f32 : q.dtype();
  const Tensor probs = kiln::softmax(kiln::cast(scores, precision), -1);
  return {kiln::cast(kiln::matmul(probs, kiln::cast(v, precision)), v.dtype())};
}

}  // namespace

void add_preview_ops(OpTable& t) {
  t["ai.onnx.preview.training.Adagrad"] = adagrad;
  t["ai.onnx.preview.training.Adam"] = adam;
  t["ai.onnx.preview.training.Momentum"] = momentum;
  t["ai.onnx.preview.FlexAttention"] = flex_attention;
}

}  // namespace onnx_conformance

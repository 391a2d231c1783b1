// scan, while_loop and cond: the front ends, and the eager loops used when nothing traces (the
// traced side is control_flow_traced.cpp). See include/kiln/control_flow.hpp.

#include "kiln/control_flow.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "jit/control_flow.hpp"
#include "jit/trace.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace detail {

std::string type_text(const Tensor& t) {
  return fmt::format("{} {}", dtype_name(t.dtype()), t.shape().to_string());
}

void check_all_defined(const std::vector<Tensor>& ts, const char* op, const char* what) {
  for (std::size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].defined()) fail(op, "{} {} is an undefined tensor", what, i);
}

void check_same_types(const std::vector<Tensor>& before, const std::vector<Tensor>& now,
                      const char* op, const char* what, const char* who) {
  if (now.size() != before.size())
    fail(op, "{} returned {} {}, expected {}", who, now.size(),
         std::string_view(what) == "carry" ? "carries" : std::string(what) + "s", before.size());
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (!now[i].defined()) fail(op, "{} returned an undefined tensor as {} {}", who, what, i);
    if (now[i].dtype() != before[i].dtype() || now[i].shape() != before[i].shape())
      fail(op, "{} changed {} {} from {} to {}", who, what, i, type_text(before[i]),
           type_text(now[i]));
  }
}

bool truth(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) fail(op, "{} is an undefined tensor", what);
  if (t.dtype() != DType::boolean || t.size() != 1 || t.ndim() != 0)
    fail(op, "{} must be a boolean scalar, got {}", what, type_text(t));
  return t.item<bool>();
}

}  // namespace detail

namespace {

using detail::check_all_defined;
using detail::check_same_types;
using detail::fail;
using detail::truth;
using detail::type_text;

/// The number of steps of a scan over xs, checking that every x has it as its leading dim.
std::int64_t scan_length(const std::vector<Tensor>& xs, const ScanOptions& options) {
  if (xs.empty()) {
    if (options.length < 0) fail("scan", "needs options.length when xs is empty");
    return options.length;
  }
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i].ndim() == 0) fail("scan", "xs {} is a scalar; scan runs over the leading axis", i);
  const std::int64_t n = xs[0].shape()[0];
  for (std::size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape()[0] != n)
      fail("scan", "xs {} has {} steps along its leading axis, but xs 0 has {}", i,
           detail::dim_text(xs[i].shape()[0]), detail::dim_text(n));
  if (options.length >= 0 && options.length != n)
    fail("scan", "options.length is {} but xs have {} steps", options.length, detail::dim_text(n));
  return n;
}

/// The ys of a scan with no steps: empty stacks of the types body would return, found by
/// tracing it once into a graph that is thrown away (the body does not run).
std::vector<Tensor> zero_step_ys(const ScanBody& body, const std::vector<Tensor>& init,
                                 const std::vector<Tensor>& xs) {
  std::vector<Tensor> ys;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  {
    detail::TraceContext probe("scan", /*allow_variable_creation=*/false);
    detail::TraceScope scope(&probe);
    std::vector<Tensor> carry, x;
    std::int32_t index = 0;
    for (const Tensor& c : init)
      carry.push_back(probe.add_parameter(c.dtype(), c.shape(), index++));
    for (const Tensor& s : xs) {
      Shape slice;
      for (std::size_t d = 1; d < s.shape().size(); ++d) slice.push_back(s.shape()[d]);
      x.push_back(probe.add_parameter(s.dtype(), slice, index++));
    }
    auto [next, y] = body(carry, x);
    check_same_types(init, next, "scan", "carry", "the body");
    for (const Tensor& t : y) {
      if (!t.defined()) fail("scan", "the body returned an undefined tensor as y");
      dtypes.push_back(t.dtype());
      shapes.push_back(t.shape());
    }
  }
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    Shape shape{0};
    for (auto d : shapes[i]) shape.push_back(d);
    ys.push_back(zeros(shape, dtypes[i]));
  }
  return ys;
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> eager_scan(const ScanBody& body,
                                                               const std::vector<Tensor>& init,
                                                               const std::vector<Tensor>& xs,
                                                               std::int64_t length, bool reverse) {
  std::vector<Tensor> carry = init;
  std::vector<std::vector<Tensor>> ys;  // per output, per step
  for (std::int64_t k = 0; k < length; ++k) {
    const std::int64_t t = reverse ? length - 1 - k : k;
    std::vector<Tensor> x;
    x.reserve(xs.size());
    for (const Tensor& s : xs) x.push_back(squeeze(slice(s, 0, t, t + 1), {0}));
    auto [next, y] = body(carry, x);
    check_same_types(carry, next, "scan", "carry", "the body");
    if (k == 0) {
      ys.resize(y.size());
      for (std::size_t i = 0; i < y.size(); ++i)
        if (!y[i].defined()) fail("scan", "the body returned an undefined tensor as y {}", i);
    } else if (y.size() != ys.size()) {
      fail("scan", "the body returned {} ys at step {}, {} at the first step", y.size(), t,
           ys.size());
    }
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (k > 0 && (y[i].dtype() != ys[i][0].dtype() || y[i].shape() != ys[i][0].shape()))
        fail("scan", "the body changed y {} from {} to {} at step {}", i, type_text(ys[i][0]),
             type_text(y[i]), t);
      ys[i].push_back(y[i]);
    }
    carry = std::move(next);
  }
  if (length == 0) return {carry, zero_step_ys(body, init, xs)};
  std::vector<Tensor> stacked;
  for (auto& per_step : ys) {
    if (reverse) std::reverse(per_step.begin(), per_step.end());
    stacked.push_back(stack(per_step, 0));
  }
  return {carry, stacked};
}

}  // namespace

std::pair<std::vector<Tensor>, std::vector<Tensor>> scan(const ScanBody& body,
                                                         const std::vector<Tensor>& init,
                                                         const std::vector<Tensor>& xs,
                                                         const ScanOptions& options) {
  if (!body) fail("scan", "body is empty");
  check_all_defined(init, "scan", "init");
  check_all_defined(xs, "scan", "xs");
  const std::int64_t length = scan_length(xs, options);
  if (options.unroll && is_dynamic_dim(length))
    fail("scan", "options.unroll needs a static number of steps, but xs 0 has {} steps",
         detail::dim_text(length));
  if (options.checkpoint_every < 1)
    fail("scan", "options.checkpoint_every must be at least 1, got {}", options.checkpoint_every);
  if (options.checkpoint_every > 1 && options.unroll)
    fail("scan",
         "options.checkpoint_every = {} needs the loop form; it cannot be combined with "
         "options.unroll",
         options.checkpoint_every);
  if (options.checkpoint_every > 1 && length > options.checkpoint_every &&
      detail::any_tape_recording())
    return detail::segmented_scan(body, init, xs, length, options);
  if (detail::active_trace() != nullptr && !(options.unroll && length > 0))
    return detail::traced_scan(body, init, xs, length, options.reverse);
  return eager_scan(body, init, xs, length, options.reverse);
}

std::pair<Tensor, Tensor> scan(
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& body,
    const Tensor& init, const Tensor& xs, const ScanOptions& options) {
  if (!body) fail("scan", "body is empty");
  auto [carry, ys] = scan(
      // By value: a tape may keep this body to run it again for the gradient.
      [body](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        auto [next, y] = body(c[0], x[0]);
        return std::pair<std::vector<Tensor>, std::vector<Tensor>>{{next}, {y}};
      },
      {init}, {xs}, options);
  return {carry[0], ys[0]};
}

std::vector<Tensor> while_loop(
    const std::function<Tensor(const std::vector<Tensor>&)>& cond_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body,
    const std::vector<Tensor>& init, const WhileOptions& options) {
  if (!cond_fn) fail("while_loop", "cond is empty");
  if (!body) fail("while_loop", "body is empty");
  check_all_defined(init, "while_loop", "init");
  if (detail::active_trace() != nullptr)
    return detail::traced_while_loop(cond_fn, body, init, options.maximum_iterations);
  std::vector<Tensor> values = init;
  for (std::int64_t i = 0; options.maximum_iterations < 0 || i < options.maximum_iterations; ++i) {
    if (!truth(cond_fn(values), "while_loop", "the result of cond")) break;
    std::vector<Tensor> next = body(values);
    check_same_types(values, next, "while_loop", "value", "the body");
    values = std::move(next);
  }
  return values;
}

std::vector<Tensor> cond(
    const Tensor& pred,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& true_fn,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& false_fn,
    const std::vector<Tensor>& operands) {
  if (!true_fn) fail("cond", "true_fn is empty");
  if (!false_fn) fail("cond", "false_fn is empty");
  if (!pred.defined()) fail("cond", "pred is an undefined tensor");
  if (pred.dtype() != DType::boolean || pred.ndim() != 0)
    fail("cond", "pred must be a boolean scalar, got {}", type_text(pred));
  check_all_defined(operands, "cond", "operand");
  if (detail::active_trace() != nullptr)
    return detail::traced_cond(pred, true_fn, false_fn, operands);
  return truth(pred, "cond", "pred") ? true_fn(operands) : false_fn(operands);
}

}  // namespace kiln

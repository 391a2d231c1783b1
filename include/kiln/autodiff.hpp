#pragma once
/// @file autodiff.hpp
/// Reverse-mode automatic differentiation: tapes and the functional forms.
///
/// A GradientTape records, while it is alive, every op whose inputs depend on a watched
/// tensor. `gradient()` walks the record backwards applying each primitive's vector-Jacobian
/// rule. The rules are written with kiln ops, so gradients are ordinary tensors: an outer tape
/// records the backward pass too (second derivatives), and later the same code emits graph nodes
/// while tracing.

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln {

namespace detail {
struct TapeState;
}

/// Options of a GradientTape.
struct TapeOptions {
  /// Allow several gradient() calls. A non-persistent tape releases everything it recorded
  /// after its first gradient() call, and a second call is an error.
  bool persistent = false;
  /// Watch every trainable variable read with Variable::value() while the tape records (as
  /// TensorFlow's tapes do), so gradient(target, variables) needs no watch() calls.
  bool watch_accessed_variables = true;
};

/// Records differentiable ops while alive (RAII). Tapes nest: inner tapes and outer tapes record
/// independently, and an outer tape records the ops an inner tape's gradient() runs.
/// Tapes are per thread and must be destroyed in reverse order of creation (scopes do that).
class GradientTape {
 public:
  GradientTape();
  explicit GradientTape(TapeOptions options);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  /// Starts tracking t: ops that use t (directly or indirectly) are recorded.
  /// t must have a floating dtype.
  void watch(const Tensor& t);
  /// Watches v (trainable or not): its reads while the tape records are tracked.
  void watch(const Variable& v);

  /// d target / d source for each source, as tensors of the sources' shapes. `target` must be a
  /// scalar (one element) unless `output_gradient` (of target's shape) is given. A source the
  /// target does not depend on gets zeros. Integer sources are an error.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_gradient = Tensor());
  /// Single-source form.
  Tensor gradient(const Tensor& target, const Tensor& source,
                  const Tensor& output_gradient = Tensor());
  /// d target / d variable for each variable: the sum over the values read from it while the
  /// tape recorded (see TapeOptions::watch_accessed_variables). A variable that was not read
  /// gets zeros of its shape.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& variables,
                               const Tensor& output_gradient = Tensor());
  /// The variables this tape watched, in order of first read.
  std::vector<Variable> watched_variables() const;

  /// Pauses / resumes recording on this tape (e.g. for bookkeeping ops).
  void stop_recording();
  void resume_recording();

 private:
  std::unique_ptr<detail::TapeState> state_;
};

/// x with its gradient cut: tapes treat the result as a constant.
Tensor stop_gradient(const Tensor& x);

/// A differentiable function of a list of tensors.
using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace detail {
std::pair<Tensor, std::vector<Tensor>> value_and_grad_impl(const TensorFn& f,
                                                           const std::vector<std::int64_t>& argnums,
                                                           const std::vector<Tensor>& args);
template <class F, std::size_t... I>
Tensor call_unpacked(const F& f, const std::vector<Tensor>& v, std::index_sequence<I...>) {
  return f(v[I]...);
}
}  // namespace detail

/// The function value_and_grad() returns: call it like f, get f's value and the gradients.
template <class F>
class ValueAndGrad {
 public:
  ValueAndGrad(F f, std::vector<std::int64_t> argnums)
      : f_(std::move(f)), argnums_(std::move(argnums)) {}

  /// For f taking one std::vector<Tensor>.
  std::pair<Tensor, std::vector<Tensor>> operator()(
      const std::vector<Tensor>& args) const requires std::is_invocable_r_v < Tensor,
      const F&, const std::vector<Tensor>
  & > { return detail::value_and_grad_impl(TensorFn(f_), argnums_, args); }

  /// For f taking tensors as separate arguments.
  template <class... Args>
  requires(sizeof...(Args) > 0 && (std::is_convertible_v<const Args&, Tensor> &&
                                   ...)) std::pair<Tensor, std::vector<Tensor>>
  operator()(const Args&... args) const {
    const std::vector<Tensor> packed{Tensor(args)...};
    return detail::value_and_grad_impl(
        [this](const std::vector<Tensor>& v) {
          return detail::call_unpacked(f_, v, std::make_index_sequence<sizeof...(Args)>{});
        },
        argnums_, packed);
  }

 private:
  F f_;
  std::vector<std::int64_t> argnums_;
};

/// value_and_grad(f, argnums) returns a function that evaluates f and the gradients of its
/// (one-element) result with respect to the arguments listed in argnums (every argument when
/// empty; negative numbers count from the end). f takes its tensors either as separate
/// arguments, `f(x, y)`, or as one `std::vector<Tensor>`; call the result the same way:
///
///     auto [loss, grads] = kiln::value_and_grad(loss_fn)(w, b);   // grads[0]: d/dw, grads[1]:
///     d/db
template <class F>
ValueAndGrad<F> value_and_grad(F f, std::vector<std::int64_t> argnums = {}) {
  return ValueAndGrad<F>(std::move(f), std::move(argnums));
}

/// The function grad() returns: like ValueAndGrad, returning only the gradients.
template <class F>
class Grad {
 public:
  explicit Grad(ValueAndGrad<F> vg) : vg_(std::move(vg)) {}
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const { return vg_(args).second; }
  template <class... Args>
  requires(sizeof...(Args) > 0 &&
           (std::is_convertible_v<const Args&, Tensor> && ...)) std::vector<Tensor>
  operator()(const Args&... args) const { return vg_(args...).second; }

 private:
  ValueAndGrad<F> vg_;
};

/// grad(f, argnums): the gradients only (see value_and_grad).
template <class F>
Grad<F> grad(F f, std::vector<std::int64_t> argnums = {}) {
  return Grad<F>(value_and_grad(std::move(f), std::move(argnums)));
}

/// f(primals) and the vector-Jacobian product cotangent^T J for each primal.
std::pair<Tensor, std::vector<Tensor>> vjp(const TensorFn& f, const std::vector<Tensor>& primals,
                                           const Tensor& cotangent);

/// The backward rule of a custom gradient: given the output gradient, the gradients of the
/// inputs (one per input, undefined for none).
using GradFn = std::function<std::vector<Tensor>(const Tensor& output_gradient)>;

/// Makes a function whose gradient is user-defined. `f` returns the value and its backward rule;
/// tapes record the call as one step that applies that rule. Ops inside f are not recorded.
/// Useful for straight-through estimators and numerically stable composites.
std::function<Tensor(const std::vector<Tensor>&)> custom_gradient(
    std::function<std::pair<Tensor, GradFn>(const std::vector<Tensor>&)> f);

}  // namespace kiln

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
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
struct TapeState;
}

/// Options of a GradientTape.
struct TapeOptions {
  /// Allow several gradient() calls. A non-persistent tape releases everything it recorded
  /// after its first gradient() call, and a second call is an error.
  bool persistent = false;
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

  /// d target / d source for each source, as tensors of the sources' shapes. `target` must be a
  /// scalar (one element) unless `output_gradient` (of target's shape) is given. A source the
  /// target does not depend on gets zeros. Integer sources are an error.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_gradient = Tensor());
  /// Single-source form.
  Tensor gradient(const Tensor& target, const Tensor& source,
                  const Tensor& output_gradient = Tensor());

  /// Pauses / resumes recording on this tape (e.g. for bookkeeping ops).
  void stop_recording();
  void resume_recording();

 private:
  std::unique_ptr<detail::TapeState> state_;
};

/// x with its gradient cut: tapes treat the result as a constant.
Tensor stop_gradient(const Tensor& x);

/// A differentiable function of tensors.
using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// value_and_grad(f, argnums)(args): f(args) and the gradients of that (scalar) value with
/// respect to args[argnums[i]]. An empty argnums means every argument.
std::function<std::pair<Tensor, std::vector<Tensor>>(const std::vector<Tensor>&)> value_and_grad(
    TensorFn f, std::vector<std::int64_t> argnums = {});
/// grad(f, argnums)(args): just the gradients.
std::function<std::vector<Tensor>(const std::vector<Tensor>&)> grad(
    TensorFn f, std::vector<std::int64_t> argnums = {});
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

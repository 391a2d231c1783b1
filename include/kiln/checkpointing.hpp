#pragma once
/// @file checkpointing.hpp
/// Gradient checkpointing (rematerialization): kiln::checkpoint(f) computes f's result but lets
/// gradient tapes keep only f's inputs, recomputing f's forward in the backward pass. The scan
/// counterpart is ScanOptions::checkpoint_every (kiln/control_flow.hpp). Not to be confused
/// with kiln::Checkpoint (kiln/checkpoint.hpp), which saves and restores variables.

#include <functional>
#include <memory>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
struct CheckpointedImpl;
}

/// What kiln::checkpoint returns: call it like f. Copies share one cache.
///
/// With no gradient tape recording it simply calls f. Under a tape:
/// - inside kiln::function (or a scan, while_loop or cond body), f is traced into a region of
///   the graph, run as its own step, and its gradient replays that region from f's inputs and
///   takes its vector-Jacobian product there, so the tape keeps f's inputs and results only;
/// - eagerly, f is traced once per input signature (dtypes and shapes) into a graph cached in
///   this object, and both the forward and the recomputing backward run compiled from that
///   graph. As in kiln::function, variables are read by reference and eager tensors f captures
///   are frozen at that trace (pass tensors that change as arguments); f may create variables
///   on its first trace only.
/// Gradients reach f's arguments, the variables f reads and the tensors it captures. f must not
/// assign variables.
class Checkpointed {
 public:
  explicit Checkpointed(std::shared_ptr<detail::CheckpointedImpl> impl) : impl_(std::move(impl)) {}

  /// f(args), keeping only args (and what f captures) for the backward pass.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  /// For f of one tensor returning one tensor.
  Tensor operator()(const Tensor& x) const;

  /// How many times f was traced eagerly (once per new input signature under a tape).
  int tracing_count() const;

 private:
  std::shared_ptr<detail::CheckpointedImpl> impl_;
};

/// Wraps f so that gradients recompute its forward instead of keeping its intermediates:
/// `auto g = kiln::checkpoint(f);` (TensorFlow's tf.recompute_grad, jax.checkpoint).
Checkpointed checkpoint(std::function<std::vector<Tensor>(const std::vector<Tensor>&)> f);
/// One tensor in, one tensor out.
Checkpointed checkpoint(std::function<Tensor(const Tensor&)> f);

}  // namespace kiln

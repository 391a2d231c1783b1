#pragma once
// Tape internals: what apply() records and what gradient() walks back.

#include <functional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/hooks.hpp"
#include "kernels/kernel.hpp"
#include "kiln/autodiff.hpp"

namespace kiln::detail {

struct TensorImpl;

/// The gradients of a recorded multi-output application's inputs, given its outputs'
/// gradients (an undefined tensor where an output got none; at least one is defined).
using MultiGradFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& output_grads)>;

/// One recorded application: a primitive (prim + attrs), a custom-gradient call, or an
/// application with several outputs and its own rule (a traced scan).
struct TapeEntry {
  Prim prim = Prim::add;
  std::vector<Tensor> inputs;
  Attrs attrs;
  Tensor output;
  GradFn custom;                // set for custom_gradient entries
  std::vector<Tensor> outputs;  // multi-output entries (output is unset)
  MultiGradFn multi;
};

struct TapeState {
  TapeOptions options;
  bool recording = true;
  bool released = false;
  std::unordered_set<const TensorImpl*> tracked;
  std::vector<Tensor> watched;  // keeps watched tensors (and so their identity) alive
  std::vector<TapeEntry> entries;
  // Variables watched while recording, in order of first read, and the values read from each
  // (by variable id).
  std::vector<Variable> variables;
  std::unordered_map<std::uint64_t, std::vector<Tensor>> variable_reads;
};

// recording_tapes and any_tape_recording() are in core/hooks.hpp: apply() checks them before
// anything else and calls record() through tape_hooks.

/// Records one primitive application on every recording tape that tracks one of its inputs.
void record(Prim p, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor& output);

/// Records an application with several outputs and its gradient rule on every recording tape
/// that tracks one of its inputs (the outputs are then tracked).
void record_multi_output(std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                         const MultiGradFn& rule);

/// Which inputs of an entry need a gradient: flags by input, or all of them when empty.
using WantedInputs = std::vector<bool>;
inline bool is_wanted(const WantedInputs& wanted, std::size_t input) {
  return wanted.empty() || (input < wanted.size() && wanted[input]);
}

/// The vector-Jacobian rule of a primitive entry: one gradient per input (undefined where the
/// input gets none). Written with kiln ops. Rules whose gradients are costly products (matmul,
/// convolution, a recurrence's input projection) skip the inputs `wanted` leaves out (a
/// network's input, a frozen weight) and return them undefined.
std::vector<Tensor> primitive_vjp(const TapeEntry& entry, const Tensor& output_gradient,
                                  const WantedInputs& wanted = {});
/// primitive_vjp's part for the indexing primitives (vjp_indexing.cpp).
std::vector<Tensor> indexing_vjp(const TapeEntry& entry, const Tensor& output_gradient);
/// primitive_vjp's part for the windowed primitives (vjp_window.cpp).
std::vector<Tensor> window_vjp(const TapeEntry& entry, const Tensor& output_gradient,
                               const WantedInputs& wanted);

/// Called by Variable::value() while some tape records: recording tapes that watch accessed
/// variables track `value` as a read of v.
void note_variable_read(const Variable& v, const Tensor& value);

/// Pauses every tape on this thread for its lifetime (what custom_gradient's forward and
/// kiln::checkpoint's recomputed forward run under).
class PauseAllTapes {
 public:
  PauseAllTapes();
  ~PauseAllTapes();
  PauseAllTapes(const PauseAllTapes&) = delete;
  PauseAllTapes& operator=(const PauseAllTapes&) = delete;

 private:
  std::vector<bool> was_;
};

/// True when some recording tape on this thread tracks t.
bool any_recording_tape_tracks(const Tensor& t);

/// True for primitives that carry gradients (at least to one input).
bool is_differentiable(Prim p);

}  // namespace kiln::detail

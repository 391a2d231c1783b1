#pragma once
/// @file nn/layer.hpp
/// The base of kiln's layers, activations, and the learning phase (training or inference).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/config.hpp"
#include "kiln/init.hpp"
#include "kiln/module.hpp"
#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln::nn {

/// Elementwise (softmax: along the last axis) function applied to a layer's output.
enum class Activation { none, relu, sigmoid, tanh, softmax };

/// a(x): x itself for Activation::none.
Tensor activate(Activation a, const Tensor& x);
/// "none", "relu", "sigmoid", "tanh", "softmax".
std::string_view activation_name(Activation a);
/// The activation called `name` (activation_name's inverse); another name is a kiln::Error.
Activation activation_named(std::string_view name);

/// The shape and dtype of the input a layer was built for (dims of -1 may have any size).
struct InputSpec {
  Shape shape;
  DType dtype = f32;
};

/// Whether layers run in training mode on this thread (false by default). Only nn::Dropout
/// behaves differently. train::fit sets it for its train step and clears it for evaluate and
/// predict.
///
/// Inside a kiln::function the phase in effect while tracing is baked into the graph (it is
/// not part of the cache key), so a function that must run in both phases should take the
/// phase as a static argument and set it inside:
/// `kiln::function([&](const Tensor& x, bool training) { LearningPhaseScope s(training); ... })`.
bool learning_phase();

/// RAII: sets the learning phase of this thread while alive, restoring the previous one after.
class LearningPhaseScope {
 public:
  explicit LearningPhaseScope(bool training);
  ~LearningPhaseScope();
  LearningPhaseScope(const LearningPhaseScope&) = delete;
  LearningPhaseScope& operator=(const LearningPhaseScope&) = delete;

 private:
  bool previous_;
};

/// A module with a one-tensor forward call, which is what nn::Sequential chains. Layers build
/// lazily: their variables are created on the first call, sized from the input (its last
/// dim), and found again on every later call. A later call with an input of another size is a
/// kiln::Error naming the layer's path and both sizes ("[nn.Dense] net/out was built for
/// inputs with last dim 32; called with f32 [16,8]").
///
/// A layer without an explicit name takes an automatic one, its kind ("dense", "lstm"), made
/// unique among its siblings when it is registered (Sequential{Dense(8), Dense(1)} holds
/// "dense" and "dense_1", in every instance: see Module::AutomaticName); registered under a
/// parent, its variables take the parent's path and the registration name ("net/l1/kernel").
class Layer : public Module {
 public:
  /// The layer's forward computation.
  virtual Tensor operator()(const Tensor& x) = 0;

  /// Whether the layer carries state from one call to the next (a recurrent layer built with
  /// `stateful = true`), or contains such a layer. The default asks the child modules
  /// (nn::is_stateful), so containers like nn::Sequential and nn::Bidirectional answer for
  /// their layers.
  virtual bool stateful() const;
  /// Zeroes the carried state of every stateful layer in it. The default resets the child
  /// modules (nn::reset_states), so `sequential.reset_states()` resets each of its layers; the
  /// stateful recurrent layers override it to zero their state variables.
  virtual void reset_states();

  /// Creates the layer's variables for inputs of `input_shape` and `dtype` without running it
  /// on data (Keras's `build(input_shape)`): the forward pass is traced once on a placeholder
  /// and the trace is thrown away. Dims of -1 may have any size (they are traced as dynamic),
  /// except a stateful layer's batch, which sizes its state. A built model can take
  /// load_weights, set_weights and Checkpoint::restore before its first call. Building for
  /// the input size the layer already has does nothing more; another last dim is the usual
  /// "was built for" error. Not inside a traced function (call the layer there).
  void build(const Shape& input_shape, DType dtype = f32);

  /// The input the layer was built for: the shape given to build(), or else that of the first
  /// input that created its variables (a Sequential: of its first call), dynamic dims as -1;
  /// nullopt before either. kiln::nn::to_json stores the root layer's, so that from_json
  /// returns a model with every variable created.
  const std::optional<InputSpec>& built_input() const { return built_input_; }

 protected:
  /// `name` as given, or the automatic name default_name when empty.
  Layer(std::string_view default_name, std::string name);

  /// The variable `name` with the given shape, created on the first call. Its dim 0 is the
  /// input size (the last dim of x): if the variable exists with another shape, throws the
  /// "[op] <path> was built for inputs with last dim N; called with ..." error.
  Variable input_weight(std::string_view op, const Tensor& x, std::string_view name,
                        const Shape& shape, const init::Initializer& initializer);
  /// A variable whose shape does not depend on the input (created once, found after).
  Variable weight(std::string_view name, const Shape& shape, const init::Initializer& initializer,
                  bool trainable = true, DType dtype = f32);
  /// The last dim of x, checking that x is defined, floating, of rank >= min_rank and that the
  /// last dim is static.
  std::int64_t input_size(std::string_view op, const Tensor& x, std::int64_t min_rank) const;
  /// Records x's shape and dtype as built_input() unless one is recorded already.
  void note_input(const Tensor& x);
  /// The start of every built-in layer's config(): {"name": name} for an explicit name, {}
  /// for an automatic one (which the copy made from the file takes again).
  Config base_config() const;

 private:
  std::optional<InputSpec> built_input_;
};

/// Whether the module tree rooted at `root` holds a stateful layer: root.stateful() for a layer,
/// else whether any child is stateful (depth-first). For models that are plain kiln::Modules
/// with layers as members; train::fit uses it to decide how to batch (see kiln/train.hpp).
bool is_stateful(const Module& root);
/// Zeroes the carried state of every stateful layer in the tree rooted at `root` (a layer's
/// reset_states(), or each child's for a module that is not a layer). Layers that are not
/// stateful, and stateful ones not called yet (no state variables yet), are left as they are.
void reset_states(Module& root);

}  // namespace kiln::nn

#pragma once
// The graph IR that tracing records and the compiler passes rewrite.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/fused.hpp"
#include "kernels/kernel.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

struct VariableImpl;

/// One value-producing step of a traced function.
struct Node {
  enum class Kind : std::uint8_t {
    parameter,    // a tensor argument of the function (index = flat argument position)
    constant,     // an eager tensor captured by value while tracing
    variable,     // a variable's value, read when the function is called (index = variable slot)
    primitive,    // prim applied to inputs
    assign,       // new value of variable slot `index` (inputs[0]); a side effect, kept in order
    assign_rows,  // rows inputs[0] of variable slot `index` updated in place from values
                  // inputs[1] (attrs.ints: {RowUpdate mode, padded}); a side effect run when
                  // the call ends; its dtype and shape are the values'
    fused,        // a fused elementwise program over inputs (made by fuse_elementwise)
    // Control flow: nodes with subgraphs (`regions`) and several results, each read through an
    // `output` node. Their own dtype and shape mean nothing. Region parameters are numbered as
    // below; a region's captures are outer values its body used (inputs after the others).
    scan,        // regions {body}; inputs: carries (attrs.ints[0]), xs (ints[1]), captures;
                 // body(carries, x slices, captures) -> (carries, ys); results: carries, then
                 // each y stacked along a new axis 0; ints[2]: 1 to run from the last step;
                 // attrs.axis: the step count when there are no xs (else xs' leading dim)
    while_loop,  // regions {cond, body}; inputs: values (ints[0]), cond's captures (ints[1]),
                 // body's captures (ints[2]); cond(values, captures) -> bool scalar;
                 // body(values, captures) -> values; results: the values; ints[3]: maximum
                 // iterations (-1: none)
    cond,        // regions {true, false}; inputs: pred, operands (ints[0]), true's captures
                 // (ints[1]), false's captures (ints[2]); results: the chosen region's outputs
    output,      // result `index` of the control-flow node inputs[0]
  };
  Kind kind = Kind::primitive;
  Prim prim = Prim::add;
  Attrs attrs;
  std::vector<std::int32_t> inputs;
  DType dtype = DType::f32;
  Shape shape;
  Tensor constant;
  std::int32_t index = -1;
  std::shared_ptr<const FusedProgram> program;                   // fused nodes
  std::vector<std::shared_ptr<const struct GraphData>> regions;  // control-flow nodes

  bool is_control_flow() const {
    return kind == Kind::scan || kind == Kind::while_loop || kind == Kind::cond;
  }
};

/// A whole traced function: nodes in a valid execution order, its outputs and side effects.
struct GraphData {
  std::vector<Node> nodes;
  std::vector<std::int32_t> outputs;
  std::vector<std::int32_t> side_effects;  // assign and assign_rows nodes, in program order
  std::vector<std::weak_ptr<VariableImpl>> variables;  // captured variables, by slot
  std::vector<std::string> variable_names;
  std::size_t num_parameters = 0;
  /// What kernels keep between calls, per node (KernelMemo): shared by the graph's plans (one
  /// per set of dynamic sizes), so a layer's laid-out weights are kept once.
  std::shared_ptr<KernelMemos> kernel_memos = std::make_shared<KernelMemos>();

  /// A readable listing, one node per line, like a jaxpr.
  std::string to_string() const;
  /// Graphviz text.
  std::string to_dot() const;
  /// Bytes held by the graph (nodes, attributes, constants).
  std::int64_t bytes() const;
};

/// Removes nodes that no output or side effect depends on. Returns how many were removed.
std::size_t eliminate_dead_code(GraphData& g);
/// Merges nodes that compute the same thing (same primitive, attributes and inputs; the same
/// captured constant). Returns how many were merged.
std::size_t eliminate_common_subexpressions(GraphData& g);
/// Evaluates primitives whose inputs are all constants (static shapes, results up to
/// max_folded_elements) and makes them constants. Returns how many were folded.
inline constexpr std::int64_t max_folded_elements = std::int64_t{1} << 20;
std::size_t fold_constants(GraphData& g);
/// Algebraic identities: x*1, x+0, x-0, x/1, neg(neg x), transpose of transpose, reshape
/// chains, reshape/broadcast/cast/slice that change nothing, and a sum of zero-pads that tile
/// one axis (the gradient of split) rewritten as one concat. Returns how many nodes were
/// bypassed or rewritten (bypassed ones are removed when nothing else uses them).
std::size_t simplify_algebra(GraphData& g);
/// Groups chains and trees of elementwise primitives with one output shape into fused nodes
/// (each intermediate used once, inside the group). Returns how many fused nodes were made.
std::size_t fuse_elementwise(GraphData& g);

/// Points every use of node i at replacement[i] (uses: inputs, outputs, side effects) and
/// removes the nodes nothing needs any more.
void replace_uses(GraphData& g, const std::vector<std::int32_t>& replacement);

}  // namespace kiln::detail

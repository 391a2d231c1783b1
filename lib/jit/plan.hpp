#pragma once
// The executable form of a concrete function for one set of node shapes: kernels resolved,
// views turned into layouts, and every intermediate placed in one arena whose offsets come
// from value lifetimes (memory planning). A call allocates the arena once and runs the steps.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/graph.hpp"
#include "kernels/lowering.hpp"

namespace kiln::detail {

/// A group of fused steps as one generated loop (group_elementwise_steps): one program made of
/// the steps' instructions in order, each step's result written to that step's output.
struct FusedGroupLoop {
  FusedProgram program;  // extra output e: the group's step e; the output: its last step
  std::shared_ptr<const FusedLayout> layout;  // with its generated loop
  std::vector<std::int32_t> inputs;           // the value each program input reads
};

/// The steps and arena that compute one graph for one set of node shapes (see Executable).
/// An Executable runs one for the whole call; a BatchSplit holds one per half of the rows.
struct Plan {
  /// A buffer a value lives in. Its address is known only at call time.
  struct Root {
    enum class Kind : std::uint8_t {
      argument,  // the call's tensor argument `index` (made contiguous if it is not)
      constant,  // node `index`'s captured constant (its own strides)
      variable,  // variable slot `index`, read when the call starts
      arena,     // [offset, offset + bytes) of the call's arena
      escape,    // a fresh buffer per call: it is, or backs, an output or an assigned value
    };
    Kind kind = Kind::arena;
    std::int32_t index = -1;
    DType dtype = DType::f32;
    Shape shape;              // arena/escape: the buffer's shape (contiguous)
    std::int64_t offset = 0;  // arena: bytes into the arena; constant: bytes into the tensor
    Shape strides;            // escape: shape's contiguous strides
    std::int64_t bytes = 0;   // escape: the buffer's size
  };
  /// Where a value's elements are: a root plus an element offset and strides.
  struct Value {
    std::int32_t root = -1;
    std::int64_t offset = 0;  // elements from the root's first element
    DType dtype = DType::f32;
    Shape shape;
    Shape strides;
  };
  struct Step {
    enum class Kind : std::uint8_t {
      kernel,  // kernel_for(prim) on refs (inputs, then the output)
      flat,    // one elementwise row kernel call: inputs contiguous or single elements
      fused,   // run_fused(program) on refs
      copy,    // copy_strided(refs[0] -> refs[1]): a contiguous copy for a kernel's input
      region,  // a control-flow node: runs region_plans (values: its inputs, then the results
               // read by output nodes, which it writes: arena buffers, or escape buffers it
               // allocates first)
    };
    Kind kind = Kind::kernel;
    Prim prim = Prim::add;
    std::int32_t node = -1;                    // the graph node it computes (copy: the consumer's)
    KernelFn fn = nullptr;                     // kernel steps
    const Attrs* attrs = nullptr;              // kernel steps: the node's attributes
    const FusedProgram* program = nullptr;     // fused steps
    /// A fused step's program when the plan made it (a step of one primitive joining a group
    /// of fused steps, group_elementwise_steps), else null: `program` is then the graph node's.
    std::shared_ptr<const FusedProgram> own_program;
    std::shared_ptr<const MatmulPlan> matmul;  // matmul kernel steps: the kernel chosen here
    std::vector<std::int32_t> values;          // value of each ref: inputs, then the output
    std::vector<ArrayRef> refs;                // layouts with data unset, filled in at call time
    std::int32_t allocate_escape = -1;         // an escape root to allocate just before this step
    /// Fused steps: how run_fused walks the refs (null for long rows, which need the refs).
    std::shared_ptr<const FusedLayout> fused_layout;
    FlatCall flat;  // flat steps: the row-kernel call
    /// Region steps: a plan per region of the node (for the node shapes this plan is built for),
    /// how many of `values` are inputs, and which result each later value is.
    std::vector<std::shared_ptr<const Plan>> region_plans;
    std::int32_t num_inputs = 0;
    std::vector<std::int32_t> result_index;
    /// Steps that compute a variable's new value in the variable's buffer (update_root's) when
    /// nothing else holds it, else in a fresh buffer:
    /// - matmul kernel steps with an SGD update folded in (fold_sgd_updates): values are a, b,
    ///   the learning rate (a scalar) and the new value, variable - rate * (a b), computed by the
    ///   GEMM with alpha = -rate (into a copy of the variable's value when it is held);
    /// - elementwise steps (update_variables_in_place): the step as it is, its output written
    ///   over the variable's value, which it reads, if at all, with the output's layout.
    std::int32_t update_root = -1;
    /// The first step of a group (group_elementwise_steps): how many steps, this one and those
    /// right after it, run as one run_fused_group; 0 for every other step.
    std::int32_t group_size = 0;
    /// The first step of a group: the group as one loop, where the loop generator covers it
    /// (else null, and the steps run chunk by chunk).
    std::shared_ptr<const FusedGroupLoop> group_loop;
    /// Kernel steps of a primitive that keeps state between calls (keep_kernel_memos): the
    /// node's memo, and per input the root whose buffer it reads where that is a variable's
    /// value or a captured constant, whose contents stay as they are while held, else -1.
    std::shared_ptr<KernelMemo> memo;
    std::vector<std::int32_t> fixed_roots;

    /// How many of `values` the step reads: a region step its inputs, another step all but its
    /// last value. The values after those are what it writes.
    std::size_t num_reads() const {
      return kind == Kind::region ? static_cast<std::size_t>(num_inputs) : values.size() - 1;
    }
  };

  std::vector<Root> roots;
  std::vector<Value> values;  // node i's value is values[i]; contiguous copies follow
  std::vector<Step> steps;
  std::int64_t arena_bytes = 0;
  /// Per function output: 1 if it is a whole escape buffer that no later output reads, so the
  /// call hands over the buffer's tensor instead of sharing it.
  std::vector<std::uint8_t> moved_outputs;
  /// Whether the graph updates rows of a variable in place (an assign_rows side effect): the
  /// call then lets go of the variables' values it read before it runs the side effects.
  bool updates_rows = false;
  /// With updates_rows: the variable roots the call lets go of then (read by no output and no
  /// side effect's input), so only the variable still holds its value.
  std::vector<std::int32_t> released_variable_roots;

  std::int64_t bytes() const;

  /// The buffer value `value` lives in.
  std::size_t root_of(std::int32_t value) const {
    return static_cast<std::size_t>(values[static_cast<std::size_t>(value)].root);
  }
  /// Value `value`'s layout, data unset.
  ArrayRef layout_of(std::int32_t value) const {
    const Value& v = values[static_cast<std::size_t>(value)];
    return ArrayRef{nullptr, v.dtype, v.shape, v.strides};
  }
  /// Value `value` read broadcast to out_shape (as elementwise kernels read it), data unset.
  ArrayRef broadcast_layout_of(std::int32_t value, const Shape& out_shape) const {
    const Value& v = values[static_cast<std::size_t>(value)];
    return ArrayRef{
        nullptr, v.dtype, out_shape,
        v.shape == out_shape ? v.strides : broadcast_strides(v.shape, v.strides, out_shape)};
  }
};

/// Matmul epilogues (plan_epilogues.cpp), run by build_plan on the lowered steps before memory
/// planning: a sum of matmul products and at most one other term (a bias, broadcast or not),
/// `x W + h U + b` in an RNN or LSTM step or `x W + b` in a dense layer, is computed without the
/// sum: the other term is copied into the sum's buffer first and every product is accumulated
/// into it by its GEMM (beta = 1). It pays when the products are read only by the sum: one pass
/// over the output instead of one per term, and no buffer per product.
void fuse_matmul_epilogues(Plan& plan);

/// SGD updates folded into their gradients' GEMMs (plan_epilogues.cpp), run after
/// fuse_matmul_epilogues: a variable assigned `w - rate * (a b)`, the product read by nothing
/// else, is updated by the product's GEMM (alpha = -rate, beta = 1) straight into w's buffer when
/// only the variable holds it, instead of the GEMM writing the gradient and an elementwise pass
/// reading it and w and writing a new buffer. Those GEMMs run after every other step, so a call
/// that fails changes no variable (a graph with row updates, whose checks run later, is left as
/// it is). The result differs from the unfused one by rounding only (one fused multiply-add).
void fold_sgd_updates(Plan& plan, const GraphData& g);

/// Optimizer updates in place (plan_in_place.cpp), run after fold_sgd_updates: an elementwise
/// step whose output is only assigned to a variable (its one assignment), such as Adam's or
/// momentum's updates of the variable and its slots, writes that output over the variable's
/// value when only the variable holds it and no later step reads the old value: no buffer per
/// new value, and a call's memory stays the size of the variables instead of twice it. Those
/// steps and every step that reads their results run after the other steps (and before folded
/// GEMMs), so a call that fails changes no variable; a step that is not elementwise reading a
/// result keeps its update out of place.
void update_variables_in_place(Plan& plan, const GraphData& g);

/// Memos for the kernel steps whose primitive keeps one (keeps_memo; plan_in_place.cpp): the
/// graph node's KernelMemo (GraphData::kernel_memos), for a step that reads some input from a
/// variable's value or a captured constant, none of them a variable the graph assigns (its
/// value changes every call, and a memo holding it would keep the update out of place).
void keep_kernel_memos(Plan& plan, const GraphData& g);
/// Runs a kernel step with a memo (plan_in_place.cpp): the memo goes to the kernel when no other
/// call has it, with the buffers of the step's fixed inputs (buffer_of(root)).
void run_with_memo(const Plan::Step& step, std::span<const ArrayRef> inputs, const ArrayRef& out,
                   const std::function<std::shared_ptr<Storage>(std::size_t root)>& buffer_of);

/// Groups of fused steps (plan_groups.cpp), run after update_variables_in_place and before
/// memory planning: consecutive fused steps over the same elements, each input flat or one
/// element, where a step reads what an earlier one of the run writes only at the element it
/// computes, become a group (Step::group_size). Where the loop generator covers the steps'
/// instructions together, the group runs as one loop (Step::group_loop) that reads each input
/// once and writes every step's output; otherwise, where the group's buffers exceed the
/// last-level cache, run_fused_group runs the steps chunk by chunk. Adam's updates of a
/// variable, its two moments and the variable itself, then read the gradient and the moments
/// once. The memory plan keeps a group's inputs and outputs apart (they are alive for the whole
/// group), and an output that a later step of its group reads is not streamed past the caches.
void group_elementwise_steps(Plan& plan);
/// At most this many steps per group.
inline constexpr std::size_t max_fused_group_steps = 16;

/// Whether a step computes each output element from the inputs' elements at the same index
/// only (a flat, fused or elementwise kernel step), so it may write over an input it reads with
/// the output's layout.
bool is_elementwise_step(const Plan::Step& step);

/// Whether every side effect of g is a plain assignment (no row updates, whose checks run after
/// the steps): the condition of the passes that move updates to the end.
bool assigns_only(const GraphData& g);

/// Per root: how many times the call's outputs and its assignments hold it after the steps.
std::vector<std::int32_t> held_after_steps(const Plan& plan, const GraphData& g);

/// Builds the plan of graph g for the given node shapes (null: the nodes' own, static shapes).
/// `dim_values` (the dynamic dims' sizes those shapes were bound with) binds the shapes of
/// control-flow regions too.
Plan build_plan(const GraphData& g, const std::vector<Shape>* shapes = nullptr,
                const std::vector<std::int64_t>* dim_values = nullptr);

/// Runs control-flow node `node` (scan, while_loop or cond) on its input tensors with the
/// region plans built for it, writing result k into destinations[k] (plan_regions.cpp). A
/// destination is a contiguous tensor of the result's type, or undefined when nothing reads
/// that result. Destinations never overlap the inputs.
void run_control_flow(const Node& node, std::span<const std::shared_ptr<const Plan>> region_plans,
                      const std::vector<Tensor>& inputs, std::span<const Tensor> destinations,
                      const std::string& function_name);

/// Memory a caller hands to run_plan instead of having it allocated (a loop runs its body's
/// plan many times): the arena (at least plan.arena_bytes, aligned to arena_alignment) and,
/// per graph output, a contiguous tensor of the output's type to write it into (undefined: a
/// fresh tensor as usual). A destination must not overlap an argument.
struct RunBuffers {
  const Tensor* arena = nullptr;  // a boolean tensor of the arena's bytes, or null
  std::span<const Tensor> destinations;
};

/// A tensor of arena_bytes bytes for RunBuffers::arena.
Tensor make_arena(std::int64_t arena_bytes);

/// Runs the plan on the call's tensor arguments; fills `outputs` (cleared first). Variable reads
/// are bound first (or taken from `variable_values`, one per variable slot, read by the caller:
/// the halves of a batch split see one reading; such a graph assigns nothing); assignments are
/// applied after every step succeeded, in program order. Outputs never share memory with the
/// arena. With `buffers`, the arena is the caller's and each output with a destination is
/// written there (an output computed by a step is computed there directly) and returned as it.
void run_plan(const Plan& plan, const GraphData& g, std::span<const Tensor* const> args,
              const std::string& function_name, std::vector<Tensor>& outputs,
              std::span<const Tensor> variable_values = {}, const RunBuffers* buffers = nullptr);

/// Appends g's variables to `vars`, failing with a clear error if one was destroyed.
void lock_variables(const GraphData& g, const std::string& function_name,
                    std::vector<std::shared_ptr<VariableImpl>>& vars);

/// Every node's shape with dynamic dim i replaced by values[i].
std::vector<Shape> bind_shapes(const GraphData& g, const std::vector<std::int64_t>& values);

}  // namespace kiln::detail

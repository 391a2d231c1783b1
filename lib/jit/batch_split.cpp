// Batch splitting (see batch_split.hpp): which nodes carry the batch rows, the two half plans,
// and a call that runs them on two threads.
#include "jit/batch_split.hpp"

#include <algorithm>

#include "core/tensor_impl.hpp"
#include "kernels/parallel.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

namespace {

/// The dataflow rules of batch_rows: split[i] = 1 when node i's dim 0 is the batch rows.
class RowAnalysis {
 public:
  RowAnalysis(const GraphData& g, const std::vector<Shape>* shapes) : g_(g), shapes_(shapes) {}

  std::optional<std::vector<std::uint8_t>> run() {
    if (g_.outputs.empty() || !g_.side_effects.empty()) return std::nullopt;
    const Shape& first = shape_of(g_.outputs[0]);
    if (first.empty() || first[0] < 2) return std::nullopt;
    rows_ = first[0];
    split_.assign(g_.nodes.size(), 0);
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      const auto rule = node_rule(static_cast<std::int32_t>(i));
      if (!rule) return std::nullopt;
      split_[i] = *rule ? 1 : 0;
    }
    for (auto o : g_.outputs)
      if (!is_split(o)) return std::nullopt;
    return std::move(split_);
  }

 private:
  const Shape& shape_of(std::int32_t id) const {
    return shapes_ ? (*shapes_)[static_cast<std::size_t>(id)]
                   : g_.nodes[static_cast<std::size_t>(id)].shape;
  }
  bool is_split(std::int32_t id) const { return split_[static_cast<std::size_t>(id)] != 0; }
  /// dim 0 of this value is the batch rows.
  bool spans_rows(std::int32_t id) const {
    const Shape& s = shape_of(id);
    return !s.empty() && s[0] == rows_;
  }
  /// A value the same for every row, read by an op whose output has `rank` dims: it must be
  /// broadcast along the rows (fewer dims, or a dim 0 of 1).
  bool broadcast_over_rows(std::int32_t id, std::size_t rank) const {
    const Shape& s = shape_of(id);
    return s.size() < rank || s[0] == 1;
  }

  /// Whether node `id` is split (true), the same for every row (false), or breaks the rows'
  /// independence (nullopt).
  std::optional<bool> node_rule(std::int32_t id) const {
    const Node& node = g_.nodes[static_cast<std::size_t>(id)];
    switch (node.kind) {
      case Node::Kind::parameter:
      case Node::Kind::constant:
        return spans_rows(id);
      case Node::Kind::variable:
        return false;
      case Node::Kind::assign:
      case Node::Kind::assign_rows:
        return std::nullopt;
      case Node::Kind::scan:  // control flow runs whole (its regions are not split)
      case Node::Kind::while_loop:
      case Node::Kind::cond:
      case Node::Kind::output:
        return std::nullopt;
      case Node::Kind::fused:
        return elementwise_rule(id, node);
      case Node::Kind::primitive:
        break;
    }
    bool any_split = false;
    for (auto in : node.inputs) any_split = any_split || is_split(in);
    const Prim p = node.prim;
    const SplitRule rule = info(p).split;
    // dim_size would read a half's rows; random numbers drawn twice would differ from one draw.
    if (rule == SplitRule::never) return std::nullopt;
    if (rule == SplitRule::elementwise) return elementwise_rule(id, node);
    if (rule == SplitRule::matmul) return matmul_rule(id, node);
    if (rule == SplitRule::broadcast && !any_split)
      return spans_rows(id) && broadcast_over_rows(node.inputs[0], shape_of(id).size());
    if (!any_split) return false;
    if (!spans_rows(id)) return std::nullopt;
    const std::int32_t in = node.inputs[0];
    switch (rule) {
      case SplitRule::reduce: {
        // Inputs after the first (layer_norm's gamma and beta) are the same for every row.
        for (std::size_t i = 1; i < node.inputs.size(); ++i)
          if (is_split(node.inputs[i])) return std::nullopt;
        return node.attrs.axes.empty() || node.attrs.axes[0] == 0 ? std::nullopt
                                                                  : std::optional<bool>(true);
      }
      case SplitRule::reshape:
        return spans_rows(in) ? std::optional<bool>(true) : std::nullopt;
      case SplitRule::transpose:
        return node.attrs.axes[0] == 0 ? std::optional<bool>(true) : std::nullopt;
      case SplitRule::broadcast:
        return shape_of(in).size() == shape_of(id).size() ? std::optional<bool>(true)
                                                          : std::nullopt;
      case SplitRule::slice:  // the whole of dim 0, step 1
        return node.attrs.ints[0] == 0 && node.attrs.ints[1] == 1 ? std::optional<bool>(true)
                                                                  : std::nullopt;
      case SplitRule::pad:  // nothing added along dim 0
        return node.attrs.ints[0] == 0 && node.attrs.ints[1] == 0 ? std::optional<bool>(true)
                                                                  : std::nullopt;
      case SplitRule::concat: {
        if (node.attrs.axis == 0) return std::nullopt;
        for (auto i : node.inputs)
          if (!is_split(i)) return std::nullopt;
        return true;
      }
      case SplitRule::mixes_rows:
      case SplitRule::elementwise:
      case SplitRule::matmul:
      case SplitRule::never:
        return std::nullopt;
    }
    return std::nullopt;
  }

  /// Elementwise: split inputs have the output's rank (dim 0 aligned); the others broadcast
  /// along the rows.
  std::optional<bool> elementwise_rule(std::int32_t id, const Node& node) const {
    const std::size_t rank = shape_of(id).size();
    bool any_split = false;
    for (auto in : node.inputs) any_split = any_split || is_split(in);
    if (!any_split) return false;
    if (!spans_rows(id)) return std::nullopt;
    for (auto in : node.inputs) {
      const bool ok = is_split(in) ? shape_of(in).size() == rank : broadcast_over_rows(in, rank);
      if (!ok) return std::nullopt;
    }
    return true;
  }

  /// a @ b: with 2-d operands only the rows of a may be split; with a batch of products every
  /// operand is split along the batch or broadcast over it.
  std::optional<bool> matmul_rule(std::int32_t id, const Node& node) const {
    const std::int32_t a = node.inputs[0], b = node.inputs[1];
    if (!is_split(a) && !is_split(b)) return false;
    const std::size_t rank = shape_of(id).size();
    if (!spans_rows(id) || rank < 2) return std::nullopt;
    if (rank == 2)
      return is_split(a) && !is_split(b) && shape_of(a).size() == 2 ? std::optional<bool>(true)
                                                                    : std::nullopt;
    for (auto in : {a, b}) {
      const bool ok = is_split(in) ? shape_of(in).size() == rank : broadcast_over_rows(in, rank);
      if (!ok) return std::nullopt;
    }
    return true;
  }

  const GraphData& g_;
  const std::vector<Shape>* shapes_;
  std::int64_t rows_ = 0;
  std::vector<std::uint8_t> split_;
};

/// A graph's work for one set of shapes: multiply-adds of products plus elementwise element-ops,
/// and the multiply-adds of its largest product.
struct Work {
  std::int64_t total = 0, largest_product = 0;
};

Work work_of(const GraphData& g, const std::vector<Shape>& shapes) {
  Work work;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::int64_t elements = shapes[i].numel();
    if (n.kind == Node::Kind::fused) {
      work.total += elements * static_cast<std::int64_t>(n.program->ops.size());
    } else if (n.kind == Node::Kind::primitive) {
      if (n.prim == Prim::matmul) {
        const Shape& a = shapes[static_cast<std::size_t>(n.inputs[0])];
        const std::int64_t product = elements * (a.empty() ? 1 : a[a.size() - 1]);
        work.total += product;
        work.largest_product = std::max(work.largest_product, product);
      } else if (is_elementwise(n.prim)) {
        work.total += elements;
      }
    }
  }
  return work;
}

/// The rows [first, first + count) of t, as a view.
Tensor row_view(const Tensor& t, std::int64_t first, std::int64_t count) {
  const TensorImpl& impl = *t.impl();
  Shape shape = impl.shape;
  shape[0] = count;
  return make_view(t, shape, impl.strides, impl.offset + first * impl.strides[0]);
}

}  // namespace

std::optional<std::vector<std::uint8_t>> batch_rows(const GraphData& g,
                                                    const std::vector<Shape>* shapes) {
  return RowAnalysis(g, shapes).run();
}

std::int64_t BatchSplit::bytes() const {
  return static_cast<std::int64_t>(sizeof(BatchSplit) + split_arguments.capacity() +
                                   output_shapes.capacity() * sizeof(Shape)) +
         halves[0].bytes() + halves[1].bytes();
}

std::unique_ptr<BatchSplit> plan_batch_split(const GraphData& g,
                                             const std::vector<Shape>* bound_shapes) {
  if (num_threads() < 2) return nullptr;
  std::vector<Shape> node_shapes;
  if (bound_shapes == nullptr) {
    for (const Node& n : g.nodes) node_shapes.push_back(n.shape);
    bound_shapes = &node_shapes;
  }
  const std::vector<Shape>& full = *bound_shapes;
  for (const Shape& s : full)
    if (s.has_dynamic_dims()) return nullptr;
  const auto rows = batch_rows(g, &full);
  if (!rows) return nullptr;
  constexpr std::int64_t min_rows = 8;
  const std::int64_t batch = full[static_cast<std::size_t>(g.outputs[0])][0];
  const Work work = work_of(g, full);
  if (batch < min_rows || work.total < min_split_work || work.total > max_split_work ||
      work.largest_product >= max_split_work)
    return nullptr;

  auto split = std::make_unique<BatchSplit>();
  split->rows = batch;
  split->first_row = {0, batch / 2};
  for (std::size_t h = 0; h < 2; ++h) {
    const std::int64_t count = split->half_rows(h);
    const bool same_as_first = h == 1 && count == split->half_rows(0);
    std::vector<Shape> shapes;
    if (!same_as_first) {
      shapes.reserve(g.nodes.size());
      for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        shapes.push_back(full[i]);
        if ((*rows)[i] != 0) shapes.back()[0] = count;
      }
    }
    Plan& plan = split->halves[h];
    if (same_as_first)
      plan = split->halves[0];  // an even batch: the same plan, read from other rows
    else
      plan = build_plan(g, &shapes);
    // A split constant is read from its half's first row on.
    for (Plan::Root& root : plan.roots) {
      if (root.kind != Plan::Root::Kind::constant ||
          (*rows)[static_cast<std::size_t>(root.index)] == 0)
        continue;
      const TensorImpl& c = *g.nodes[static_cast<std::size_t>(root.index)].constant.impl();
      root.offset =
          split->first_row[h] * c.strides[0] * static_cast<std::int64_t>(dtype_size(c.dtype));
    }
    // Outputs are joined from fresh buffers: an output that is an argument, constant or
    // variable (or a view of one) is handed out whole by the unsplit plan instead.
    for (auto o : g.outputs) {
      const Plan::Value& v = plan.values[static_cast<std::size_t>(o)];
      if (plan.roots[static_cast<std::size_t>(v.root)].kind != Plan::Root::Kind::escape)
        return nullptr;
    }
  }
  split->split_arguments.assign(g.num_parameters, 0);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == Node::Kind::parameter && (*rows)[i] != 0)
      split->split_arguments[static_cast<std::size_t>(g.nodes[i].index)] = 1;
  for (auto o : g.outputs) split->output_shapes.push_back(full[static_cast<std::size_t>(o)]);
  return split;
}

void run_batch_split(const BatchSplit& split, const GraphData& g,
                     std::span<const Tensor* const> args, const std::string& function_name,
                     std::vector<Tensor>& outputs) {
  // Both halves see one reading of the variables, as an unsplit call would.
  std::vector<Tensor> variable_values;
  if (!g.variables.empty()) {
    std::vector<std::shared_ptr<VariableImpl>> vars;
    lock_variables(g, function_name, vars);
    variable_values.reserve(vars.size());
    for (const auto& v : vars) variable_values.push_back(v->read());
  }
  std::array<std::vector<Tensor>, 2> views;
  std::array<std::vector<const Tensor*>, 2> half_args;
  std::array<std::vector<Tensor>, 2> half_outputs;
  for (std::size_t h = 0; h < 2; ++h) {
    const std::int64_t count = split.half_rows(h);
    views[h].reserve(args.size());
    for (std::size_t a = 0; a < args.size(); ++a) {
      if (a < split.split_arguments.size() && split.split_arguments[a] != 0) {
        views[h].push_back(row_view(*args[a], split.first_row[h], count));
        half_args[h].push_back(&views[h].back());
      } else {
        half_args[h].push_back(args[a]);
      }
    }
  }
  // Each half writes its rows of every output in place (its destinations are row views of the
  // whole outputs), so nothing joins the halves afterwards: for a memory-bound function, a
  // join copy was one more pass over every output byte.
  std::vector<Tensor> wholes;
  wholes.reserve(split.output_shapes.size());
  std::array<std::vector<Tensor>, 2> destinations;
  for (std::size_t i = 0; i < split.output_shapes.size(); ++i) {
    const Node& out = g.nodes[static_cast<std::size_t>(g.outputs[i])];
    wholes.push_back(empty(split.output_shapes[i], out.dtype));
    for (std::size_t h = 0; h < 2; ++h)
      destinations[h].push_back(row_view(wholes.back(), split.first_row[h], split.half_rows(h)));
  }
  const RunBuffers first_buffers{.destinations = destinations[0]};
  const RunBuffers second_buffers{.destinations = destinations[1]};
  auto run_first = [&](std::int64_t, std::int64_t) {
    run_plan(split.halves[0], g, half_args[0], function_name, half_outputs[0], variable_values,
             &first_buffers);
  };
  auto run_second = [&](std::int64_t, std::int64_t) {
    run_plan(split.halves[1], g, half_args[1], function_name, half_outputs[1], variable_values,
             &second_buffers);
  };
  parallel_pair(run_first, run_second);
  outputs = std::move(wholes);
}

}  // namespace kiln::detail

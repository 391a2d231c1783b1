// einsum as a composite: the equation is parsed into integer labels, each operand's diagonals
// (repeated labels) and private labels are reduced first, and operands are contracted left to
// right, each pair through one batched matmul:
//   A -> [batch, free_a, contracted] -> reshape [batch..., M, K]
//   B -> [batch, contracted, free_b] -> reshape [batch..., K, N]
//   matmul -> [batch..., M, N] -> reshape [batch..., free_a..., free_b...]
// Batch dims stay separate (matmul broadcasts them, and a dynamic batch dim survives).
//
// Labels: 'A'-'Z' are 0-25 and 'a'-'z' 26-51, so sorting labels is ASCII order (NumPy's
// implicit output); the dims of "..." are labels 52 and up, right-aligned across operands.
#include <algorithm>
#include <optional>
#include <string>

#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::fail;

constexpr std::string_view op_name = "einsum";
constexpr int ellipsis_marker = -1;
constexpr int first_ellipsis_label = 52;

std::string label_name(int label) {
  if (label >= first_ellipsis_label)
    return fmt::format("'...' dim {}", label - first_ellipsis_label);
  return fmt::format("'{}'", static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)));
}

/// The labels of one term, with ellipsis_marker where "..." stands.
std::vector<int> parse_term(std::string_view equation, std::size_t begin, std::size_t end) {
  std::vector<int> labels;
  bool ellipsis = false;
  for (std::size_t i = begin; i < end; ++i) {
    const char c = equation[i];
    if (c == ' ') continue;
    if (c >= 'A' && c <= 'Z') {
      labels.push_back(c - 'A');
    } else if (c >= 'a' && c <= 'z') {
      labels.push_back(26 + (c - 'a'));
    } else if (c == '.') {
      if (i + 2 >= end || equation[i + 1] != '.' || equation[i + 2] != '.')
        fail(op_name, "a '.' at position {} of \"{}\" is not part of a '...'", i, equation);
      if (ellipsis) fail(op_name, "more than one '...' in a term of \"{}\"", equation);
      ellipsis = true;
      labels.push_back(ellipsis_marker);
      i += 2;
    } else {
      fail(op_name, "bad character '{}' at position {} of \"{}\" (labels are a-z and A-Z)", c, i,
           equation);
    }
  }
  return labels;
}

/// A tensor with one label per axis.
struct Labeled {
  Tensor t;
  std::vector<int> labels;
};

bool contains(const std::vector<int>& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

std::vector<std::int64_t> positions_of(const Labeled& x, const std::vector<int>& labels) {
  std::vector<std::int64_t> axes;
  for (int label : labels) {
    const auto it = std::find(x.labels.begin(), x.labels.end(), label);
    axes.push_back(static_cast<std::int64_t>(it - x.labels.begin()));
  }
  return axes;
}

Labeled permuted(const Labeled& x, const std::vector<int>& order) {
  if (order == x.labels) return x;
  return {transpose(x.t, positions_of(x, order)), order};
}

/// x with the axes of `labels` broadcast to the sizes in `sizes` (a size-1 dim to the label's).
Tensor broadcast_labels(const Labeled& x, const std::vector<int>& labels,
                        const std::vector<std::int64_t>& sizes) {
  Shape shape = x.t.shape();
  for (std::size_t i = 0; i < x.labels.size(); ++i)
    if (contains(labels, x.labels[i])) shape[i] = sizes[static_cast<std::size_t>(x.labels[i])];
  return shape == x.t.shape() ? x.t : broadcast_to(x.t, shape);
}

/// Takes the diagonal of every repeated label, then sums the labels not in `keep`.
Labeled reduce_operand(Labeled x, const std::vector<int>& keep,
                       const std::vector<std::int64_t>& sizes) {
  for (std::size_t p = 0; p < x.labels.size(); ++p) {
    for (std::size_t q = p + 1; q < x.labels.size();) {
      if (x.labels[q] != x.labels[p]) {
        ++q;
        continue;
      }
      const int label = x.labels[p];
      x.t = broadcast_labels(x, {label}, sizes);
      const std::int64_t n = sizes[static_cast<std::size_t>(label)];
      detail::require_static_dim(n, op_name, "a repeated label's dim");
      Shape row_shape(std::vector<std::int64_t>(x.labels.size(), 1)), col_shape = row_shape;
      row_shape[p] = n;
      col_shape[q] = n;
      const Tensor index = arange(n, i64);
      const Tensor diagonal = equal(reshape(index, row_shape), reshape(index, col_shape));
      x.t =
          sum(where(diagonal, x.t, detail::scalar_like(0.0, x.t)), {static_cast<std::int64_t>(q)});
      x.labels.erase(x.labels.begin() + static_cast<std::ptrdiff_t>(q));
    }
  }
  std::vector<std::int64_t> summed;
  std::vector<int> kept;
  for (std::size_t i = 0; i < x.labels.size(); ++i) {
    if (contains(keep, x.labels[i]))
      kept.push_back(x.labels[i]);
    else
      summed.push_back(static_cast<std::int64_t>(i));
  }
  if (summed.empty()) return x;
  return {sum(x.t, summed), kept};
}

/// The product of the dims of x at `axes` (one merged dim of a reshape).
std::int64_t merged_dim(const Tensor& x, const std::vector<std::int64_t>& axes) {
  if (axes.size() == 1) return x.dim(axes.front());
  std::int64_t product = 1;
  for (auto axis : axes) {
    detail::require_static_dim(x.dim(axis), op_name, "a dim merged into a matmul dim");
    product *= x.dim(axis);
  }
  return product;
}

/// a and b (each with distinct labels) contracted over their shared labels not in `keep`.
Labeled contract(const Labeled& a, const Labeled& b, const std::vector<int>& keep,
                 const std::vector<std::int64_t>& sizes) {
  std::vector<int> batch, contracted, free_a, free_b;
  for (int label : a.labels) {
    if (!contains(b.labels, label))
      free_a.push_back(label);
    else if (contains(keep, label))
      batch.push_back(label);
    else
      contracted.push_back(label);
  }
  for (int label : b.labels)
    if (!contains(a.labels, label)) free_b.push_back(label);

  const auto concat_labels = [](std::initializer_list<const std::vector<int>*> parts) {
    std::vector<int> all;
    for (const auto* part : parts) all.insert(all.end(), part->begin(), part->end());
    return all;
  };
  Labeled pa = permuted(a, concat_labels({&batch, &free_a, &contracted}));
  Labeled pb = permuted(b, concat_labels({&batch, &contracted, &free_b}));
  pa.t = broadcast_labels(pa, contracted, sizes);
  pb.t = broadcast_labels(pb, contracted, sizes);

  const auto range = [](std::size_t from, std::size_t count) {
    std::vector<std::int64_t> axes;
    for (std::size_t i = 0; i < count; ++i) axes.push_back(static_cast<std::int64_t>(from + i));
    return axes;
  };
  const std::size_t nb = batch.size();
  Shape a_shape, b_shape;
  for (std::size_t i = 0; i < nb; ++i) {
    a_shape.push_back(pa.t.shape()[i]);
    b_shape.push_back(pb.t.shape()[i]);
  }
  const std::int64_t m = free_a.empty() ? 1 : merged_dim(pa.t, range(nb, free_a.size()));
  const std::int64_t k =
      contracted.empty() ? 1 : merged_dim(pa.t, range(nb + free_a.size(), contracted.size()));
  const std::int64_t n =
      free_b.empty() ? 1 : merged_dim(pb.t, range(nb + contracted.size(), free_b.size()));
  a_shape.push_back(m);
  a_shape.push_back(k);
  b_shape.push_back(k);
  b_shape.push_back(n);
  const Tensor a3 = pa.t.shape() == a_shape ? pa.t : reshape(pa.t, a_shape);
  const Tensor b3 = pb.t.shape() == b_shape ? pb.t : reshape(pb.t, b_shape);
  const Tensor product = matmul(a3, b3);

  Shape out_shape;
  for (std::size_t i = 0; i < nb; ++i) out_shape.push_back(product.shape()[i]);
  for (std::size_t i = 0; i < free_a.size(); ++i) out_shape.push_back(pa.t.shape()[nb + i]);
  for (std::size_t i = 0; i < free_b.size(); ++i)
    out_shape.push_back(pb.t.shape()[nb + contracted.size() + i]);
  const Tensor out = product.shape() == out_shape ? product : reshape(product, out_shape);
  return {out, concat_labels({&batch, &free_a, &free_b})};
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  for (std::size_t i = 0; i < operands.size(); ++i)
    detail::check_defined(operands[i], op_name, static_cast<int>(i));
  if (operands.empty()) fail(op_name, "needs at least one operand");
  const DType dtype = operands.front().dtype();
  for (std::size_t i = 1; i < operands.size(); ++i)
    if (operands[i].dtype() != dtype)
      fail(op_name, "dtypes differ: {} (operand 0) vs {} (operand {}; use kiln::cast)", dtype,
           operands[i].dtype(), i);
  if (!is_floating(dtype) && !is_integer(dtype))
    fail(op_name, "dtype {} is not supported (floating or integer only; use kiln::cast)", dtype);

  // Terms.
  const std::size_t arrow = equation.find("->");
  const std::size_t inputs_end = arrow == std::string_view::npos ? equation.size() : arrow;
  std::vector<std::vector<int>> terms;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = std::min(equation.find(',', begin), inputs_end);
    terms.push_back(parse_term(equation, begin, comma));
    if (comma >= inputs_end) break;
    begin = comma + 1;
  }
  std::optional<std::vector<int>> output_term;
  if (arrow != std::string_view::npos) {
    if (equation.find(',', arrow) != std::string_view::npos)
      fail(op_name, "the output of \"{}\" has a ',' (one output only)", equation);
    output_term = parse_term(equation, arrow + 2, equation.size());
  }
  if (terms.size() != operands.size())
    fail(op_name, "equation \"{}\" has {} operand term{} but {} operand{} given", equation,
         terms.size(), terms.size() == 1 ? "" : "s", operands.size(),
         operands.size() == 1 ? " was" : "s were");

  // Labels per axis; "..." expands to the right-aligned broadcast dims.
  std::size_t ellipsis_dims = 0;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const auto named =
        static_cast<std::int64_t>(terms[i].size() - (contains(terms[i], ellipsis_marker) ? 1 : 0));
    const std::int64_t rank = operands[i].ndim();
    if (contains(terms[i], ellipsis_marker)) {
      if (rank < named)
        fail(op_name, "operand {} of shape {} has rank {}, but its term names at least {} axes", i,
             operands[i].shape(), rank, named);
      ellipsis_dims = std::max(ellipsis_dims, static_cast<std::size_t>(rank - named));
    } else if (rank != named) {
      fail(op_name, "operand {} of shape {} has rank {}, but its term names {} axes", i,
           operands[i].shape(), rank, named);
    }
  }
  std::vector<Labeled> inputs;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    Labeled x{operands[i], {}};
    const std::size_t own = static_cast<std::size_t>(operands[i].ndim()) - (terms[i].size() - 1);
    for (int label : terms[i]) {
      if (label != ellipsis_marker) {
        x.labels.push_back(label);
        continue;
      }
      for (std::size_t e = ellipsis_dims - own; e < ellipsis_dims; ++e)
        x.labels.push_back(first_ellipsis_label + static_cast<int>(e));
    }
    inputs.push_back(std::move(x));
  }

  // Label sizes: equal, or 1 (which broadcasts).
  std::vector<std::int64_t> sizes(first_ellipsis_label + ellipsis_dims, -1);
  std::vector<std::size_t> size_from(sizes.size(), 0);
  std::vector<int> counts(sizes.size(), 0);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::size_t axis = 0; axis < inputs[i].labels.size(); ++axis) {
      const auto label = static_cast<std::size_t>(inputs[i].labels[axis]);
      const std::int64_t d = inputs[i].t.shape()[axis];
      ++counts[label];
      if (sizes[label] == -1 || (sizes[label] == 1 && d != 1)) {
        sizes[label] = d;
        size_from[label] = i;
      } else if (d != 1 && d != sizes[label]) {
        fail(op_name, "label {} has size {} in operand {} but size {} in operand {}",
             label_name(static_cast<int>(label)), detail::dim_text(sizes[label]), size_from[label],
             detail::dim_text(d), i);
      }
    }
  }

  // The output's labels.
  std::vector<int> output;
  if (output_term) {
    bool has_ellipsis = false;
    for (int label : *output_term) {
      if (label == ellipsis_marker) {
        has_ellipsis = true;
        for (std::size_t e = 0; e < ellipsis_dims; ++e)
          output.push_back(first_ellipsis_label + static_cast<int>(e));
        continue;
      }
      if (contains(output, label))
        fail(op_name, "output label {} appears more than once in \"{}\"", label_name(label),
             equation);
      if (counts[static_cast<std::size_t>(label)] == 0)
        fail(op_name, "output label {} of \"{}\" is in no operand", label_name(label), equation);
      output.push_back(label);
    }
    if (!has_ellipsis && ellipsis_dims > 0)
      fail(op_name,
           "the operands' '...' stands for {} dim{}, but the output of \"{}\" has no '...'",
           ellipsis_dims, ellipsis_dims == 1 ? "" : "s", equation);
  } else {
    for (std::size_t e = 0; e < ellipsis_dims; ++e)
      output.push_back(first_ellipsis_label + static_cast<int>(e));
    for (int label = 0; label < first_ellipsis_label; ++label)
      if (counts[static_cast<std::size_t>(label)] == 1) output.push_back(label);
  }
  if (output.size() > Shape::max_rank)
    fail(op_name, "the output has {} dims, more than the maximum rank {}", output.size(),
         Shape::max_rank);

  // Reduce each operand's private labels, then contract left to right. `needed(first)` holds
  // the labels still needed after the operands before `first` are consumed.
  const auto needed = [&](std::size_t first) {
    std::vector<int> keep = output;
    for (std::size_t j = first; j < inputs.size(); ++j)
      keep.insert(keep.end(), inputs[j].labels.begin(), inputs[j].labels.end());
    return keep;
  };
  Labeled result = reduce_operand(inputs[0], needed(1), sizes);
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    std::vector<int> others = needed(i + 1);
    others.insert(others.end(), result.labels.begin(), result.labels.end());
    const Labeled next = reduce_operand(inputs[i], others, sizes);
    result = contract(result, next, needed(i + 1), sizes);
  }
  return permuted(result, output).t;
}

}  // namespace kiln

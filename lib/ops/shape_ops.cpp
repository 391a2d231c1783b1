// Front ends of the shape and data-movement ops.
//
// Attrs contracts of the movement primitives (read by try_view in ops/dispatch.cpp and by
// run_movement in kernels/movement.cpp):
//   reshape      : no attrs; the output shape has the input's element count.
//   transpose    : axes = permutation; output axis i is input axis axes[i].
//   broadcast_to : no attrs; the output shape is the target (NumPy rules, so the input's
//                  rank is at most the output's).
//   slice        : ints = {start0, step0, start1, step1, ...} for every input axis. start is
//                  the index of the first element taken, step != 0 (negative walks
//                  backwards), and the output shape holds the count per axis. Front ends
//                  store start 0 on every axis of an empty result and step 1 on axes with
//                  at most one element, so a view never points outside its buffer.
//   concat       : axis (normalized); variadic inputs of one dtype and rank whose dims agree
//                  except along axis.
//   pad          : ints = {before0, after0, before1, after1, ...} for every axis, all >= 0;
//                  value = the fill, converted to the dtype the way cast() converts.
//   gather       : inputs {x, indices (i32 or i64)}; axis (normalized). The kernel checks
//                  every index when it runs (negative ones count from the end).
//
// slice() bounds: with step > 0 a resolved start/stop must lie in [0, size]; with step < 0
// in [-1, size - 1] (-1 meaning "before the first element", reached by Slice::none or by
// -(size + 1)). Outside that range is an error; values are never clamped.

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>

#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"

namespace kiln {

namespace {

using detail::apply;
using detail::check_defined;
using detail::fail;
using detail::normalize_axis;
using detail::Prim;
using detail::require_static_dim;
using detail::require_static_shape;

std::string format_ints(const std::vector<std::int64_t>& values) {
  return fmt::format("[{}]", fmt::join(values, ","));
}

void check_result_rank(std::size_t rank, std::string_view op) {
  if (rank > Shape::max_rank)
    fail(op, "result rank {} exceeds the maximum rank {}", rank, Shape::max_rank);
}

/// a * b, or an error naming `shape` when it overflows.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const Shape& shape, std::string_view op) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) fail(op, "shape {} has too many elements", shape);
  return product;
}

/// Element count of a shape of non-negative dims. The product of its nonzero dims must fit
/// in int64 too, so that Shape::numel() never overflows on a shape an op made.
/// Dynamic dims are skipped (their sizes are checked when the function runs).
std::int64_t checked_numel(const Shape& shape, std::string_view op) {
  std::int64_t nonzero_product = 1;
  bool has_zero = false;
  for (auto d : shape) {
    if (is_dynamic_dim(d)) continue;
    if (d == 0)
      has_zero = true;
    else
      nonzero_product = checked_mul(nonzero_product, d, shape, op);
  }
  return has_zero ? 0 : nonzero_product;
}

/// Checks that a new buffer of `shape` and dtype has a byte size that fits in int64.
void check_allocatable(const Shape& shape, DType dtype, std::string_view op) {
  const std::int64_t numel = checked_numel(shape, op);
  const auto element_size = static_cast<std::int64_t>(dtype_size(dtype));
  if (numel > std::numeric_limits<std::int64_t>::max() / element_size)
    fail(op, "result {} of {} is too large to allocate", shape, dtype);
}

void check_dims_non_negative(const Shape& shape, std::string_view op) {
  detail::check_dims(shape, op);
}

/// Axis in [-(rank + 1), rank] (a position for a new axis) → [0, rank].
std::size_t normalize_new_axis(std::int64_t axis, std::int64_t rank, std::string_view op) {
  if (axis < -(rank + 1) || axis > rank)
    fail(op, "axis {} out of range [{}, {}] for a new axis at rank {}", axis, -(rank + 1), rank,
         rank);
  return static_cast<std::size_t>(axis < 0 ? axis + rank + 1 : axis);
}

Tensor reshape_to(const Tensor& x, const Shape& shape) {
  return apply(Prim::reshape, {x}, detail::no_attrs(), x.dtype(), shape);
}

Tensor broadcast_view(const Tensor& x, const Shape& shape) {
  return apply(Prim::broadcast_to, {x}, detail::no_attrs(), x.dtype(), shape);
}

/// The elements one axis of a slice takes: count of them, from `start`, `step` apart.
struct AxisRange {
  std::int64_t start = 0;
  std::int64_t step = 1;
  std::int64_t count = 0;
};

std::vector<AxisRange> whole_axes(const Shape& shape) {
  std::vector<AxisRange> ranges;
  for (auto d : shape) ranges.push_back({0, 1, d});
  return ranges;
}

/// The AxisRange of `s` on an axis of `size` elements (see the bounds rule at the top).
AxisRange resolve_slice(const Slice& s, std::int64_t axis, std::int64_t size, std::string_view op) {
  if (s.step == 0) fail(op, "step is 0 for axis {}", axis);
  if (is_dynamic_dim(size)) {
    // A dynamic axis can only be taken whole (its bounds are unknown while tracing).
    if (s.step == 1 && (s.start == Slice::none || s.start == 0) && s.stop == Slice::none)
      return {0, 1, size};
    fail(op,
         "axis {} is a dynamic dim ({}); only the whole axis can be sliced while tracing (give "
         "it a static size in the input_signature)",
         axis, detail::dim_text(size));
  }
  const bool forward = s.step > 0;
  const auto resolve = [&](std::int64_t value, std::int64_t if_none, std::string_view what) {
    if (value == Slice::none) return if_none;
    const std::int64_t resolved = value < 0 ? value + size : value;
    const std::int64_t low = forward ? 0 : -1, high = forward ? size : size - 1;
    if (resolved < low || resolved > high)
      fail(op, "{} {} out of range for axis {} of size {} (step {})", what, value, axis, size,
           s.step);
    return resolved;
  };
  const std::int64_t start = resolve(s.start, forward ? 0 : size - 1, "start");
  const std::int64_t stop = resolve(s.stop, forward ? size : -1, "stop");
  const std::int64_t distance = forward ? stop - start : start - stop;
  std::int64_t count = 0;
  if (distance > 0) count = forward ? 1 + (distance - 1) / s.step : 1 - (distance - 1) / s.step;
  return {start, s.step, count};
}

Tensor slice_view(const Tensor& x, const std::vector<AxisRange>& ranges) {
  Shape out_shape;
  for (const auto& r : ranges) out_shape.push_back(r.count);
  bool empty = false;
  for (auto d : out_shape) empty = empty || d == 0;
  detail::Attrs attrs;
  for (const auto& r : ranges) {
    attrs.ints.push_back(empty ? 0 : r.start);
    attrs.ints.push_back(r.count <= 1 ? 1 : r.step);
  }
  return apply(Prim::slice, {x}, attrs, x.dtype(), out_shape);
}

/// Consecutive pieces of `x` along `axis` with the given (valid) sizes.
std::vector<Tensor> split_pieces(const Tensor& x, std::size_t axis,
                                 const std::vector<std::int64_t>& sizes) {
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  std::vector<AxisRange> ranges = whole_axes(x.shape());
  std::int64_t start = 0;
  for (auto size : sizes) {
    ranges[axis] = {start, 1, size};
    pieces.push_back(slice_view(x, ranges));
    start += size;
  }
  return pieces;
}

/// One broadcast pass of tile() over `axes` (ascending, at most three so the grouped rank
/// stays within Shape::max_rank): x is grouped as [lead, 1, block1, 1, block2, ...],
/// broadcast to [lead, rep1, block1, rep2, block2, ...] and flattened into the result.
Tensor tile_axes(const Tensor& x, const std::vector<std::size_t>& axes,
                 const std::vector<std::int64_t>& reps) {
  const Shape& shape = x.shape();
  Shape grouped, expanded, result = shape;
  std::int64_t lead = 1;
  for (std::size_t d = 0; d < axes.front(); ++d) lead *= shape[d];
  grouped.push_back(lead);
  expanded.push_back(lead);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::size_t end = k + 1 < axes.size() ? axes[k + 1] : shape.size();
    std::int64_t block = 1;
    for (std::size_t d = axes[k]; d < end; ++d) block *= shape[d];
    grouped.push_back(1);
    grouped.push_back(block);
    expanded.push_back(reps[axes[k]]);
    expanded.push_back(block);
    result[axes[k]] *= reps[axes[k]];
  }
  return reshape_to(broadcast_view(reshape_to(x, grouped), expanded), result);
}

/// reshape while tracing with dynamic dims: the target must keep the input's dynamic dims
/// (in any positions, e.g. taken from x.shape()) and its static dims must multiply to the same
/// count; a -1 stands for the one leftover dynamic dim, or for the leftover static count.
Shape reshape_dynamic(const Tensor& x, const Shape& shape, std::optional<std::size_t> inferred) {
  const auto mismatch = [&] {
    fail("reshape",
         "cannot reshape {} into {}: with dynamic dims the target must keep each dynamic dim as "
         "a whole dim and the static dims must have the same product",
         x.shape(), shape);
  };
  detail::check_dims(x.shape(), "reshape");
  Shape target = shape;
  if (inferred) target[*inferred] = 1;
  detail::check_dims(target, "reshape");
  std::vector<std::int64_t> left;  // dynamic dims of x not (yet) found in the target
  for (auto d : x.shape())
    if (is_dynamic_dim(d)) left.push_back(d);
  for (auto d : target) {
    if (!is_dynamic_dim(d)) continue;
    auto it = std::find(left.begin(), left.end(), d);
    if (it == left.end()) mismatch();
    left.erase(it);
  }
  const std::int64_t have = checked_numel(x.shape(), "reshape");
  const std::int64_t known = checked_numel(target, "reshape");
  if (inferred) {
    if (left.size() == 1 && have == known) {
      target[*inferred] = left.front();
      return target;
    }
    if (!left.empty() || known == 0 || have % known != 0) mismatch();
    target[*inferred] = have / known;
    return target;
  }
  if (!left.empty() || have != known) mismatch();
  return target;
}

/// One side of a padded axis of size `size` in a non-constant mode: `width` elements taken
/// from x (validated by the caller).
Tensor pad_piece(const Tensor& x, std::size_t axis, std::int64_t width, bool before, PadMode mode) {
  const auto a = static_cast<std::int64_t>(axis);
  const std::int64_t size = x.shape()[axis];
  switch (mode) {
    case PadMode::reflect: {
      // before: x[width], ..., x[1]; after: x[size - 2], ..., x[size - 1 - width].
      if (before) return slice(x, a, width, 0, -1);
      const std::int64_t stop = size - 2 - width;
      return slice(x, a, size - 2, stop < 0 ? Slice::none : stop, -1);
    }
    case PadMode::edge: {
      Shape shape = x.shape();
      shape[axis] = width;
      const Tensor edge = before ? slice(x, a, 0, 1) : slice(x, a, size - 1, size);
      return broadcast_to(edge, shape);
    }
    case PadMode::wrap:
      return before ? slice(x, a, size - width, size) : slice(x, a, 0, width);
    case PadMode::constant:
      break;
  }
  fail("pad", "internal: no piece for constant mode");
}

std::string_view pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::reflect:
      return "reflect";
    case PadMode::edge:
      return "edge";
    case PadMode::wrap:
      return "wrap";
    case PadMode::constant:
      break;
  }
  return "constant";
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape");
  std::optional<std::size_t> inferred;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred) fail("reshape", "more than one -1 in shape {}", shape);
      inferred = i;
    } else if (shape[i] < 0 && !is_dynamic_dim(shape[i])) {
      fail("reshape", "negative dimension {} in shape {}", shape[i], shape);
    }
  }
  if (x.shape().has_dynamic_dims() || shape.has_dynamic_dims())
    return reshape_to(x, reshape_dynamic(x, shape, inferred));
  const std::int64_t numel = x.size();
  const auto mismatch = [&] {
    fail("reshape", "cannot reshape {} ({} elements) into {}", x.shape(), numel, shape);
  };
  Shape target = shape;
  if (inferred) {
    target[*inferred] = 1;
    const std::int64_t known = checked_numel(target, "reshape");
    if (known == 0 || numel % known != 0) mismatch();
    target[*inferred] = numel / known;
  } else if (checked_numel(target, "reshape") != numel) {
    mismatch();
  }
  return reshape_to(x, target);
}

Tensor transpose(const Tensor& x) {
  check_defined(x, "transpose");
  std::vector<std::int64_t> reversed(static_cast<std::size_t>(x.ndim()));
  for (std::size_t i = 0; i < reversed.size(); ++i)
    reversed[i] = x.ndim() - 1 - static_cast<std::int64_t>(i);
  return transpose(x, reversed);
}

Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& perm) {
  check_defined(x, "transpose");
  const std::int64_t rank = x.ndim();
  if (static_cast<std::int64_t>(perm.size()) != rank)
    fail("transpose", "permutation {} has {} entries, but {} has rank {}", format_ints(perm),
         perm.size(), x.shape(), rank);
  std::array<bool, Shape::max_rank> seen{};
  detail::Attrs attrs;
  Shape out_shape;
  for (auto axis : perm) {
    const auto a = static_cast<std::size_t>(normalize_axis(axis, rank, "transpose"));
    if (seen[a]) fail("transpose", "axis {} appears twice in permutation {}", a, format_ints(perm));
    seen[a] = true;
    attrs.axes.push_back(static_cast<std::int64_t>(a));
    out_shape.push_back(x.shape()[a]);
  }
  return apply(Prim::transpose, {x}, attrs, x.dtype(), out_shape);
}

Tensor expand_dims(const Tensor& x, std::int64_t axis) {
  check_defined(x, "expand_dims");
  const std::size_t a = normalize_new_axis(axis, x.ndim(), "expand_dims");
  check_result_rank(x.shape().size() + 1, "expand_dims");
  Shape out_shape = x.shape();
  out_shape.insert(a, 1);
  return reshape_to(x, out_shape);
}

Tensor squeeze(const Tensor& x) {
  check_defined(x, "squeeze");
  Shape out_shape;
  for (auto d : x.shape())
    if (d != 1) out_shape.push_back(d);
  return reshape_to(x, out_shape);
}

Tensor squeeze(const Tensor& x, const std::vector<std::int64_t>& axes) {
  check_defined(x, "squeeze");
  std::array<bool, Shape::max_rank> remove{};
  for (auto axis : axes) {
    const auto a = static_cast<std::size_t>(normalize_axis(axis, x.ndim(), "squeeze"));
    if (remove[a]) fail("squeeze", "axis {} listed twice in {}", a, format_ints(axes));
    if (x.shape()[a] != 1)
      fail("squeeze", "cannot squeeze axis {} of size {} in shape {}", a, x.shape()[a], x.shape());
    remove[a] = true;
  }
  Shape out_shape;
  for (std::size_t d = 0; d < x.shape().size(); ++d)
    if (!remove[d]) out_shape.push_back(x.shape()[d]);
  return reshape_to(x, out_shape);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  check_defined(x, "broadcast_to");
  check_dims_non_negative(shape, "broadcast_to");
  const Shape& from = x.shape();
  if (shape.size() < from.size())
    fail("broadcast_to", "cannot broadcast {} to {}: the target has lower rank", from, shape);
  const std::size_t lead = shape.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != shape[lead + i] && from[i] != 1)
      fail("broadcast_to", "cannot broadcast {} to {}: axis {} has size {}, not 1 or {}{}", from,
           shape, i, detail::dim_text(from[i]), detail::dim_text(shape[lead + i]),
           is_dynamic_dim(from[i]) || is_dynamic_dim(shape[lead + i])
               ? " (a dynamic dim matches only itself or 1)"
               : "");
  checked_numel(shape, "broadcast_to");
  return broadcast_view(x, shape);
}

Tensor concat(const std::vector<Tensor>& xs, std::int64_t axis) {
  if (xs.empty()) fail("concat", "needs at least one tensor");
  for (std::size_t i = 0; i < xs.size(); ++i) check_defined(xs[i], "concat", static_cast<int>(i));
  const Tensor& first = xs.front();
  if (first.ndim() == 0) fail("concat", "cannot join rank-0 tensors (use stack)");
  const auto a = static_cast<std::size_t>(normalize_axis(axis, first.ndim(), "concat"));
  if (xs.size() > 1) require_static_dim(first.shape()[a], "concat", "the joined axis");
  Shape out_shape = first.shape();
  for (std::size_t i = 1; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.dtype() != first.dtype())
      fail("concat", "dtypes differ: {} (tensor 0) vs {} (tensor {}; use kiln::cast)",
           first.dtype(), x.dtype(), i);
    bool compatible = x.ndim() == first.ndim();
    for (std::size_t d = 0; compatible && d < out_shape.size(); ++d)
      compatible = d == a || x.shape()[d] == first.shape()[d];
    if (!compatible)
      fail("concat", "shapes {} (tensor 0) and {} (tensor {}) differ outside axis {}",
           first.shape(), x.shape(), i, a);
    require_static_dim(x.shape()[a], "concat", "the joined axis");
    if (__builtin_add_overflow(out_shape[a], x.shape()[a], &out_shape[a]))
      fail("concat", "result has too many elements along axis {}", a);
  }
  check_allocatable(out_shape, first.dtype(), "concat");
  detail::Attrs attrs;
  attrs.axis = static_cast<std::int64_t>(a);
  return apply(Prim::concat, std::span<const Tensor>(xs), attrs, first.dtype(), out_shape);
}

Tensor stack(const std::vector<Tensor>& xs, std::int64_t axis) {
  if (xs.empty()) fail("stack", "needs at least one tensor");
  for (std::size_t i = 0; i < xs.size(); ++i) check_defined(xs[i], "stack", static_cast<int>(i));
  const Tensor& first = xs.front();
  for (std::size_t i = 1; i < xs.size(); ++i) {
    if (xs[i].dtype() != first.dtype())
      fail("stack", "dtypes differ: {} (tensor 0) vs {} (tensor {}; use kiln::cast)", first.dtype(),
           xs[i].dtype(), i);
    if (xs[i].shape() != first.shape())
      fail("stack", "shapes differ: {} (tensor 0) vs {} (tensor {})", first.shape(), xs[i].shape(),
           i);
  }
  const std::size_t a = normalize_new_axis(axis, first.ndim(), "stack");
  check_result_rank(first.shape().size() + 1, "stack");
  Shape piece_shape = first.shape();
  piece_shape.insert(a, 1);
  std::vector<Tensor> pieces;
  pieces.reserve(xs.size());
  for (const Tensor& x : xs) pieces.push_back(reshape_to(x, piece_shape));
  Shape out_shape = piece_shape;
  out_shape[a] = static_cast<std::int64_t>(xs.size());
  check_allocatable(out_shape, first.dtype(), "stack");
  detail::Attrs attrs;
  attrs.axis = static_cast<std::int64_t>(a);
  return apply(Prim::concat, std::span<const Tensor>(pieces), attrs, first.dtype(), out_shape);
}

std::vector<Tensor> unstack(const Tensor& x, std::int64_t axis) {
  check_defined(x, "unstack");
  const auto a = static_cast<std::size_t>(normalize_axis(axis, x.ndim(), "unstack"));
  require_static_dim(x.shape()[a], "unstack", "the unstacked axis");
  Shape piece_shape = x.shape();
  piece_shape.erase(a);
  std::vector<Tensor> pieces;
  for (Tensor& piece :
       split_pieces(x, a, std::vector<std::int64_t>(static_cast<std::size_t>(x.shape()[a]), 1)))
    pieces.push_back(reshape_to(piece, piece_shape));
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, std::int64_t sections, std::int64_t axis) {
  check_defined(x, "split");
  const auto a = static_cast<std::size_t>(normalize_axis(axis, x.ndim(), "split"));
  require_static_dim(x.shape()[a], "split", "the split axis");
  const std::int64_t size = x.shape()[a];
  if (sections <= 0) fail("split", "sections must be positive, got {}", sections);
  if (size % sections != 0)
    fail("split", "axis {} of size {} cannot be split into {} equal sections", a, size, sections);
  return split_pieces(
      x, a, std::vector<std::int64_t>(static_cast<std::size_t>(sections), size / sections));
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes,
                          std::int64_t axis) {
  check_defined(x, "split");
  const auto a = static_cast<std::size_t>(normalize_axis(axis, x.ndim(), "split"));
  require_static_dim(x.shape()[a], "split", "the split axis");
  std::int64_t total = 0;
  for (auto size : sizes) {
    if (size < 0) fail("split", "negative size {} in sizes {}", size, format_ints(sizes));
    if (__builtin_add_overflow(total, size, &total))
      fail("split", "sizes {} add up to more than an axis can hold", format_ints(sizes));
  }
  if (total != x.shape()[a])
    fail("split", "sizes {} add up to {}, but axis {} of {} has size {}", format_ints(sizes), total,
         a, x.shape(), x.shape()[a]);
  return split_pieces(x, a, sizes);
}

Tensor slice(const Tensor& x, const std::vector<Slice>& slices) {
  check_defined(x, "slice");
  if (slices.size() > x.shape().size())
    fail("slice", "{} slices for shape {} of rank {}", slices.size(), x.shape(), x.ndim());
  std::vector<AxisRange> ranges = whole_axes(x.shape());
  for (std::size_t d = 0; d < slices.size(); ++d)
    ranges[d] = resolve_slice(slices[d], static_cast<std::int64_t>(d), x.shape()[d], "slice");
  return slice_view(x, ranges);
}

Tensor slice(const Tensor& x, std::int64_t axis, std::int64_t start, std::int64_t stop,
             std::int64_t step) {
  check_defined(x, "slice");
  const auto a = static_cast<std::size_t>(normalize_axis(axis, x.ndim(), "slice"));
  std::vector<AxisRange> ranges = whole_axes(x.shape());
  ranges[a] =
      resolve_slice(Slice{start, stop, step}, static_cast<std::int64_t>(a), x.shape()[a], "slice");
  return slice_view(x, ranges);
}

Tensor gather(const Tensor& x, const Tensor& indices, std::int64_t axis) {
  check_defined(x, "gather", 0);
  check_defined(indices, "gather", 1);
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64)
    fail("gather", "indices must be i32 or i64, got {}", indices.dtype());
  const auto a = static_cast<std::size_t>(normalize_axis(axis, x.ndim(), "gather"));
  check_result_rank(x.shape().size() - 1 + indices.shape().size(), "gather");
  Shape out_shape;
  for (std::size_t d = 0; d < a; ++d) out_shape.push_back(x.shape()[d]);
  for (auto d : indices.shape()) out_shape.push_back(d);
  for (std::size_t d = a + 1; d < x.shape().size(); ++d) out_shape.push_back(x.shape()[d]);
  check_allocatable(out_shape, x.dtype(), "gather");
  detail::Attrs attrs;
  attrs.axis = static_cast<std::int64_t>(a);
  return apply(Prim::gather, {x, indices}, attrs, x.dtype(), out_shape);
}

Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype) {
  check_defined(indices, "one_hot");
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64)
    fail("one_hot", "indices must be i32 or i64, got {}", indices.dtype());
  if (depth < 0) fail("one_hot", "depth {} is negative", depth);
  check_result_rank(indices.shape().size() + 1, "one_hot");
  Shape out_shape = indices.shape();
  out_shape.push_back(depth);
  check_allocatable(out_shape, dtype, "one_hot");
  return cast(equal(expand_dims(indices, -1), arange(depth, indices.dtype())), dtype);
}

Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths,
           double value) {
  check_defined(x, "pad");
  if (static_cast<std::int64_t>(widths.size()) != x.ndim())
    fail("pad", "{} widths given for shape {} of rank {}", widths.size(), x.shape(), x.ndim());
  Shape out_shape = x.shape();
  detail::Attrs attrs;
  for (std::size_t d = 0; d < widths.size(); ++d) {
    const auto [before, after] = widths[d];
    if (before < 0 || after < 0)
      fail("pad", "negative width ({}, {}) for axis {}", before, after, d);
    if (before != 0 || after != 0) require_static_dim(out_shape[d], "pad", "a padded axis");
    if (__builtin_add_overflow(out_shape[d], before, &out_shape[d]) ||
        __builtin_add_overflow(out_shape[d], after, &out_shape[d]))
      fail("pad", "widths ({}, {}) make axis {} too large", before, after, d);
    attrs.ints.push_back(before);
    attrs.ints.push_back(after);
  }
  check_allocatable(out_shape, x.dtype(), "pad");
  attrs.value = value;
  return apply(Prim::pad, {x}, attrs, x.dtype(), out_shape);
}

Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths,
           PadMode mode, double value) {
  if (mode == PadMode::constant) return pad(x, widths, value);
  check_defined(x, "pad");
  if (static_cast<std::int64_t>(widths.size()) != x.ndim())
    fail("pad", "{} widths given for shape {} of rank {}", widths.size(), x.shape(), x.ndim());
  const std::string_view name = pad_mode_name(mode);
  for (std::size_t d = 0; d < widths.size(); ++d) {
    const auto [before, after] = widths[d];
    if (before < 0 || after < 0)
      fail("pad", "negative width ({}, {}) for axis {}", before, after, d);
    if (before == 0 && after == 0) continue;
    require_static_dim(x.shape()[d], "pad", "a padded axis");
    const std::int64_t size = x.shape()[d], widest = std::max(before, after);
    if (mode == PadMode::reflect && widest > size - 1)
      fail("pad", "{} mode needs widths at most size - 1 = {} on axis {} of size {}, got ({}, {})",
           name, size - 1, d, size, before, after);
    if (mode == PadMode::wrap && widest > size)
      fail("pad", "{} mode needs widths at most the size {} of axis {}, got ({}, {})", name, size,
           d, before, after);
    if (mode == PadMode::edge && size == 0)
      fail("pad", "{} mode cannot pad the empty axis {} (widths ({}, {}))", name, d, before, after);
  }
  Tensor result = x;
  for (std::size_t d = 0; d < widths.size(); ++d) {
    const auto [before, after] = widths[d];
    if (before == 0 && after == 0) continue;
    std::vector<Tensor> pieces;
    if (before > 0) pieces.push_back(pad_piece(result, d, before, true, mode));
    pieces.push_back(result);
    if (after > 0) pieces.push_back(pad_piece(result, d, after, false, mode));
    result = concat(pieces, static_cast<std::int64_t>(d));
  }
  return result;
}

Tensor tile(const Tensor& x, const std::vector<std::int64_t>& reps) {
  check_defined(x, "tile");
  if (static_cast<std::int64_t>(reps.size()) != x.ndim())
    fail("tile", "{} reps given for shape {} of rank {}", reps.size(), x.shape(), x.ndim());
  Shape out_shape = x.shape();
  std::vector<std::size_t> tiled;
  for (std::size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] < 0) fail("tile", "negative repetition {} for axis {}", reps[d], d);
    if (reps[d] != 1) tiled.push_back(d);
    if (reps[d] != 1) require_static_shape(x.shape(), "tile", "the tiled shape");
    if (__builtin_mul_overflow(out_shape[d], reps[d], &out_shape[d]))
      fail("tile", "repeating {} by {} makes axis {} too large", x.shape(), format_ints(reps), d);
  }
  check_allocatable(out_shape, x.dtype(), "tile");
  if (tiled.empty()) return x;
  if (x.size() == 0) return reshape_to(x, out_shape);
  constexpr std::size_t axes_per_pass = 3;
  Tensor result = x;
  for (std::size_t begin = 0; begin < tiled.size(); begin += axes_per_pass) {
    const std::size_t end = std::min(tiled.size(), begin + axes_per_pass);
    result = tile_axes(result, std::vector<std::size_t>(tiled.begin() + begin, tiled.begin() + end),
                       reps);
  }
  return result;
}

}  // namespace kiln

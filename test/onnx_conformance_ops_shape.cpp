// ONNX conformance mapping table, shape family: reshaping, data movement, indexing, scans,
// sorting, reductions and tensor creation (see onnx_conformance.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

using kiln::Shape;

Shape shape_of(const std::vector<std::int64_t>& dims) { return Shape(dims); }

std::vector<std::int64_t> dims_of(const Shape& s) {
  std::vector<std::int64_t> d;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(s.size()); ++i) d.push_back(s[i]);
  return d;
}

/// Axes from the input `index` (opset >= since) or the attribute "axes" (before).
std::vector<std::int64_t> axes_of(const Case& c, std::size_t index, std::int64_t since,
                                  bool* given = nullptr) {
  std::vector<std::int64_t> axes;
  bool has = false;
  if (c.opset >= since) {
    if (c.has(index)) {
      axes = int_values(c.in(index));
      has = true;
    }
  } else if (c.has_attr("axes")) {
    axes = c.ints("axes");
    has = true;
  }
  if (given) *given = has;
  return axes;
}

Outputs reshape(const Case& c) {
  const Tensor& x = c.in(0);
  std::vector<std::int64_t> dims = int_values(c.in(1));
  const bool allow_zero = c.i("allowzero", 0) != 0;
  for (std::size_t k = 0; k < dims.size(); ++k)
    if (dims[k] == 0 && !allow_zero) dims[k] = x.dim(static_cast<std::int64_t>(k));
  return {kiln::reshape(x, shape_of(dims))};
}

Outputs transpose(const Case& c) {
  if (!c.has_attr("perm")) return {kiln::transpose(c.in(0))};
  return {kiln::transpose(c.in(0), c.ints("perm"))};
}

Outputs squeeze(const Case& c) {
  bool given = false;
  const auto axes = axes_of(c, 1, 13, &given);
  if (!given) return {kiln::squeeze(c.in(0))};
  return {kiln::squeeze(c.in(0), axes)};
}

Outputs unsqueeze(const Case& c) {
  Tensor x = c.in(0);
  auto axes = axes_of(c, 1, 13);
  const auto rank = x.ndim() + static_cast<std::int64_t>(axes.size());
  for (auto& a : axes) a = normalize_axis(a, rank);
  std::sort(axes.begin(), axes.end());
  for (const auto a : axes) x = kiln::expand_dims(x, a);
  return {x};
}

Outputs flatten(const Case& c) {
  const Tensor& x = c.in(0);
  const auto axis = normalize_axis(c.i("axis", 1), x.ndim());
  std::int64_t outer = 1;
  for (std::int64_t k = 0; k < axis; ++k) outer *= x.dim(k);
  std::int64_t inner = 1;
  for (std::int64_t k = axis; k < x.ndim(); ++k) inner *= x.dim(k);
  return {kiln::reshape(x, {outer, inner})};
}

Outputs concat(const Case& c) {
  std::vector<Tensor> xs;
  for (std::size_t k = 0; k < c.inputs.size(); ++k) xs.push_back(c.in(k));
  return {kiln::concat(xs, c.i("axis", 0))};
}

Outputs split(const Case& c) {
  const Tensor& x = c.in(0);
  const auto axis = normalize_axis(c.i("axis", 0), x.ndim());
  std::vector<std::int64_t> sizes;
  if (c.opset >= 13 && c.has(1)) {
    sizes = int_values(c.in(1));
  } else if (c.opset < 13 && c.has_attr("split")) {
    sizes = c.ints("split");
  } else {
    const auto n = c.has_attr("num_outputs") ? c.i("num_outputs", 1)
                                             : static_cast<std::int64_t>(c.outputs.size());
    const auto d = x.dim(axis);
    const auto chunk = (d + n - 1) / n;
    for (std::int64_t k = 0; k < n; ++k)
      sizes.push_back(std::max<std::int64_t>(0, std::min(chunk, d - k * chunk)));
  }
  return kiln::split(x, sizes, axis);
}

/// ONNX Slice (opset >= 10: starts, ends, axes, steps as inputs), clamped as ONNX clamps.
Outputs slice(const Case& c) {
  Tensor x = c.in(0);
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (c.opset >= 10) {
    starts = int_values(c.in(1));
    ends = int_values(c.in(2));
    if (c.has(3)) axes = int_values(c.in(3));
    if (c.has(4)) steps = int_values(c.in(4));
  } else {
    starts = c.ints("starts");
    ends = c.ints("ends");
    axes = c.ints("axes");
  }
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const auto axis = normalize_axis(axes[k], x.ndim());
    const auto d = x.dim(axis);
    const auto step = steps[k];
    auto start = starts[k] < 0 ? starts[k] + d : starts[k];
    auto end = ends[k] < 0 ? ends[k] + d : ends[k];
    if (step > 0) {
      start = std::clamp<std::int64_t>(start, 0, d);
      end = std::clamp<std::int64_t>(end, 0, d);
      if (end < start) end = start;
    } else {
      start = std::clamp<std::int64_t>(start, 0, d - 1);
      end = std::clamp<std::int64_t>(end, -1, d - 1);
      if (d == 0 || end > start) {
        x = kiln::slice(x, axis, 0, 0, 1);
        continue;
      }
      if (end == -1) end = kiln::Slice::none;
    }
    x = kiln::slice(x, axis, start, end, step);
  }
  return {x};
}

Outputs expand(const Case& c) {
  const Tensor& x = c.in(0);
  auto target = int_values(c.in(1));
  auto dims = dims_of(x.shape());
  const auto rank = std::max(dims.size(), target.size());
  dims.insert(dims.begin(), rank - dims.size(), 1);
  target.insert(target.begin(), rank - target.size(), 1);
  for (std::size_t k = 0; k < rank; ++k) target[k] = dims[k] == 1 ? target[k] : dims[k];
  return {kiln::broadcast_to(x, shape_of(target))};
}

Outputs tile(const Case& c) { return {kiln::tile(c.in(0), int_values(c.in(1)))}; }

/// ONNX Pad: pads (before.., after..) for every axis or for `axes`; negative pads crop.
Outputs pad(const Case& c) {
  Tensor x = c.in(0);
  const auto rank = x.ndim();
  std::vector<std::int64_t> pads;
  double value = 0.0;
  std::vector<std::int64_t> axes;
  if (c.opset >= 11) {
    pads = int_values(c.in(1));
    if (c.has(2)) value = scalar_value(c.in(2));
    if (c.has(3)) axes = int_values(c.in(3));
  } else {
    pads = c.ints("pads");
    value = c.f("value", 0.0);
  }
  if (axes.empty())
    for (std::int64_t k = 0; k < rank; ++k) axes.push_back(k);
  const auto n = static_cast<std::int64_t>(axes.size());
  if (static_cast<std::int64_t>(pads.size()) != 2 * n) throw NotMapped("Pad: pads size");
  std::vector<std::pair<std::int64_t, std::int64_t>> widths(static_cast<std::size_t>(rank));
  for (std::int64_t k = 0; k < n; ++k) {
    const auto axis = normalize_axis(axes[static_cast<std::size_t>(k)], rank);
    auto before = pads[static_cast<std::size_t>(k)];
    auto after = pads[static_cast<std::size_t>(k + n)];
    if (before < 0 || after < 0) {
      x = kiln::slice(x, axis, std::max<std::int64_t>(0, -before),
                      x.dim(axis) - std::max<std::int64_t>(0, -after));
      before = std::max<std::int64_t>(0, before);
      after = std::max<std::int64_t>(0, after);
    }
    widths[static_cast<std::size_t>(axis)] = {before, after};
  }
  const std::string mode = c.s("mode", "constant");
  kiln::PadMode m = kiln::PadMode::constant;
  if (mode == "reflect")
    m = kiln::PadMode::reflect;
  else if (mode == "edge")
    m = kiln::PadMode::edge;
  else if (mode == "wrap")
    m = kiln::PadMode::wrap;
  else if (mode != "constant")
    throw NotMapped("Pad mode " + mode);
  return {kiln::pad(x, widths, m, value)};
}

Outputs gather(const Case& c) { return {kiln::gather(c.in(0), c.in(1), c.i("axis", 0))}; }

Outputs gather_elements(const Case& c) {
  return {kiln::take_along_axis(c.in(0), c.in(1), c.i("axis", 0))};
}

Outputs gather_nd(const Case& c) {
  return {kiln::gather_nd(c.in(0), c.in(1), c.i("batch_dims", 0))};
}

kiln::ScatterMode scatter_mode(const Case& c) {
  const std::string r = c.s("reduction", "none");
  if (r == "none") return kiln::ScatterMode::assign;
  if (r == "add") return kiln::ScatterMode::add;
  if (r == "mul") return kiln::ScatterMode::multiply;
  if (r == "max") return kiln::ScatterMode::maximum;
  if (r == "min") return kiln::ScatterMode::minimum;
  throw NotMapped("reduction " + r);
}

Outputs scatter_elements(const Case& c) {
  return {kiln::scatter(c.in(0), c.in(1), c.in(2), c.i("axis", 0), scatter_mode(c))};
}

Outputs scatter_nd(const Case& c) {
  return {kiln::scatter_nd(c.in(0), c.in(1), c.in(2), scatter_mode(c))};
}

/// ONNX OneHot: indices (negative ones count from depth), depth, values [off, on], axis.
Outputs one_hot(const Case& c) {
  Tensor indices = c.in(0);
  const auto depth = static_cast<std::int64_t>(scalar_value(c.in(1)));
  const Tensor& values = c.in(2);
  if (kiln::is_floating(indices.dtype())) indices = kiln::cast(indices, kiln::i64);
  indices = kiln::where(
      kiln::less(indices, kiln::scalar(0.0, indices.dtype())),
      kiln::add(indices, kiln::scalar(static_cast<double>(depth), indices.dtype())), indices);
  const Tensor hot = kiln::one_hot(indices, depth, kiln::boolean);
  const Tensor off = kiln::gather(values, kiln::scalar<std::int64_t>(0));
  const Tensor on = kiln::gather(values, kiln::scalar<std::int64_t>(1));
  const Tensor out = kiln::where(hot, on, off);
  return {move_last_axis_to(out, normalize_axis(c.i("axis", -1), out.ndim()))};
}

Outputs cumulative(const Case& c, bool product) {
  const auto axis = static_cast<std::int64_t>(scalar_value(c.in(1)));
  const bool exclusive = c.i("exclusive", 0) != 0;
  const bool reverse = c.i("reverse", 0) != 0;
  if (product) return {kiln::cumprod(c.in(0), axis, exclusive, reverse)};
  return {kiln::cumsum(c.in(0), axis, exclusive, reverse)};
}

Outputs top_k(const Case& c) {
  const auto k = static_cast<std::int64_t>(scalar_value(c.in(1)));
  const auto r = kiln::top_k(c.in(0), k, c.i("axis", -1), c.i("largest", 1) != 0);
  return {r.values, r.indices};
}

Outputs arg(const Case& c, bool maximum) {
  const auto axis = c.i("axis", 0);
  const bool keepdims = c.i("keepdims", 1) != 0;
  const bool last = c.i("select_last_index", 0) != 0;
  if (maximum) return {kiln::argmax(c.in(0), axis, keepdims, last)};
  return {kiln::argmin(c.in(0), axis, keepdims, last)};
}

/// The ONNX Reduce* ops: axes from the input (opset >= 18; ReduceSum >= 13) or the attribute,
/// keepdims, noop_with_empty_axes.
OpFn reduce(std::int64_t axes_input_since,
            Tensor (*fn)(const Tensor&, const std::vector<std::int64_t>&, bool),
            Tensor (*before)(const Tensor&) = nullptr, Tensor (*after)(const Tensor&) = nullptr) {
  return [=](const Case& c) -> Outputs {
    const Tensor& x = c.in(0);
    auto axes = axes_of(c, 1, axes_input_since);
    const bool keepdims = c.i("keepdims", 1) != 0;
    if (axes.empty()) {
      if (c.i("noop_with_empty_axes", 0) != 0) return {before ? before(x) : x};
      for (std::int64_t k = 0; k < x.ndim(); ++k) axes.push_back(k);
    }
    Tensor y = fn(before ? before(x) : x, axes, keepdims);
    return {after ? after(y) : y};
  };
}

Tensor sum_axes(const Tensor& x, const std::vector<std::int64_t>& a, bool k) {
  return kiln::sum(x, a, k);
}
Tensor mean_axes(const Tensor& x, const std::vector<std::int64_t>& a, bool k) {
  return kiln::mean(x, a, k);
}
Tensor max_axes(const Tensor& x, const std::vector<std::int64_t>& a, bool k) {
  return kiln::max(x, a, k);
}
Tensor min_axes(const Tensor& x, const std::vector<std::int64_t>& a, bool k) {
  return kiln::min(x, a, k);
}
Tensor prod_axes(const Tensor& x, const std::vector<std::int64_t>& a, bool k) {
  return kiln::prod(x, a, k);
}
Tensor logsumexp_axes(const Tensor& x, const std::vector<std::int64_t>& a, bool k) {
  return kiln::logsumexp(x, a, k);
}
Tensor square(const Tensor& x) { return kiln::square(x); }
Tensor abs(const Tensor& x) { return kiln::abs(x); }
Tensor sqrt(const Tensor& x) { return kiln::sqrt(x); }
Tensor log(const Tensor& x) { return kiln::log(x); }

Outputs trilu(const Case& c) {
  const std::int64_t k = c.has(1) ? static_cast<std::int64_t>(scalar_value(c.in(1))) : 0;
  if (c.i("upper", 1) != 0) return {kiln::triu(c.in(0), k)};
  return {kiln::tril(c.in(0), k)};
}

Outputs range(const Case& c) {
  const Tensor& start = c.in(0);
  return {kiln::arange(scalar_value(start), scalar_value(c.in(1)), scalar_value(c.in(2)),
                       start.dtype())};
}

Outputs shape(const Case& c) {
  const auto dims = dims_of(c.in(0).shape());
  const auto rank = static_cast<std::int64_t>(dims.size());
  auto clamp = [&](std::int64_t v) {
    return std::clamp<std::int64_t>(v < 0 ? v + rank : v, 0, rank);
  };
  const auto start = clamp(c.i("start", 0));
  const auto end = std::max(start, c.has_attr("end") ? clamp(c.i("end", rank)) : rank);
  return {kiln::tensor(std::vector<std::int64_t>(dims.begin() + start, dims.begin() + end))};
}

Outputs size(const Case& c) { return {kiln::scalar<std::int64_t>(c.in(0).size())}; }

Outputs constant_of_shape(const Case& c) {
  const Shape s = shape_of(int_values(c.in(0)));
  if (!c.has_attr("value")) return {kiln::zeros(s, kiln::f32)};
  const Tensor v = c.t("value");
  return {kiln::broadcast_to(kiln::reshape(v, {}), s).contiguous()};
}

Outputs constant(const Case& c) {
  if (c.has_attr("value")) return {c.t("value")};
  if (c.has_attr("value_float")) return {kiln::scalar(static_cast<float>(c.f("value_float", 0)))};
  if (c.has_attr("value_int")) return {kiln::scalar<std::int64_t>(c.i("value_int", 0))};
  if (c.has_attr("value_ints")) return {kiln::tensor(c.ints("value_ints"))};
  if (c.has_attr("value_floats")) {
    std::vector<float> v;
    for (const double d : c.floats("value_floats")) v.push_back(static_cast<float>(d));
    return {kiln::tensor(v)};
  }
  throw NotMapped("Constant of a sparse or string value");
}

Outputs eye_like(const Case& c) {
  const Tensor& x = c.in(0);
  if (x.ndim() != 2) throw NotMapped("EyeLike of rank != 2");
  const auto dtype = c.has_attr("dtype") ? dtype_from_onnx(c.i("dtype", 1)) : x.dtype();
  const auto k = c.i("k", 0);
  const Tensor ones = kiln::ones(x.shape(), dtype);
  return {kiln::tril(kiln::triu(ones, k), k)};
}

/// DepthToSpace and SpaceToDepth (modes DCR and CRD) as reshape / transpose / reshape.
Outputs depth_to_space(const Case& c) {
  const Tensor& x = c.in(0);
  const auto b = c.i("blocksize", 1);
  const auto n = x.dim(0), ch = x.dim(1), h = x.dim(2), w = x.dim(3);
  const auto oc = ch / (b * b);
  Tensor y;
  if (c.s("mode", "DCR") == "DCR") {
    y = kiln::transpose(kiln::reshape(x, {n, b, b, oc, h, w}), {0, 3, 4, 1, 5, 2});
  } else {
    y = kiln::transpose(kiln::reshape(x, {n, oc, b, b, h, w}), {0, 1, 4, 2, 5, 3});
  }
  return {kiln::reshape(y, {n, oc, h * b, w * b})};
}

Outputs space_to_depth(const Case& c) {
  const Tensor& x = c.in(0);
  const auto b = c.i("blocksize", 1);
  const auto n = x.dim(0), ch = x.dim(1), h = x.dim(2), w = x.dim(3);
  const bool dcr = c.s("mode", "DCR") == "DCR";
  const Tensor y = kiln::transpose(kiln::reshape(x, {n, ch, h / b, b, w / b, b}),
                                   dcr ? std::vector<std::int64_t>{0, 3, 5, 1, 2, 4}
                                       : std::vector<std::int64_t>{0, 1, 3, 5, 2, 4});
  return {kiln::reshape(y, {n, ch * b * b, h / b, w / b})};
}

/// CenterCropPad: each listed axis cropped or padded (zeros) to its size, centred.
Outputs center_crop_pad(const Case& c) {
  Tensor x = c.in(0);
  const auto sizes = int_values(c.in(1));
  auto axes = c.ints("axes");
  if (axes.empty())
    for (std::int64_t k = 0; k < x.ndim(); ++k) axes.push_back(k);
  std::vector<std::pair<std::int64_t, std::int64_t>> widths(static_cast<std::size_t>(x.ndim()));
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto axis = normalize_axis(axes[k], x.ndim());
    const auto d = x.dim(axis);
    const auto target = sizes[k];
    if (target < d) {
      const auto start = (d - target) / 2;
      x = kiln::slice(x, axis, start, start + target);
    } else if (target > d) {
      const auto before = (target - d) / 2;
      widths[static_cast<std::size_t>(axis)] = {before, target - d - before};
    }
  }
  return {kiln::pad(x, widths)};
}

/// ONNX ReverseSequence: along time_axis, the first sequence_lens[b] steps of each batch entry
/// b reversed, the rest kept: one take_along_axis with positions len - 1 - t below len.
Outputs reverse_sequence(const Case& c) {
  c.only({"batch_axis", "time_axis"});
  const Tensor& x = c.in(0);
  const auto batch_axis = static_cast<std::size_t>(c.i("batch_axis", 1));
  const auto time_axis = static_cast<std::size_t>(c.i("time_axis", 0));
  std::vector<std::int64_t> time_dims(static_cast<std::size_t>(x.ndim()), 1);
  std::vector<std::int64_t> batch_dims = time_dims;
  time_dims[time_axis] = x.dim(static_cast<std::int64_t>(time_axis));
  batch_dims[batch_axis] = x.dim(static_cast<std::int64_t>(batch_axis));
  const Tensor t =
      kiln::reshape(kiln::arange(0, static_cast<double>(time_dims[time_axis]), 1, kiln::i64),
                    kiln::Shape(time_dims));
  const Tensor len = kiln::reshape(kiln::cast(c.in(1), kiln::i64), kiln::Shape(batch_dims));
  const Tensor reversed = kiln::sub(kiln::sub(len, kiln::scalar(std::int64_t{1})), t);
  const Tensor index =
      kiln::where(kiln::less(t, len), reversed, kiln::broadcast_to(t, reversed.shape()));
  return {kiln::take_along_axis(x, kiln::broadcast_to(index, x.shape()),
                                static_cast<std::int64_t>(time_axis))};
}

}  // namespace

void add_shape_ops(OpTable& t) {
  t["Reshape"] = reshape;
  t["Transpose"] = transpose;
  t["Squeeze"] = squeeze;
  t["Unsqueeze"] = unsqueeze;
  t["Flatten"] = flatten;
  t["Concat"] = concat;
  t["Split"] = split;
  t["Slice"] = slice;
  t["Expand"] = expand;
  t["Tile"] = tile;
  t["Pad"] = pad;
  t["CenterCropPad"] = center_crop_pad;
  t["DepthToSpace"] = depth_to_space;
  t["SpaceToDepth"] = space_to_depth;
  t["Gather"] = gather;
  t["GatherElements"] = gather_elements;
  t["GatherND"] = gather_nd;
  t["Scatter"] = scatter_elements;
  t["ScatterElements"] = scatter_elements;
  t["ScatterND"] = scatter_nd;
  t["OneHot"] = one_hot;
  t["CumSum"] = [](const Case& c) { return cumulative(c, false); };
  t["CumProd"] = [](const Case& c) { return cumulative(c, true); };
  t["TopK"] = top_k;
  t["ArgMax"] = [](const Case& c) { return arg(c, true); };
  t["ArgMin"] = [](const Case& c) { return arg(c, false); };
  t["ReduceSum"] = reduce(13, sum_axes);
  t["ReduceMean"] = reduce(18, mean_axes);
  t["ReduceMax"] = reduce(18, max_axes);
  t["ReduceMin"] = reduce(18, min_axes);
  t["ReduceProd"] = reduce(18, prod_axes);
  t["ReduceL1"] = reduce(18, sum_axes, abs);
  t["ReduceL2"] = reduce(18, sum_axes, square, sqrt);
  t["ReduceSumSquare"] = reduce(18, sum_axes, square);
  t["ReduceLogSum"] = reduce(18, sum_axes, nullptr, log);
  t["ReduceLogSumExp"] = reduce(18, logsumexp_axes);
  t["Trilu"] = trilu;
  t["ReverseSequence"] = reverse_sequence;
  t["Range"] = range;
  t["Shape"] = shape;
  t["Size"] = size;
  t["ConstantOfShape"] = constant_of_shape;
  t["Constant"] = constant;
  t["EyeLike"] = eye_like;
}

}  // namespace onnx_conformance

// The layout rules of lowering (see lowering.hpp): broadcast strides and views.

#include "kernels/lowering.hpp"

namespace kiln::detail {

Shape broadcast_strides(const Shape& in_shape, const Shape& in_strides, const Shape& out_shape) {
  Shape st;
  st.resize(out_shape.size());
  const std::size_t lead = out_shape.size() - in_shape.size();
  for (std::size_t i = 0; i < in_shape.size(); ++i)
    st[lead + i] = in_shape[i] == 1 && out_shape[lead + i] != 1 ? 0 : in_strides[i];
  return st;
}

namespace {

/// Strides for viewing a tensor of (shape, strides) as new_shape without copying, if
/// possible (NumPy's no-copy reshape: each group of old dims merged or split must be
/// contiguous within itself).
std::optional<Shape> reshape_strides(const Shape& shape, const Shape& strides,
                                     const Shape& new_shape) {
  Shape out;
  out.resize(new_shape.size());
  if (shape.numel() == 0) return contiguous_strides(new_shape);
  Shape old_shape, old_strides;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) {
      old_shape.push_back(shape[i]);
      old_strides.push_back(strides[i]);
    }
  std::size_t oi = 0, oj = 1, ni = 0, nj = 1;
  const std::size_t on = old_shape.size(), nn = new_shape.size();
  while (ni < nn && oi < on) {
    std::int64_t np = new_shape[ni], op = old_shape[oi];
    while (np != op) {
      if (np < op)
        np *= new_shape[nj++];
      else
        op *= old_shape[oj++];
    }
    for (std::size_t k = oi; k + 1 < oj; ++k)
      if (old_strides[k] != old_shape[k + 1] * old_strides[k + 1]) return std::nullopt;
    out[nj - 1] = old_strides[oj - 1];
    for (std::size_t k = nj - 1; k > ni; --k) out[k - 1] = out[k] * new_shape[k];
    ni = nj++;
    oi = oj++;
  }
  const std::int64_t last = ni > 0 ? out[ni - 1] : 1;
  for (std::size_t k = ni; k < nn; ++k) out[k] = last;  // trailing size-1 dims
  return out;
}

}  // namespace

std::optional<ViewLayout> view_layout(Prim p, const Shape& in_shape, const Shape& in_strides,
                                      std::int64_t in_offset, const Attrs& attrs,
                                      const Shape& out_shape) {
  switch (p) {
    case Prim::reshape:
      if (auto st = reshape_strides(in_shape, in_strides, out_shape))
        return ViewLayout{*st, in_offset};
      return std::nullopt;
    case Prim::transpose: {
      Shape st;
      for (auto a : attrs.axes) st.push_back(in_strides[static_cast<std::size_t>(a)]);
      return ViewLayout{st, in_offset};
    }
    case Prim::broadcast_to:
      return ViewLayout{broadcast_strides(in_shape, in_strides, out_shape), in_offset};
    case Prim::slice: {
      Shape st;
      std::int64_t offset = in_offset;
      for (std::size_t d = 0; d < in_shape.size(); ++d) {
        const std::int64_t start = attrs.ints[2 * d], step = attrs.ints[2 * d + 1];
        if (out_shape[d] > 0) offset += start * in_strides[d];
        st.push_back(in_strides[d] * step);
      }
      return ViewLayout{st, offset};
    }
    default:
      return std::nullopt;
  }
}

}  // namespace kiln::detail

#include "ops/dispatch.hpp"

#include "core/hooks.hpp"
#include "kernels/fused.hpp"
#include "kernels/lowering.hpp"

#include <array>
#include <optional>

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

namespace {

std::optional<Tensor> try_view(Prim p, const Tensor& in, const Attrs& attrs,
                               const Shape& out_shape) {
  const TensorImpl& impl = *in.impl();
  if (auto layout = view_layout(p, impl.shape, impl.strides, impl.offset, attrs, out_shape))
    return make_view(in, out_shape, layout->strides, layout->offset);
  return std::nullopt;
}

/// Allocates the output and runs p's kernel on inputs (see KernelCall for what kernels get).
Tensor run_kernel(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                  DType out_dtype, const Shape& out_shape) {
  Tensor out = empty(out_shape, out_dtype, name(p).data());  // names are literals
  const TensorImpl& out_impl = *out.impl();
  const bool elementwise = is_elementwise(p);
  const std::int64_t n = out_shape.numel();
  if (flat_elementwise_candidate(p, n, inputs.size())) {
    // Small work whose inputs are each contiguous in the output's shape or a single element:
    // one row kernel call, no stride bookkeeping.
    std::array<const void*, 3> data{};
    std::array<std::int64_t, 3> strides{};
    bool flat = true;
    for (std::size_t i = 0; i < inputs.size() && flat; ++i) {
      const TensorImpl& impl = *inputs[i]->impl();
      data[i] = impl.data();
      strides[i] = flat_stride(impl.shape.numel(),
                               impl.shape == out_shape && impl.strides == out_impl.strides);
      flat = strides[i] >= 0;
    }
    if (flat) {
      const DType in_dtype = inputs[flat_dtype_input(inputs.size())]->impl()->dtype;
      run_elementwise_flat(p, data.data(), strides.data(), in_dtype, out_impl.data(), out_dtype, n);
      return out;
    }
  }
  const ArrayRef out_ref{out_impl.data(), out_dtype, out_shape, out_impl.strides};
  constexpr std::size_t small = 4;
  static_assert(std::is_trivially_destructible_v<ArrayRef>);
  alignas(ArrayRef) unsigned char stack_refs[small * sizeof(ArrayRef)];  // left uninitialized
  std::vector<ArrayRef> heap_refs;
  ArrayRef* refs = reinterpret_cast<ArrayRef*>(stack_refs);
  if (inputs.size() > small) {
    heap_refs.resize(inputs.size());
    refs = heap_refs.data();
  }
  std::vector<Tensor> copies;  // contiguous copies made for non-elementwise kernels
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorImpl& impl = *inputs[i]->impl();
    if (elementwise) {
      new (&refs[i]) ArrayRef{impl.data(), impl.dtype, out_shape,
                              impl.shape == out_shape
                                  ? impl.strides
                                  : broadcast_strides(impl.shape, impl.strides, out_shape)};
    } else if (const ArrayRef own{impl.data(), impl.dtype, impl.shape, impl.strides};
               input_read(p, i, own) == InputRead::as_is) {
      new (&refs[i]) ArrayRef(own);
    } else {
      copies.push_back(inputs[i]->contiguous());
      new (&refs[i]) ArrayRef(array_ref(copies.back()));
    }
  }
  kernel_for(p)(KernelCall{p, std::span<const ArrayRef>(refs, inputs.size()), out_ref, attrs});
  return out;
}

}  // namespace

Tensor run_primitive(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                     DType out_dtype, const Shape& out_shape) {
  if (info(p).family == Family::movement && inputs.size() == 1) {
    if (std::optional<Tensor> view = try_view(p, *inputs[0], attrs, out_shape))
      return std::move(*view);
  }
  return run_kernel(p, inputs, attrs, out_dtype, out_shape);
}

Tensor run_fused_program(const FusedProgram& program, std::span<const Tensor* const> inputs,
                         DType out_dtype, const Shape& out_shape) {
  Tensor out = empty(out_shape, out_dtype);
  const TensorImpl& out_impl = *out.impl();
  std::array<ArrayRef, max_fused_inputs> refs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorImpl& impl = *inputs[i]->impl();
    refs[i] =
        ArrayRef{impl.data(), impl.dtype, out_shape,
                 impl.shape == out_shape ? impl.strides
                                         : broadcast_strides(impl.shape, impl.strides, out_shape)};
  }
  const ArrayRef out_ref{out_impl.data(), out_dtype, out_shape, out_impl.strides};
  run_fused(program, std::span<const ArrayRef>(refs.data(), inputs.size()), out_ref);
  return out;
}

Tensor apply(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs, DType out_dtype,
             const Shape& out_shape) {
  Tensor out;
  if (TraceHooks* trace = active_trace()) {
    out = trace->record_op(p, inputs, attrs, out_dtype, out_shape);
  } else {
    for (const Tensor* t : inputs) check_concrete(*t->impl(), name(p).data());
    out = run_primitive(p, inputs, attrs, out_dtype, out_shape);
  }
  if (any_tape_recording()) {
    std::vector<Tensor> held;
    held.reserve(inputs.size());
    for (const Tensor* t : inputs) held.push_back(*t);
    tape_hooks.record_op(p, held, attrs, out);
  }
  return out;
}

Tensor apply(Prim p, std::span<const Tensor> inputs, const Attrs& attrs, DType out_dtype,
             const Shape& out_shape) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  return apply(p, std::span<const Tensor* const>(ptrs), attrs, out_dtype, out_shape);
}

void check_defined(const Tensor& t, std::string_view op, int index) {
  if (!t.defined()) fail(op, "argument {} is an undefined tensor", index);
}

void check_same_dtype(const Tensor& a, const Tensor& b, std::string_view op) {
  if (a.dtype() != b.dtype())
    fail(op, "dtypes differ: {} vs {} (use kiln::cast)", dtype_name(a.dtype()),
         dtype_name(b.dtype()));
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out;
  out.resize(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      if (is_dynamic_dim(da) || is_dynamic_dim(db))
        fail(op,
             "shapes {} and {} cannot be broadcast: a dynamic dim matches only itself or 1 (dims "
             "marked -1 in the input_signature are different symbols unless their sizes were "
             "equal when the function was traced)",
             a, b);
      fail(op, "shapes {} and {} cannot be broadcast", a, b);
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_dims(const Shape& shape, std::string_view op) {
  const TraceHooks* trace = active_trace();
  for (auto d : shape) {
    if (d >= 0) continue;
    const std::int64_t id = dynamic_dim_id(d);
    if (id < 0 || trace == nullptr || id >= trace->num_symbols()) {
      if (is_dynamic_dim(d))
        fail(op,
             "dimension {} in shape {} was computed from a dynamic dim (arithmetic on dynamic "
             "dims is not supported; use reshape with -1, or a static size)",
             d, shape);
      fail(op, "negative dimension {} in shape {}", d, shape);
    }
  }
}

std::string dim_text(std::int64_t dim) {
  const std::string text = Shape{dim}.to_string();
  return text.substr(1, text.size() - 2);
}

void require_static_dim(std::int64_t dim, std::string_view op, std::string_view what) {
  if (is_dynamic_dim(dim))
    fail(op,
         "{} is a dynamic dim ({}), but this op needs its size while tracing; give that dim a "
         "static size in the input_signature",
         what, dim_text(dim));
}

void require_static_shape(const Shape& shape, std::string_view op, std::string_view what) {
  if (shape.has_dynamic_dims())
    fail(op,
         "{} {} has a dynamic dim, but this op needs every size while tracing; give those dims "
         "static sizes in the input_signature",
         what, shape);
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, std::string_view op) {
  if (axis < -rank || axis >= rank) fail(op, "axis {} out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace kiln::detail

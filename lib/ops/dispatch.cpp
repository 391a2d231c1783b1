#include "ops/dispatch.hpp"

#include "core/hooks.hpp"
#include "kernels/lowering.hpp"
#include "kernels/rows.hpp"
#include "kiln/ops.hpp"

#include <array>
#include <cstdint>
#include <new>
#include <type_traits>
#include <vector>

namespace kiln::detail {

namespace {

/// Eager execution as a lowering target (see kernels/lowering.hpp): each decision runs at once
/// on the tensors' memory. Nothing is allocated but the output and any contiguous copies.
class EagerTarget {
 public:
  EagerTarget(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs, DType out_dtype,
              const Shape& out_shape)
      : p_(p), inputs_(inputs), attrs_(attrs), out_dtype_(out_dtype), out_shape_(out_shape) {}

  std::size_t num_inputs() const { return inputs_.size(); }
  InputLayout input(std::size_t i) const {
    const TensorImpl& impl = *impl_of(i);
    return InputLayout{impl.dtype, &impl.shape, &impl.strides, impl.offset};
  }

  // view, make_contiguous and kernel stay out of line, so the flat path of lower() is compact.
  [[gnu::noinline]] Tensor view(const ViewLayout& layout) {
    return make_view(*inputs_[0], out_shape_, layout.strides, layout.offset);
  }

  Tensor flat(const FlatCall& call) {
    Tensor out = allocate_output();
    std::array<const void*, 3> data{};
    for (std::size_t i = 0; i < inputs_.size(); ++i) data[i] = inputs_[i]->impl()->data();
    run_flat(call, data.data(), out.impl()->data());
    return out;
  }

  [[gnu::noinline]] void make_contiguous(std::size_t i) {
    if (copied_.empty()) copied_.resize(inputs_.size());
    copied_[i] = inputs_[i]->contiguous();
  }

  [[gnu::noinline]] Tensor kernel() {
    Tensor out = allocate_output();
    const TensorImpl& out_impl = *out.impl();
    const ArrayRef out_ref{out_impl.data(), out_dtype_, out_shape_, out_impl.strides};
    constexpr std::size_t small = 4;
    static_assert(std::is_trivially_destructible_v<ArrayRef>);
    alignas(ArrayRef) unsigned char stack_refs[small * sizeof(ArrayRef)];  // left uninitialized
    std::vector<ArrayRef> heap_refs;
    ArrayRef* refs = reinterpret_cast<ArrayRef*>(stack_refs);
    if (inputs_.size() > small) {
      heap_refs.resize(inputs_.size());
      refs = heap_refs.data();
    }
    for (std::size_t i = 0; i < inputs_.size(); ++i)
      new (&refs[i]) ArrayRef(kernel_input_ref(p_, impl_of(i)->data(), input(i), out_shape_));
    kernel_for(p_)(
        KernelCall{p_, std::span<const ArrayRef>(refs, inputs_.size()), out_ref, attrs_});
    return out;
  }

 private:
  const TensorImpl* impl_of(std::size_t i) const {
    return (copied_.empty() || !copied_[i].defined() ? *inputs_[i] : copied_[i]).impl().get();
  }
  Tensor allocate_output() const { return empty(out_shape_, out_dtype_, name(p_).data()); }

  Prim p_;
  std::span<const Tensor* const> inputs_;
  const Attrs& attrs_;
  DType out_dtype_;
  const Shape& out_shape_;
  std::vector<Tensor> copied_;  // contiguous copies of inputs a kernel cannot read in place
};

}  // namespace

Tensor run_primitive(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                     DType out_dtype, const Shape& out_shape) {
  EagerTarget target(p, inputs, attrs, out_dtype, out_shape);
  return lower(p, attrs, out_dtype, out_shape, target);
}

namespace {

/// apply() once its inputs are dense tensors of dtypes the primitive takes.
Tensor apply_ready(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs,
                   DType out_dtype, const Shape& out_shape) {
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

/// Whether p works on every dtype as it is: cast, where, the ops that only move elements, and
/// the row ops that read or store rows as they are (embedding lookups, a variable's
/// scatter_update, read back in a trace).
bool moves_elements(Prim p, const Attrs& attrs) {
  if (p == Prim::cast || p == Prim::where || p == Prim::take_rows) return true;
  if (p == Prim::scatter_rows)
    return !attrs.ints.empty() && attrs.ints[0] == static_cast<std::int64_t>(RowUpdate::assign);
  return info(p).family == Family::movement;
}

/// Whether p's kernels compute on u64 (the elementwise rows, reductions and indexing ops).
bool computes_u64(Prim p) {
  switch (info(p).family) {
    case Family::unary:
    case Family::binary:
    case Family::ternary:
    case Family::reduce:
    case Family::indexing:
      return p != Prim::softmax && p != Prim::log_softmax && p != Prim::logsumexp &&
             p != Prim::layer_norm && p != Prim::rms_norm;
    default:
      return false;
  }
}

/// The dtypes that send apply() down apply_unusual, one bit each: those computed in a wider
/// dtype, and u64. A mask, so the check on every call is one shift and test.
static_assert(num_dtypes <= 32, "unusual_dtypes holds one bit per dtype");
constexpr std::uint32_t unusual_dtypes = [] {
  std::uint32_t mask = 0;
  for (std::size_t i = 0; i < num_dtypes; ++i) {
    const auto d = static_cast<DType>(i);
    if (compute_dtype(d) != d || d == DType::u64) mask |= std::uint32_t{1} << i;
  }
  return mask;
}();
constexpr bool unusual_dtype(DType dtype) {
  return ((unusual_dtypes >> static_cast<unsigned>(dtype)) & 1U) != 0;
}

/// apply() for the rare inputs: dtypes computed in a wider one (cast to it, computed, and the
/// result cast back), u64 where p has no u64 kernel (refused), and indexed-slices values (made
/// dense first: ops read dense tensors only).
[[gnu::noinline]] Tensor apply_unusual(Prim p, std::span<const Tensor* const> inputs,
                                       const Attrs& attrs, DType out_dtype,
                                       const Shape& out_shape) {
  const bool moves = moves_elements(p, attrs);
  bool changed = false;
  std::vector<Tensor> ready;
  ready.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    Tensor x = t->impl()->is_slices() ? densify_slices(*t) : *t;
    if (!moves && x.dtype() == DType::u64 && !computes_u64(p))
      fail(name(p), "has no u64 kernel: kiln::cast to i64 or f64 first");
    if (!moves && compute_dtype(x.dtype()) != x.dtype()) x = cast(x, compute_dtype(x.dtype()));
    changed = changed || x.impl() != t->impl();
    ready.push_back(std::move(x));
  }
  const DType computed_out = moves ? out_dtype : compute_dtype(out_dtype);
  if (!moves && out_dtype == DType::u64 && !computes_u64(p))
    fail(name(p), "has no u64 kernel: kiln::cast to i64 or f64 first");
  if (!changed && computed_out == out_dtype)
    return apply_ready(p, inputs, attrs, out_dtype, out_shape);
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(ready.size());
  for (const Tensor& t : ready) ptrs.push_back(&t);
  Tensor out = apply_ready(p, std::span<const Tensor* const>(ptrs), attrs, computed_out, out_shape);
  return computed_out == out_dtype ? out : cast(out, out_dtype);
}

}  // namespace

Tensor apply(Prim p, std::span<const Tensor* const> inputs, const Attrs& attrs, DType out_dtype,
             const Shape& out_shape) {
  if (unusual_dtype(out_dtype)) [[unlikely]]
    return apply_unusual(p, inputs, attrs, out_dtype, out_shape);
  for (const Tensor* t : inputs)
    if (t->impl()->is_slices() || unusual_dtype(t->impl()->dtype)) [[unlikely]]
      return apply_unusual(p, inputs, attrs, out_dtype, out_shape);
  return apply_ready(p, inputs, attrs, out_dtype, out_shape);
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

void check_accepts(DType dtype, Accepts accepts, std::string_view op) {
  if (accepts_dtype(accepts, compute_dtype(dtype))) return;
  if (accepts == Accepts::floating)
    fail(op,
         "needs a floating-point dtype (f32, f64, f16, bf16 or an 8- or 4-bit float), got {} (use "
         "kiln::cast)",
         dtype_name(dtype));
  if (accepts == Accepts::integer) fail(op, "needs an integer dtype, got {}", dtype_name(dtype));
  fail(op, "needs a numeric dtype, got bool");
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

#pragma once
// Row kernels of the elementwise primitives for one xsimd architecture. Included only by
// elementwise_sse2.cpp, elementwise_avx2.cpp and elementwise_avx512.cpp, each compiled
// with its own -m flags; each defines KILN_ELEMENTWISE_ISA (sse2, avx2, avx512) first and
// exports ElementwiseRows<Arch>::table.
//
// One-definition rule: inline or template code that does not depend on the instruction
// set is compiled once per TU with different -m flags, and the linker keeps one copy for
// everyone, possibly the AVX-512 one. So:
// - xsimd is compiled under a per-TU namespace name (the macro `xsimd` below): its plain
//   inline helpers (rem_pio2, constants, SSE pieces of the AVX kernels) then have distinct
//   symbols in each TU;
// - everything of ours is in an anonymous namespace or evaluated at compile time (the
//   table is a constexpr variable), and nothing calls std algorithms or <cmath> inline
//   functions; scalar math goes through __builtin_* (inlined or a libm call).
//
// Element types: f32 float, f64 double, i32 int32_t, i64 int64_t, bool uint8_t (0 or 1).
// Floating-point rows use xsimd batches (tails go through a zero-padded batch, so every
// element gets the same code). Integer and boolean rows are plain loops the compiler
// vectorizes for the TU's instruction set; integer arithmetic wraps through unsigned
// types, so nothing here is undefined behaviour.

#ifndef KILN_ELEMENTWISE_ISA
#error "define KILN_ELEMENTWISE_ISA before including kernels/elementwise_arch.hpp"
#endif

#include <cstdint>
#include <type_traits>

#include "kernels/elementwise_table.hpp"

#define KILN_ISA_NAMESPACE_(isa) kiln_xsimd_##isa
#define KILN_ISA_NAMESPACE(isa) KILN_ISA_NAMESPACE_(isa)
#define xsimd KILN_ISA_NAMESPACE(KILN_ELEMENTWISE_ISA)
#include <xsimd/xsimd.hpp>

#include "kernels/copy_rows_arch.hpp"
#include "kernels/elementwise_ops_arch.hpp"

namespace kiln::detail {

namespace {

// ------------------------------------------------------------------ row loops

template <class Op, class T>
inline constexpr bool uses_simd = Op::has_simd&& is_float_v<T>;

template <class Op, class T>
using OutOf = std::conditional_t<Op::bool_out, std::uint8_t, T>;

template <class Arch, class Op, class T, int InStride>
void unary_loop(const T* x, OutOf<Op, T>* y, std::int64_t n) {
  if constexpr (uses_simd<Op, T>) {
    using B = xsimd::batch<T, Arch>;
    constexpr std::int64_t width = B::size;
    std::int64_t i = 0;
    if constexpr (InStride == 1) {
      for (; i + width <= n; i += width) Op::simd(B::load_unaligned(x + i)).store_unaligned(y + i);
    } else {
      const B v = Op::simd(B(x[0]));
      for (; i + width <= n; i += width) v.store_unaligned(y + i);
    }
    if (i < n) {
      T in[width] = {};
      T out[width];
      for (std::int64_t j = 0; j < n - i; ++j) in[j] = x[InStride * (i + j)];
      Op::simd(B::load_unaligned(in)).store_unaligned(out);
      for (std::int64_t j = 0; j < n - i; ++j) y[i + j] = out[j];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = Op::scalar(x[InStride * i]);
  }
}

template <class Arch, class Op, class T>
void unary_row(const void* in, std::int64_t in_stride, void* out, std::int64_t n) {
  const T* x = static_cast<const T*>(in);
  auto* y = static_cast<OutOf<Op, T>*>(out);
  if (in_stride == 0)
    unary_loop<Arch, Op, T, 0>(x, y, n);
  else
    unary_loop<Arch, Op, T, 1>(x, y, n);
}

template <class Arch, class Op, class T, int AStride, int BStride>
void binary_loop(const T* a, const T* b, OutOf<Op, T>* y, std::int64_t n) {
  if constexpr (uses_simd<Op, T>) {
    using B = xsimd::batch<T, Arch>;
    constexpr std::int64_t width = B::size;
    std::int64_t i = 0;
    const B a0(a[0]), b0(b[0]);
    for (; i + width <= n; i += width) {
      const B va = AStride == 1 ? B::load_unaligned(a + i) : a0;
      const B vb = BStride == 1 ? B::load_unaligned(b + i) : b0;
      Op::simd(va, vb).store_unaligned(y + i);
    }
    if (i < n) {
      T in_a[width] = {};
      T in_b[width] = {};
      T out[width];
      for (std::int64_t j = 0; j < n - i; ++j) {
        in_a[j] = a[AStride * (i + j)];
        in_b[j] = b[BStride * (i + j)];
      }
      Op::simd(B::load_unaligned(in_a), B::load_unaligned(in_b)).store_unaligned(out);
      for (std::int64_t j = 0; j < n - i; ++j) y[i + j] = out[j];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = Op::scalar(a[AStride * i], b[BStride * i]);
  }
}

template <class Arch, class Op, class T>
void binary_row(const void* in_a, std::int64_t a_stride, const void* in_b, std::int64_t b_stride,
                void* out, std::int64_t n) {
  const T* a = static_cast<const T*>(in_a);
  const T* b = static_cast<const T*>(in_b);
  auto* y = static_cast<OutOf<Op, T>*>(out);
  if (a_stride == 1 && b_stride == 1)
    binary_loop<Arch, Op, T, 1, 1>(a, b, y, n);
  else if (a_stride == 1)
    binary_loop<Arch, Op, T, 1, 0>(a, b, y, n);
  else if (b_stride == 1)
    binary_loop<Arch, Op, T, 0, 1>(a, b, y, n);
  else
    binary_loop<Arch, Op, T, 0, 0>(a, b, y, n);
}

template <class Arch, class From, class To>
void cast_row(const void* in, std::int64_t in_stride, void* out, std::int64_t n) {
  const From* x = static_cast<const From*>(in);
  To* y = static_cast<To*>(out);
  if (in_stride == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = convert<To>(x[i]);
  } else {
    const To v = convert<To>(x[0]);
    for (std::int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

template <class Arch, class T>
void where_row(const void* in_cond, std::int64_t cond_stride, const void* in_a,
               std::int64_t a_stride, const void* in_b, std::int64_t b_stride, void* out,
               std::int64_t n) {
  const auto* c = static_cast<const std::uint8_t*>(in_cond);
  const T* a = static_cast<const T*>(in_a);
  const T* b = static_cast<const T*>(in_b);
  T* y = static_cast<T*>(out);
  if (cond_stride == 1 && a_stride == 1 && b_stride == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = c[i] != 0 ? a[i] : b[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      y[i] = c[cond_stride * i] != 0 ? a[a_stride * i] : b[b_stride * i];
  }
}

// ------------------------------------------------------------------ table

/// Fills row[dtype] with Entry<element type of dtype>::value for each dtype.
template <template <class> class Entry>
constexpr void fill_by_dtype(auto* row) {
  row[dtype_index(DType::f32)] = Entry<float>::value;
  row[dtype_index(DType::f64)] = Entry<double>::value;
  row[dtype_index(DType::i32)] = Entry<std::int32_t>::value;
  row[dtype_index(DType::i64)] = Entry<std::int64_t>::value;
  row[dtype_index(DType::boolean)] = Entry<std::uint8_t>::value;
}

template <class Arch, class Op>
struct UnaryEntries {
  template <class T>
  struct Entry {
    static constexpr UnaryRowFn value = [] {
      if constexpr (Op::template accepts<T>)
        return &unary_row<Arch, Op, T>;
      else
        return UnaryRowFn{nullptr};
    }();
  };
};

template <class Arch, class Op>
struct BinaryEntries {
  template <class T>
  struct Entry {
    static constexpr BinaryRowFn value = [] {
      if constexpr (Op::template accepts<T>)
        return &binary_row<Arch, Op, T>;
      else
        return BinaryRowFn{nullptr};
    }();
  };
};

template <class Arch, class From>
struct CastEntries {
  template <class To>
  struct Entry {
    static constexpr UnaryRowFn value = &cast_row<Arch, From, To>;
  };
};

template <class Arch>
struct WhereEntries {
  template <class T>
  struct Entry {
    static constexpr WhereRowFn value = &where_row<Arch, T>;
  };
};

template <class Arch, class Op>
constexpr void set_unary(ElementwiseRowTable& table, Prim p) {
  fill_by_dtype<UnaryEntries<Arch, Op>::template Entry>(table.unary[unary_row_index(p)]);
}
template <class Arch, class Op>
constexpr void set_binary(ElementwiseRowTable& table, Prim p) {
  fill_by_dtype<BinaryEntries<Arch, Op>::template Entry>(table.binary[binary_row_index(p)]);
}

template <class Arch>
constexpr ElementwiseRowTable make_row_table(const char* isa_name) {
  ElementwiseRowTable t;
  t.isa_name = isa_name;
  set_unary<Arch, NegOp>(t, Prim::neg);
  set_unary<Arch, AbsOp>(t, Prim::abs);
  set_unary<Arch, SignOp>(t, Prim::sign);
  set_unary<Arch, ExpOp>(t, Prim::exp);
  set_unary<Arch, LogOp>(t, Prim::log);
  set_unary<Arch, Log1pOp>(t, Prim::log1p);
  set_unary<Arch, SqrtOp>(t, Prim::sqrt);
  set_unary<Arch, RsqrtOp>(t, Prim::rsqrt);
  set_unary<Arch, SquareOp>(t, Prim::square);
  set_unary<Arch, SinOp>(t, Prim::sin);
  set_unary<Arch, CosOp>(t, Prim::cos);
  set_unary<Arch, TanhOp>(t, Prim::tanh);
  set_unary<Arch, SigmoidOp>(t, Prim::sigmoid);
  set_unary<Arch, ReluOp>(t, Prim::relu);
  set_unary<Arch, SoftplusOp>(t, Prim::softplus);
  set_unary<Arch, FloorOp>(t, Prim::floor);
  set_unary<Arch, CeilOp>(t, Prim::ceil);
  set_unary<Arch, RoundOp>(t, Prim::round);
  set_unary<Arch, LogicalNotOp>(t, Prim::logical_not);
  set_unary<Arch, IsNanOp>(t, Prim::isnan);
  set_unary<Arch, IsFiniteOp>(t, Prim::isfinite);

  fill_by_dtype<CastEntries<Arch, float>::template Entry>(t.cast[dtype_index(DType::f32)]);
  fill_by_dtype<CastEntries<Arch, double>::template Entry>(t.cast[dtype_index(DType::f64)]);
  fill_by_dtype<CastEntries<Arch, std::int32_t>::template Entry>(t.cast[dtype_index(DType::i32)]);
  fill_by_dtype<CastEntries<Arch, std::int64_t>::template Entry>(t.cast[dtype_index(DType::i64)]);
  fill_by_dtype<CastEntries<Arch, std::uint8_t>::template Entry>(
      t.cast[dtype_index(DType::boolean)]);

  set_binary<Arch, AddOp>(t, Prim::add);
  set_binary<Arch, SubOp>(t, Prim::sub);
  set_binary<Arch, MulOp>(t, Prim::mul);
  set_binary<Arch, DivOp>(t, Prim::div);
  set_binary<Arch, PowOp>(t, Prim::pow);
  set_binary<Arch, MaximumOp>(t, Prim::maximum);
  set_binary<Arch, MinimumOp>(t, Prim::minimum);
  set_binary<Arch, ModOp>(t, Prim::mod);
  set_binary<Arch, EqualOp>(t, Prim::equal);
  set_binary<Arch, NotEqualOp>(t, Prim::not_equal);
  set_binary<Arch, LessOp>(t, Prim::less);
  set_binary<Arch, LessEqualOp>(t, Prim::less_equal);
  set_binary<Arch, GreaterOp>(t, Prim::greater);
  set_binary<Arch, GreaterEqualOp>(t, Prim::greater_equal);
  set_binary<Arch, LogicalAndOp>(t, Prim::logical_and);
  set_binary<Arch, LogicalOrOp>(t, Prim::logical_or);

  fill_by_dtype<WhereEntries<Arch>::template Entry>(t.where);
  t.copy_rows = &copy_rows<Arch>;
  return t;
}

}  // namespace

#define KILN_ISA_NAME_(isa) #isa
#define KILN_ISA_NAME(isa) KILN_ISA_NAME_(isa)

/// The row table of instruction set Arch, built at compile time. Its isa_name is what
/// KILN_SIMD calls the instruction set (sse2, avx2, avx512).
template <class Arch>
struct ElementwiseRows {
  static constexpr ElementwiseRowTable table =
      make_row_table<Arch>(KILN_ISA_NAME(KILN_ELEMENTWISE_ISA));
};

}  // namespace kiln::detail

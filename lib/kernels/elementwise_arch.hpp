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
// Element types: f32 float, f64 double, i32 int32_t, i64 int64_t, u64 uint64_t, bool uint8_t
// (0 or 1); the dtypes ops compute in a wider one (i8, u8, i16, u16, u32, f16, bf16 and the
// 8-, 4- and 2-bit dtypes; see kiln::compute_dtype) have cast and where rows and nothing else.
// The cast rows of the 8-, 4- and 2-bit dtypes are not compiled here: every table points at
// kernels/cast_narrow.cpp's, compiled once for the baseline instruction set.
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

#include "kernels/arg_extremum_rows_arch.hpp"
#include "kernels/convert.hpp"
#include "kernels/copy_rows_arch.hpp"
#include "kernels/elementwise_ops_arch.hpp"
#include "kernels/elementwise_ops_binary_arch.hpp"
#include "kernels/recurrent_step_arch.hpp"
#include "kernels/softmax_rows_arch.hpp"
#include "kernels/sum_rows_arch.hpp"

// After softmax_rows_arch.hpp: it uses lane_sum and kSoftmaxBlock.
#include "kernels/normalize_rows_arch.hpp"

namespace kiln::detail {

namespace {

// ------------------------------------------------------------------ row loops

template <class Op, class T>
inline constexpr bool uses_simd = Op::has_simd&& is_float_v<T>;

/// The output element type of Op on T inputs: what its scalar() returns (unevaluated).
template <class Op, class T>
struct OutputOf {
  using type = decltype(Op::scalar(T{}));
};
template <class Op, class T>
requires requires { Op::scalar(T{}, T{}); }
struct OutputOf<Op, T> {
  using type = decltype(Op::scalar(T{}, T{}));
};
template <class Op, class T>
using OutOf = typename OutputOf<Op, T>::type;

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
  storage_t<To>* y = static_cast<storage_t<To>*>(out);
  if (in_stride == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = convert_element<To>(x[i]);
  } else {
    const storage_t<To> v = convert_element<To>(x[0]);
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
  row[dtype_index(DType::u64)] = Entry<std::uint64_t>::value;
}

/// Fills row[dtype] with Entry<T>::value for every dtype, storage-only ones included, where T
/// is the dtype's C++ type (bool for booleans, std::uint8_t for u8): the cast table's columns.
template <template <class> class Entry>
constexpr void fill_by_cast_target(auto* row) {
  row[dtype_index(DType::f32)] = Entry<float>::value;
  row[dtype_index(DType::f64)] = Entry<double>::value;
  row[dtype_index(DType::i32)] = Entry<std::int32_t>::value;
  row[dtype_index(DType::i64)] = Entry<std::int64_t>::value;
  row[dtype_index(DType::boolean)] = Entry<bool>::value;
  row[dtype_index(DType::i8)] = Entry<std::int8_t>::value;
  row[dtype_index(DType::u8)] = Entry<std::uint8_t>::value;
  row[dtype_index(DType::f16)] = Entry<float16>::value;
  row[dtype_index(DType::bf16)] = Entry<bfloat16>::value;
  row[dtype_index(DType::i16)] = Entry<std::int16_t>::value;
  row[dtype_index(DType::u16)] = Entry<std::uint16_t>::value;
  row[dtype_index(DType::u32)] = Entry<std::uint32_t>::value;
  row[dtype_index(DType::u64)] = Entry<std::uint64_t>::value;
  row[dtype_index(DType::f8e4m3fn)] = Entry<float8_e4m3fn>::value;
  row[dtype_index(DType::f8e4m3fnuz)] = Entry<float8_e4m3fnuz>::value;
  row[dtype_index(DType::f8e5m2)] = Entry<float8_e5m2>::value;
  row[dtype_index(DType::f8e5m2fnuz)] = Entry<float8_e5m2fnuz>::value;
  row[dtype_index(DType::f4e2m1fn)] = Entry<float4_e2m1fn>::value;
  row[dtype_index(DType::i4)] = Entry<int4>::value;
  row[dtype_index(DType::u4)] = Entry<uint4>::value;
  row[dtype_index(DType::i2)] = Entry<int2>::value;
  row[dtype_index(DType::u2)] = Entry<uint2>::value;
}

/// The dtype of element type T.
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::i64;
  if constexpr (std::is_same_v<T, std::uint64_t>) return DType::u64;
  return DType::boolean;
}

/// Whether primitive p's row gets a kernel for element type T (its accepts column), checking
/// that the functor's output type is what its output column says.
template <Prim P, class Op, class T>
constexpr bool has_row_kernel() {
  if constexpr (!accepts_dtype(info(P).accepts, dtype_of<T>())) {
    return false;
  } else {
    using Expected = std::conditional_t<info(P).output == Output::boolean, std::uint8_t, T>;
    static_assert(std::is_same_v<OutOf<Op, T>, Expected>,
                  "primitives.def: the kernel functor's scalar() does not return the output "
                  "column's type");
    return true;
  }
}

template <class Arch, Prim P, class Op>
struct UnaryEntries {
  template <class T>
  struct Entry {
    static constexpr UnaryRowFn value = [] {
      if constexpr (has_row_kernel<P, Op, T>())
        return &unary_row<Arch, Op, T>;
      else
        return UnaryRowFn{nullptr};
    }();
  };
};

template <class Arch, Prim P, class Op>
struct BinaryEntries {
  template <class T>
  struct Entry {
    static constexpr BinaryRowFn value = [] {
      if constexpr (has_row_kernel<P, Op, T>())
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
    static constexpr UnaryRowFn value = [] {
      if constexpr (is_narrow_v<From> || is_narrow_v<To>)
        return &narrow_cast_row<From, To>;  // one baseline-compiled loop (kernels/cast_narrow.cpp)
      else
        return &cast_row<Arch, From, To>;
    }();
  };
};

template <class Arch, Prim P, class Op>
constexpr void set_unary(ElementwiseRowTable& table) {
  fill_by_dtype<UnaryEntries<Arch, P, Op>::template Entry>(table.unary[unary_row_index(P)]);
}
template <class Arch, Prim P, class Op>
constexpr void set_binary(ElementwiseRowTable& table) {
  fill_by_dtype<BinaryEntries<Arch, P, Op>::template Entry>(table.binary[binary_row_index(P)]);
}

template <class Arch>
constexpr ElementwiseRowTable make_row_table(const char* isa_name) {
  ElementwiseRowTable t;
  t.isa_name = isa_name;
  // The row of every KILN_UNARY and KILN_BINARY primitive, from its kernel column.
#define KILN_UNARY(name, accepts, output, kernel, label, grad) \
  set_unary<Arch, Prim::name, kernel>(t);
#define KILN_BINARY(name, accepts, output, kernel, label, grad) \
  set_binary<Arch, Prim::name, kernel>(t);
#include "primitives/primitives.def"

  // Rows by stored element (a bool's 0 or 1 converts as the integer would), columns by dtype.
  fill_by_cast_target<CastEntries<Arch, float>::template Entry>(t.cast[dtype_index(DType::f32)]);
  fill_by_cast_target<CastEntries<Arch, double>::template Entry>(t.cast[dtype_index(DType::f64)]);
  fill_by_cast_target<CastEntries<Arch, std::int32_t>::template Entry>(
      t.cast[dtype_index(DType::i32)]);
  fill_by_cast_target<CastEntries<Arch, std::int64_t>::template Entry>(
      t.cast[dtype_index(DType::i64)]);
  fill_by_cast_target<CastEntries<Arch, std::uint8_t>::template Entry>(
      t.cast[dtype_index(DType::boolean)]);
  fill_by_cast_target<CastEntries<Arch, std::int8_t>::template Entry>(
      t.cast[dtype_index(DType::i8)]);
  fill_by_cast_target<CastEntries<Arch, std::uint8_t>::template Entry>(
      t.cast[dtype_index(DType::u8)]);
  fill_by_cast_target<CastEntries<Arch, float16>::template Entry>(t.cast[dtype_index(DType::f16)]);
  fill_by_cast_target<CastEntries<Arch, bfloat16>::template Entry>(
      t.cast[dtype_index(DType::bf16)]);
  fill_by_cast_target<CastEntries<Arch, std::int16_t>::template Entry>(
      t.cast[dtype_index(DType::i16)]);
  fill_by_cast_target<CastEntries<Arch, std::uint16_t>::template Entry>(
      t.cast[dtype_index(DType::u16)]);
  fill_by_cast_target<CastEntries<Arch, std::uint32_t>::template Entry>(
      t.cast[dtype_index(DType::u32)]);
  fill_by_cast_target<CastEntries<Arch, std::uint64_t>::template Entry>(
      t.cast[dtype_index(DType::u64)]);
  fill_by_cast_target<CastEntries<Arch, float8_e4m3fn>::template Entry>(
      t.cast[dtype_index(DType::f8e4m3fn)]);
  fill_by_cast_target<CastEntries<Arch, float8_e4m3fnuz>::template Entry>(
      t.cast[dtype_index(DType::f8e4m3fnuz)]);
  fill_by_cast_target<CastEntries<Arch, float8_e5m2>::template Entry>(
      t.cast[dtype_index(DType::f8e5m2)]);
  fill_by_cast_target<CastEntries<Arch, float8_e5m2fnuz>::template Entry>(
      t.cast[dtype_index(DType::f8e5m2fnuz)]);
  fill_by_cast_target<CastEntries<Arch, float4_e2m1fn>::template Entry>(
      t.cast[dtype_index(DType::f4e2m1fn)]);
  fill_by_cast_target<CastEntries<Arch, int4>::template Entry>(t.cast[dtype_index(DType::i4)]);
  fill_by_cast_target<CastEntries<Arch, uint4>::template Entry>(t.cast[dtype_index(DType::u4)]);
  fill_by_cast_target<CastEntries<Arch, int2>::template Entry>(t.cast[dtype_index(DType::i2)]);
  fill_by_cast_target<CastEntries<Arch, uint2>::template Entry>(t.cast[dtype_index(DType::u2)]);

  // where moves elements: one row per element size serves every dtype of that size.
  t.where[dtype_index(DType::f32)] = &where_row<Arch, std::uint32_t>;
  t.where[dtype_index(DType::f64)] = &where_row<Arch, std::uint64_t>;
  t.where[dtype_index(DType::i32)] = &where_row<Arch, std::uint32_t>;
  t.where[dtype_index(DType::i64)] = &where_row<Arch, std::uint64_t>;
  t.where[dtype_index(DType::boolean)] = &where_row<Arch, std::uint8_t>;
  t.where[dtype_index(DType::i8)] = &where_row<Arch, std::uint8_t>;
  t.where[dtype_index(DType::u8)] = &where_row<Arch, std::uint8_t>;
  t.where[dtype_index(DType::f16)] = &where_row<Arch, std::uint16_t>;
  t.where[dtype_index(DType::bf16)] = &where_row<Arch, std::uint16_t>;
  t.where[dtype_index(DType::i16)] = &where_row<Arch, std::uint16_t>;
  t.where[dtype_index(DType::u16)] = &where_row<Arch, std::uint16_t>;
  t.where[dtype_index(DType::u32)] = &where_row<Arch, std::uint32_t>;
  t.where[dtype_index(DType::u64)] = &where_row<Arch, std::uint64_t>;
  constexpr DType one_byte[] = {DType::f8e4m3fn,   DType::f8e4m3fnuz, DType::f8e5m2,
                                DType::f8e5m2fnuz, DType::f4e2m1fn,   DType::i4,
                                DType::u4,         DType::i2,         DType::u2};
  for (const DType d : one_byte) t.where[dtype_index(d)] = &where_row<Arch, std::uint8_t>;
  t.copy_rows = &copy_rows<Arch>;
  t.stream_copy = &stream_copy<Arch>;
  t.softmax_row[dtype_index(DType::f32)] = &softmax_row<Arch, float>;
  t.softmax_row[dtype_index(DType::f64)] = &softmax_row<Arch, double>;
  t.log_softmax_row[dtype_index(DType::f32)] = &log_softmax_row<Arch, float>;
  t.log_softmax_row[dtype_index(DType::f64)] = &log_softmax_row<Arch, double>;
  t.logsumexp_rows[dtype_index(DType::f32)] = &logsumexp_rows<Arch, float>;
  t.logsumexp_rows[dtype_index(DType::f64)] = &logsumexp_rows<Arch, double>;
  t.layer_norm_row[dtype_index(DType::f32)] = &normalize_row<Arch, float, true>;
  t.layer_norm_row[dtype_index(DType::f64)] = &normalize_row<Arch, double, true>;
  t.rms_norm_row[dtype_index(DType::f32)] = &normalize_row<Arch, float, false>;
  t.rms_norm_row[dtype_index(DType::f64)] = &normalize_row<Arch, double, false>;
  t.sum_rows[dtype_index(DType::f32)] = &sum_rows<Arch, float>;
  t.sum_rows[dtype_index(DType::f64)] = &sum_rows<Arch, double>;
  fill_arg_extremum_rows<Arch, float>(t.arg_extremum_row[dtype_index(DType::f32)]);
  fill_arg_extremum_rows<Arch, double>(t.arg_extremum_row[dtype_index(DType::f64)]);
  fill_arg_extremum_rows<Arch, std::int32_t>(t.arg_extremum_row[dtype_index(DType::i32)]);
  fill_arg_extremum_rows<Arch, std::int64_t>(t.arg_extremum_row[dtype_index(DType::i64)]);
  fill_arg_extremum_rows<Arch, std::uint64_t>(t.arg_extremum_row[dtype_index(DType::u64)]);
  t.gate_panel[dtype_index(DType::f32)] = &gate_panel<Arch, float>;
  t.gate_panel[dtype_index(DType::f64)] = &gate_panel<Arch, double>;
  t.gate_panel_width[dtype_index(DType::f32)] = 2 * xsimd::batch<float, Arch>::size;
  t.gate_panel_width[dtype_index(DType::f64)] = 2 * xsimd::batch<double, Arch>::size;
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>) {
    t.lstm_panel[dtype_index(DType::f32)] = &lstm_panel<Arch, float>;
    t.lstm_panel[dtype_index(DType::f64)] = &lstm_panel<Arch, double>;
    t.lstm_panel_units[dtype_index(DType::f32)] = xsimd::batch<float, Arch>::size;
    t.lstm_panel_units[dtype_index(DType::f64)] = xsimd::batch<double, Arch>::size;
  }
  t.lstm_cell[dtype_index(DType::f32)] = &lstm_cell<Arch, float>;
  t.lstm_cell[dtype_index(DType::f64)] = &lstm_cell<Arch, double>;
  t.gru_cell[dtype_index(DType::f32)] = &gru_cell<Arch, float>;
  t.gru_cell[dtype_index(DType::f64)] = &gru_cell<Arch, double>;
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

#pragma once
// The interface between dispatch (or a compiled plan) and kernels. Kernels see raw
// strided arrays, never Tensor handles, so a plan can call them on arena buffers.

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "primitives/primitive.hpp"

namespace kiln {
class Tensor;
}

namespace kiln::detail {

/// A strided n-d array in memory: data points at element [0, 0, ...]; strides in elements.
struct ArrayRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Shape strides;

  std::int64_t numel() const { return shape.numel(); }
  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

/// Attributes of a primitive application. Which fields a primitive reads is documented
/// next to its front end and kernel; unused fields stay default.
struct Attrs {
  Shape axes;                      // reduce: axes (normalized, sorted); transpose: permutation
  std::int64_t axis = 0;           // concat, gather
  bool keepdims = false;           // reduce
  DType dtype = DType::f32;        // cast: target dtype
  double value = 0.0;              // pad: fill value
  std::vector<std::int64_t> ints;  // slice: start,step per axis; pad: before,after per axis
};

/// Where Prim::layer_norm's and Prim::rms_norm's optional inputs are: x is input 0, then gamma
/// where attrs.ints[0] is set, then beta (layer_norm) where attrs.ints[1] is set; -1 for absent.
/// The one reading of that layout, for the kernel, the gradient and the ONNX writer.
struct NormalizeInputs {
  int gamma = -1, beta = -1;
};
inline NormalizeInputs normalize_inputs(const Attrs& attrs) {
  const auto flag = [&](std::size_t i) { return attrs.ints.size() > i && attrs.ints[i] != 0; };
  NormalizeInputs at;
  int next = 1;
  if (flag(0)) at.gamma = next++;
  if (flag(1)) at.beta = next;
  return at;
}

class Storage;
class KernelMemo;

/// One kernel invocation. `out` is contiguous and allocated with the output shape/dtype.
/// Elementwise families get inputs broadcast to out.shape (stride 0 on broadcast dims);
/// the other families get contiguous inputs with their own shapes.
struct KernelCall {
  Prim prim;
  std::span<const ArrayRef> inputs;
  const ArrayRef& out;
  const Attrs& attrs;
  /// A compiled plan's step of a primitive that keeps state between calls (keeps_memo): the
  /// node's memo, this call's alone while it runs; null when eager, or while another call has
  /// it.
  KernelMemo* memo = nullptr;
  /// With memo: per input, the buffer it lies in where its contents stay as they are while
  /// the buffer is held (a variable's value or a captured constant), else null.
  std::span<const std::shared_ptr<Storage>> fixed = {};
};

/// What a kernel keeps between the calls of one graph node's compiled steps (a node of a
/// concrete function has one memo, shared by its plans for every set of dynamic sizes): state
/// derived from inputs whose contents cannot change while their buffers are held, such as
/// weights laid out for the kernel's tiles (lstm_sequence's packed panels). kiln writes a
/// variable's buffer in place only while nothing but the variable holds it (the in-place
/// optimizer updates and row updates check that), so state kept with its inputs' buffers held
/// stays right: a variable written since has a new buffer, or was written in a copy.
class KernelMemo {
 public:
  /// A kernel's kept state.
  struct State {
    virtual ~State() = default;
  };
  KernelMemo() = default;
  ~KernelMemo();
  KernelMemo(const KernelMemo&) = delete;
  KernelMemo& operator=(const KernelMemo&) = delete;

  /// Whether each of call's inputs `inputs` has a fixed buffer (KernelCall::fixed).
  static bool all_fixed(const KernelCall& call, std::span<const int> inputs);
  /// The state kept from exactly `inputs` of call (the same buffers, at the same addresses),
  /// else null.
  [[nodiscard]] State* find(const KernelCall& call, std::span<const int> inputs) const;
  /// Keeps `state`, derived from `inputs` of call (all_fixed), holding their buffers, in place
  /// of what was kept.
  void keep(const KernelCall& call, std::span<const int> inputs, std::unique_ptr<State> state);
  /// Counts `bytes` more of the kept state in memory_stats(), as a cached function's bytes,
  /// until it is let go of.
  void count(std::int64_t bytes);
  /// Lets go of the kept state and the buffers it holds.
  void clear();

  std::mutex mutex;  // held by the call that has the memo (try_lock: others go without)

 private:
  std::vector<std::shared_ptr<Storage>> buffers_;
  std::vector<const void*> addresses_;
  std::unique_ptr<State> state_;
  std::int64_t bytes_ = 0;
};

/// Whether primitive p's kernel keeps a KernelMemo in compiled plans.
bool keeps_memo(Prim p);

/// The KernelMemo of each node of a graph that has one, made when a plan of the graph first
/// asks for it.
class KernelMemos {
 public:
  std::shared_ptr<KernelMemo> of(std::int32_t node);

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<KernelMemo>> memos_;
};

using KernelFn = void (*)(const KernelCall&);

/// Whether an element is NaN (never, for a type that is not floating point).
template <class T>
constexpr bool is_nan_element(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

/// The kernel of each family (defined by the kernel translation units).
void run_unary(const KernelCall& call);
void run_binary(const KernelCall& call);
void run_ternary(const KernelCall& call);
void run_reduce(const KernelCall& call);
/// argmax and argmin (kernels/arg_extremum.cpp), called by run_reduce.
void run_arg_extremum(const KernelCall& call);
void run_movement(const KernelCall& call);
void run_indexing(const KernelCall& call);
void run_window(const KernelCall& call);
void run_linalg(const KernelCall& call);
void run_recurrent(const KernelCall& call);
void run_random(const KernelCall& call);
void run_rows(const KernelCall& call);
void run_collective(const KernelCall& call);

/// Kernel of primitive p.
KernelFn kernel_for(Prim p);

/// Elementwise work below this many output elements may run as one flat row-kernel call (see
/// kernels/lowering.hpp).
inline constexpr std::int64_t flat_elementwise_limit = std::int64_t{1} << 18;

/// The row kernel of elementwise primitive p for input dtype in_dtype (out_dtype matters only
/// for cast), for this process's instruction set: a UnaryRowFn, BinaryRowFn or WhereRowFn of
/// kernels/elementwise_table.hpp by p's arity, type-erased. Throws "[p] no kernel for dtype .."
/// when p does not accept in_dtype.
using RowKernel = void (*)();
RowKernel row_kernel(Prim p, DType in_dtype, DType out_dtype);

/// The instruction set libxsmm generates small matmul kernels for, as libxsmm names it
/// ("x86" when it generates none); initializes libxsmm. See simd_level().
const char* matmul_jit_target();

/// Whether the matmul kernel reads input `which` (0: a, 1: b) in this non-contiguous layout
/// directly: a 2-d f32/f64 matrix whose rows are apart by more than their length (a slice of
/// a wider matrix), or the transpose of such a matrix (strides [1, ld]): always for a, for b
/// when it has at least 2^16 elements (kernels/gemm.hpp: only the libraries read a transposed
/// b). Other layouts must be made contiguous by the caller.
bool matmul_reads_in_place(const ArrayRef& x, int which);

/// Whether reduction p (reduce_sum, _prod, _max, _min, _all, _any) with attrs reads the
/// non-contiguous input x directly: rows of contiguous elements a fixed stride apart (x's
/// innermost dims contiguous, its outer ones row-major over that stride), reduced over every
/// row or over every column. Other layouts must be made contiguous by the caller.
bool reduce_reads_in_place(Prim p, const ArrayRef& x, const Attrs& attrs);

/// A matmul's kernel chosen once for fixed operand layouts (shapes, strides, dtype): the
/// libxsmm kernel or BLAS call and the walk over batch matrices. Compiled plans keep one per
/// matmul step, so a call does no kernel lookup.
struct MatmulPlan;
/// Null when nothing needs planning (an empty product, k == 0) or the dtype is an integer one;
/// the caller then runs run_linalg. With `accumulate` the product is added to what `out`
/// holds (GEMM beta = 1: a plan's matmul epilogue, see lib/jit/plan_epilogues.cpp). A `scaled`
/// product is multiplied by an alpha given per call (run on oneDNN or OpenBLAS, which take one).
std::shared_ptr<const MatmulPlan> plan_matmul(const ArrayRef& a, const ArrayRef& b,
                                              const ArrayRef& out, bool accumulate = false,
                                              bool scaled = false);
/// Whether the planned product runs on oneDNN or OpenBLAS, not on libxsmm's kernels.
bool planned_on_library(const MatmulPlan& plan);
/// Runs the planned product on operands laid out as planned: out (+)= alpha a b, alpha other
/// than 1 only for a product planned `scaled`.
void run_planned_matmul(const MatmulPlan& plan, const void* a, const void* b, void* out,
                        double alpha = 1);

/// Row-major out[rows, cols] (contiguous) = element (i, j) read at in[i + j * in_stride]: the
/// copy of a transposed matrix, through libxsmm's transposition kernels.
void transpose_matrix(void* out, const void* in, std::size_t element_size, std::int64_t rows,
                      std::int64_t cols, std::int64_t in_stride);

/// Copies src (any strides) into dst (any strides) of the same shape and dtype.
void copy_strided(const ArrayRef& src, const ArrayRef& dst);

/// The strided array behind an eager tensor.
ArrayRef array_ref(const Tensor& t);

}  // namespace kiln::detail

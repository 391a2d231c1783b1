#pragma once
/// @file ops.hpp
/// Eager ops (the same functions record graph nodes while tracing).
///
/// Conventions shared by every op:
/// - Tensor-tensor ops need equal dtypes; a C++ scalar operand takes the tensor's dtype.
/// - Elementwise ops broadcast like NumPy.
/// - Negative axes count from the end.
/// - Bad arguments throw kiln::Error whose message starts with the op name: "[matmul] ...".

#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/creation.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

// ---------------------------------------------------------------- unary elementwise
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
/// -1, 0 or 1 (NaN stays NaN).
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
/// 1 / sqrt(x).
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
/// 1 / (1 + exp(-x)), computed without overflow.
Tensor sigmoid(const Tensor& x);
/// max(x, 0).
Tensor relu(const Tensor& x);
/// log(1 + exp(x)), computed without overflow.
Tensor softplus(const Tensor& x);
/// The Gauss error function (2 / sqrt(pi)) * integral of exp(-t^2) from 0 to x, as in the exact
/// GELU x * (1 + erf(x / sqrt(2))) / 2.
Tensor erf(const Tensor& x);
/// exp(x) - 1, accurate for small x.
Tensor expm1(const Tensor& x);
/// Trigonometric and hyperbolic functions and their inverses (the C library's, per element).
/// Outside an inverse's domain (|x| > 1 for asin, acos and atanh; x < 1 for acosh) the result
/// is NaN; atanh(+-1) is +-inf.
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
/// Rounds half to even, like NumPy.
Tensor round(const Tensor& x);
/// Boolean result: true where x is zero/false.
Tensor logical_not(const Tensor& x);
/// Boolean result (false for integer dtypes).
Tensor isnan(const Tensor& x);
/// Boolean result (true for integer dtypes).
Tensor isfinite(const Tensor& x);
/// Converts to dtype. Float → integer truncates toward zero; NaN becomes 0 and values
/// out of range saturate. Anything → bool is x != 0.
Tensor cast(const Tensor& x, DType dtype);
/// The same bytes read as dtype (NumPy's view, tf.bitcast, ONNX BitCast): the two dtypes must
/// have the same size. bool may be read as u8 but nothing as bool, and the 4- and 2-bit dtypes
/// (stored one value per byte) are refused: use cast. Not differentiable.
Tensor bitcast(const Tensor& x, DType dtype);

// ---------------------------------------------------------------- binary elementwise
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
/// True division for floats; floor division for integers (x / 0 is 0 for integers).
Tensor div(const Tensor& a, const Tensor& b);
/// a ** b. For integers b < 0 gives 0 unless |a| == 1.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
/// Remainder with the sign of the divisor (NumPy/Python `%`); x mod 0 is 0 for integers.
Tensor mod(const Tensor& a, const Tensor& b);
/// The remainder of division rounded toward zero, with the sign of a (C's fmod and %, NumPy's
/// fmod, ONNX Mod with fmod = 1); x fmod 0 is 0 for integers, NaN for floats.
Tensor fmod(const Tensor& a, const Tensor& b);
/// a / b rounded toward zero (C's integer division, ONNX Div on integers): trunc(a / b) for
/// floats; x / 0 is 0 for integers. fmod(a, b) == a - b * trunc_div(a, b).
Tensor trunc_div(const Tensor& a, const Tensor& b);
/// The angle of the point (x = b, y = a) in radians, in [-pi, pi] (atan2(a, b)).
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
/// Boolean results; nonzero inputs count as true (any dtype, both the same).
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
/// Bitwise and, or, xor of the two's complement bits of integer tensors, and the
/// bitwise complement (~x, which is -x - 1).
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& x);
/// a shifted left or right by b bits (integer tensors). Right shifts of signed integers are
/// arithmetic. A count outside [0, bits of the dtype) gives 0 (a right shift of a negative a:
/// -1). On narrow dtypes the result is the narrow type's (u8 200 << 1 is 144).
Tensor left_shift(const Tensor& a, const Tensor& b);
Tensor right_shift(const Tensor& a, const Tensor& b);

/// Elementwise choice: cond (boolean) ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// min(max(x, lo), hi); lo <= hi.
Tensor clip(const Tensor& x, double lo, double hi);

// ---------------------------------------------------------------- reductions
/// Reductions over `axes` (every axis when omitted; an empty list reduces none).
/// keepdims keeps reduced axes with size 1. Repeated axes are an error.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
/// max/min of an empty set is an error.
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
Tensor min(const Tensor& x);
Tensor min(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
/// log(sum(exp(x))) computed stably (max subtracted first).
Tensor logsumexp(const Tensor& x);
Tensor logsumexp(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
/// Boolean results; nonzero counts as true.
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, const std::vector<std::int64_t>& axes, bool keepdims = false);
/// Index (i64) of the first maximum/minimum along `axis` (of the last one with last_index, as
/// ONNX's select_last_index); without an axis, of the flattened tensor. NaN counts as the
/// maximum and the minimum (like NumPy).
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdims = false, bool last_index = false);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdims = false, bool last_index = false);

// ---------------------------------------------------------------- shape and data movement
/// New shape with the same number of elements; one dim may be -1 (inferred). No copy
/// when the data's layout allows it.
Tensor reshape(const Tensor& x, const Shape& shape);
/// Reverses the axes.
Tensor transpose(const Tensor& x);
/// Permutes the axes: result axis i is x's axis perm[i].
Tensor transpose(const Tensor& x, const std::vector<std::int64_t>& perm);
/// Inserts a size-1 axis at `axis` (in [-(rank+1), rank]).
Tensor expand_dims(const Tensor& x, std::int64_t axis);
/// Removes every size-1 axis, or the listed ones (each must have size 1).
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, const std::vector<std::int64_t>& axes);
/// Broadcasts x to `shape` (NumPy rules) without copying.
Tensor broadcast_to(const Tensor& x, const Shape& shape);
/// Joins tensors of equal dtype and equal shape except along `axis`.
Tensor concat(const std::vector<Tensor>& xs, std::int64_t axis = 0);
/// Joins tensors of equal shape along a new axis.
Tensor stack(const std::vector<Tensor>& xs, std::int64_t axis = 0);
/// Splits along `axis` into its slices, removing that axis.
std::vector<Tensor> unstack(const Tensor& x, std::int64_t axis = 0);
/// Splits along `axis` into `sections` equal parts (the size must divide evenly).
std::vector<Tensor> split(const Tensor& x, std::int64_t sections, std::int64_t axis = 0);
/// Splits along `axis` into parts of the given sizes (they must add up to the size).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes,
                          std::int64_t axis = 0);

/// One axis' range for slice(). `none` as start/stop means "from the beginning/to the
/// end" in the direction of step. Negative start/stop count from the end. After that,
/// start and stop must lie within the axis, else kiln::Error.
struct Slice {
  static constexpr std::int64_t none = std::numeric_limits<std::int64_t>::min();
  std::int64_t start = none;
  std::int64_t stop = none;
  std::int64_t step = 1;
};
/// Slices the leading axes with one Slice each; the remaining axes are kept whole.
Tensor slice(const Tensor& x, const std::vector<Slice>& slices);
/// Slices one axis.
Tensor slice(const Tensor& x, std::int64_t axis, std::int64_t start, std::int64_t stop,
             std::int64_t step = 1);
/// Picks entries along `axis` by integer (i32/i64) indices; the result has shape
/// x.shape[:axis] + indices.shape + x.shape[axis+1:]. Negative indices count from the
/// end; out-of-range indices are an error.
Tensor gather(const Tensor& x, const Tensor& indices, std::int64_t axis = 0);
/// indices.shape + [depth], 1 where the last index equals the entry (out-of-range
/// indices give an all-zero row, like TensorFlow).
Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype = f32);
/// Constant padding: widths[i] = {before, after} for axis i (every axis listed).
Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths,
           double value = 0.0);
/// How pad() fills the new elements (NumPy's np.pad modes; ONNX Pad's modes).
enum class PadMode {
  constant,  ///< `value` (NumPy "constant", ONNX "constant").
  reflect,   ///< Mirrored without repeating the edge: [1,2,3] -> [3,2,1,2,3,2,1] for widths
             ///< (2, 2) (NumPy "reflect", ONNX "reflect", PyTorch "reflect"); a width must be
             ///< at most size - 1.
  edge,      ///< The edge element repeated (NumPy "edge", ONNX "edge", PyTorch "replicate");
             ///< a padded axis must not be empty.
  wrap,      ///< Periodic: the other end of the axis continues (NumPy "wrap", ONNX "wrap",
             ///< PyTorch "circular"); a width must be at most the size.
};
/// Padding in `mode`: widths[i] = {before, after} for axis i (every axis listed). Axes are
/// padded one after the other, first to last, so corners follow NumPy. `value` is used only by
/// PadMode::constant (which is pad(x, widths, value)). Any dtype.
Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths,
           PadMode mode, double value = 0.0);
/// Repeats x reps[i] times along axis i (reps has one entry per axis).
Tensor tile(const Tensor& x, const std::vector<std::int64_t>& reps);

// ---------------------------------------------------------------- scans, sorting and indexing
// Index arguments are i32 or i64 tensors. Negative indices count from the end of their axis;
// an index outside its axis is an error when the op runs ("[take_along_axis] index 7 is out of
// range for axis 1 of size 3").

/// Running sum along `axis`: element i is x[0] + ... + x[i] (NumPy cumsum, torch.cumsum,
/// tf.math.cumsum). exclusive: x[0] + ... + x[i-1] (0 first); reverse: summed from the end.
/// Numeric dtypes; floats add in order along the axis.
Tensor cumsum(const Tensor& x, std::int64_t axis, bool exclusive = false, bool reverse = false);
/// Running product along `axis`, with the same options as cumsum (1 first when exclusive). Its
/// gradient is exact where x has zeros.
Tensor cumprod(const Tensor& x, std::int64_t axis, bool exclusive = false, bool reverse = false);
/// The positions (i64) that sort x along `axis`: ascending with NaN after every number, or
/// descending with NaN first. Stable: equal elements keep their order.
Tensor argsort(const Tensor& x, std::int64_t axis = -1, bool descending = false);
/// x sorted along `axis` (as argsort orders it).
Tensor sort(const Tensor& x, std::int64_t axis = -1, bool descending = false);
/// The k largest elements along `axis` (or the k smallest), sorted, and their positions (i64).
/// Ties go to the lower position; NaN counts as the largest (ONNX TopK, tf.math.top_k,
/// torch.topk).
struct TopK {
  Tensor values;
  Tensor indices;
};
TopK top_k(const Tensor& x, std::int64_t k, std::int64_t axis = -1, bool largest = true);
/// out[.., j, ..] = x[.., indices[.., j, ..], ..] along `axis` (NumPy take_along_axis, ONNX
/// GatherElements, torch.gather on equal shapes). indices has x's rank; along the other axes
/// x and indices broadcast (NumPy rules), and the result has the broadcast shape with
/// indices' size along `axis`.
Tensor take_along_axis(const Tensor& x, const Tensor& indices, std::int64_t axis);
/// How scatter and scatter_nd combine an update with the element it lands on (ONNX's
/// reduction attribute: none, add, mul, max, min). NaN wins maximum and minimum.
enum class ScatterMode : std::uint8_t { assign, add, multiply, maximum, minimum };
/// x with each updates[p] combined into x[p with its `axis` coordinate replaced by
/// indices[p]] (ONNX ScatterElements, torch.scatter / scatter_reduce). indices and updates have
/// the same shape, of x's rank and at most x's size along the other axes. Where indices repeat,
/// assign keeps the last update (row-major order) and the other modes combine them all. The
/// gradient exists for assign and add.
Tensor scatter(const Tensor& x, const Tensor& indices, const Tensor& updates, std::int64_t axis,
               ScatterMode mode = ScatterMode::assign);
/// scatter(x, indices, updates, axis, ScatterMode::add).
Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates,
                   std::int64_t axis);
/// Slices of x picked by coordinate tuples (tf.gather_nd, ONNX GatherND): indices has shape
/// [..., m]; each last-axis row (i0, .., im-1) picks x[i0, .., im-1] (a slice of rank
/// rank(x) - m). The result has shape indices.shape[:-1] + x.shape[m:]. With batch_dims b,
/// the first b axes of x and indices are a batch (equal sizes) and tuples index within it.
Tensor gather_nd(const Tensor& x, const Tensor& indices, std::int64_t batch_dims = 0);
/// x with updates combined into the slices that gather_nd(x, indices) reads
/// (tf.tensor_scatter_nd_update / _add, ONNX ScatterND). updates has shape
/// indices.shape[:-1] + x.shape[m:]. Repeated tuples: as in scatter.
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates,
                  ScatterMode mode = ScatterMode::assign);

// ---------------------------------------------------------------- linear algebra and nn
/// Matrix product. 2-D: [m,k] x [k,n]. Higher ranks are batches of matrices whose batch
/// dims broadcast; a 1-D operand is a vector (its dim is removed from the result).
Tensor matmul(const Tensor& a, const Tensor& b);
/// exp(x) / sum(exp(x)) along axis, computed stably.
Tensor softmax(const Tensor& x, std::int64_t axis = -1);
/// x - logsumexp(x) along axis.
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1);
/// Elementwise binary cross-entropy of sigmoid(logits) against labels in [0, 1], computed
/// stably from the logits as softplus(x) - x * z. Shapes broadcast.
Tensor sigmoid_cross_entropy(const Tensor& logits, const Tensor& labels);

// ---------------------------------------------------------------- activations
// Floating inputs only. Each is a composite of the ops above, so its gradient follows from
// theirs and a traced function fuses it with its neighbours.
/// GELU: x * (1 + erf(x / sqrt(2))) / 2. With approximate, the tanh form
/// x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) / 2 (PyTorch's approximate="tanh",
/// TensorFlow's approximate=True).
Tensor gelu(const Tensor& x, bool approximate = false);
/// SiLU, also called swish: x * sigmoid(x).
Tensor silu(const Tensor& x);
/// ELU: x where x > 0, else alpha * (exp(x) - 1).
Tensor elu(const Tensor& x, double alpha = 1.0);
/// SELU: scale * elu(x, alpha) with alpha = 1.6732632423543772 and scale = 1.0507009873554805
/// (Klambauer et al.'s constants, as every framework uses).
Tensor selu(const Tensor& x);
/// x where x > 0, else alpha * x (alpha 0.01 as in PyTorch and ONNX; Keras uses 0.2 or 0.3).
Tensor leaky_relu(const Tensor& x, double alpha = 0.01);
/// clip(alpha * x + beta, 0, 1): ONNX HardSigmoid's and Keras 2's defaults (PyTorch's
/// hardsigmoid is alpha = 1/6, beta = 0.5).
Tensor hard_sigmoid(const Tensor& x, double alpha = 0.2, double beta = 0.5);
/// x / (1 + |x|).
Tensor softsign(const Tensor& x);
/// Mish: x * tanh(softplus(x)).
Tensor mish(const Tensor& x);

// ---------------------------------------------------------------- composite array ops
// Written with the ops above, so each has gradients, a traced form, fusion and ONNX export.

/// Einstein summation, as numpy.einsum / torch.einsum. `equation` names the axes of each
/// operand with letters (a-z, A-Z; spaces are ignored), operands separated by commas, then
/// optionally "->" and the output's labels. "..." stands for the broadcast dims in the same
/// place of every operand (right-aligned, like NumPy broadcasting). Without "->" the output is
/// the ellipsis dims followed by the labels that appear exactly once, in ASCII order (upper case
/// before lower case). A label repeated within one operand takes its diagonal ("ii->i", and
/// "ii" is the trace); labels missing from the output are summed. Dims of size 1 broadcast
/// against the label's size elsewhere. Two operands contract through one batched matmul; more
/// are contracted left to right. All operands share one floating or integer dtype.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

/// The lower triangle of the last two axes: elements with column - row <= k, others zero
/// (numpy.tril, torch.tril, ONNX Trilu with upper = 0). k > 0 keeps diagonals above the main
/// one, k < 0 removes some below. Rank >= 2, any dtype.
Tensor tril(const Tensor& x, std::int64_t k = 0);
/// The upper triangle of the last two axes: elements with column - row >= k, others zero
/// (numpy.triu, torch.triu, ONNX Trilu with upper = 1). Rank >= 2, any dtype.
Tensor triu(const Tensor& x, std::int64_t k = 0);

/// resize()'s interpolation (ONNX Resize's `mode`).
enum class ResizeMode { nearest, linear };
/// How an output coordinate maps to an input one (ONNX Resize's
/// `coordinate_transformation_mode`), with scale = out_size / in_size along the axis:
/// - half_pixel:         (x + 0.5) / scale - 0.5
/// - pytorch_half_pixel: the same when out_size > 1, else 0
/// - align_corners:      x * (in_size - 1) / (out_size - 1), 0 when out_size == 1
/// - asymmetric:         x / scale
enum class CoordinateMode { half_pixel, pytorch_half_pixel, align_corners, asymmetric };
/// How nearest mode rounds the input coordinate (ONNX Resize's `nearest_mode`): the closest
/// integer with ties down or up, or floor, or ceil. The index is then clamped to the axis.
enum class NearestRounding { round_prefer_floor, round_prefer_ceil, floor, ceil };
/// resize()'s settings; the defaults are ONNX Resize's.
struct ResizeOptions {
  ResizeMode mode = ResizeMode::nearest;
  CoordinateMode coordinates = CoordinateMode::half_pixel;
  NearestRounding nearest = NearestRounding::round_prefer_floor;
};
/// Resizes x to out_shape (one entry per axis; every axis whose size changes is resized) like
/// ONNX Resize with `sizes` given (cubic mode, antialias, exclude_outside and extrapolation are
/// not offered). nearest picks one input element per output element; linear interpolates the
/// two neighbours of the mapped coordinate along each resized axis in turn (separable n-linear,
/// the neighbours clamped to the axis, as ONNX). Linear needs a floating dtype; nearest takes
/// any. Gradients flow to x through the gathers.
Tensor resize(const Tensor& x, const Shape& out_shape, const ResizeOptions& options = {});

// ---------------------------------------------------------------- operators
namespace detail {
template <class S>
concept Scalar = std::is_arithmetic_v<S>;
/// A rank-0 tensor holding v in like's dtype.
Tensor scalar_like(double v, const Tensor& like);
}  // namespace detail

Tensor operator-(const Tensor& x);
Tensor operator!(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator%(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);

#define KILN_SCALAR_OVERLOADS(fn)                                 \
  template <detail::Scalar S>                                     \
  Tensor fn(const Tensor& a, S b) {                               \
    return fn(a, detail::scalar_like(static_cast<double>(b), a)); \
  }                                                               \
  template <detail::Scalar S>                                     \
  Tensor fn(S a, const Tensor& b) {                               \
    return fn(detail::scalar_like(static_cast<double>(a), b), b); \
  }
KILN_SCALAR_OVERLOADS(add)
KILN_SCALAR_OVERLOADS(sub)
KILN_SCALAR_OVERLOADS(mul)
KILN_SCALAR_OVERLOADS(div)
KILN_SCALAR_OVERLOADS(pow)
KILN_SCALAR_OVERLOADS(maximum)
KILN_SCALAR_OVERLOADS(minimum)
KILN_SCALAR_OVERLOADS(mod)
KILN_SCALAR_OVERLOADS(equal)
KILN_SCALAR_OVERLOADS(not_equal)
KILN_SCALAR_OVERLOADS(less)
KILN_SCALAR_OVERLOADS(less_equal)
KILN_SCALAR_OVERLOADS(greater)
KILN_SCALAR_OVERLOADS(greater_equal)
KILN_SCALAR_OVERLOADS(operator+)
KILN_SCALAR_OVERLOADS(operator-)
KILN_SCALAR_OVERLOADS(operator*)
KILN_SCALAR_OVERLOADS(operator/)
KILN_SCALAR_OVERLOADS(operator%)
KILN_SCALAR_OVERLOADS(operator==)
KILN_SCALAR_OVERLOADS(operator!=)
KILN_SCALAR_OVERLOADS(operator<)
KILN_SCALAR_OVERLOADS(operator<=)
KILN_SCALAR_OVERLOADS(operator>)
KILN_SCALAR_OVERLOADS(operator>=)
#undef KILN_SCALAR_OVERLOADS

}  // namespace kiln

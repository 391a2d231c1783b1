// nn::sequence_mask and nn::Masking: composites of existing ops (arange, less, not_equal, any).
#include "kiln/nn/masking.hpp"

#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

namespace {
constexpr std::string_view sequence_mask_op = "nn.sequence_mask";
constexpr std::string_view masking_op = "nn.Masking";
}  // namespace

Tensor sequence_mask(const Tensor& lengths, std::int64_t max_time) {
  if (!lengths.defined()) detail::fail(sequence_mask_op, "the lengths are an undefined tensor");
  if ((lengths.dtype() != DType::i32 && lengths.dtype() != DType::i64) || lengths.ndim() != 1)
    detail::fail(sequence_mask_op, "the lengths must be an i32 or i64 [batch] vector, got {} {}",
                 dtype_name(lengths.dtype()), lengths.shape());
  if (max_time < 0) detail::fail(sequence_mask_op, "max_time must be >= 0, got {}", max_time);
  // [1, time] < [batch, 1]
  return less(expand_dims(arange(max_time, DType::i64), 0),
              expand_dims(cast(lengths, DType::i64), 1));
}

Masking::Masking(double mask_value, std::string name)
    : Layer("masking", std::move(name)), mask_value_(mask_value) {}

Tensor Masking::mask(const Tensor& x) const {
  if (!x.defined()) detail::fail(masking_op, "{}: the input is an undefined tensor", path());
  if (x.ndim() < 2 || x.dtype() == DType::boolean)
    detail::fail(masking_op,
                 "{}: needs a numeric input of rank >= 2 ([batch, time, features]), got {} {}",
                 path(), dtype_name(x.dtype()), x.shape());
  return any(not_equal(x, mask_value_), {-1});
}

Tensor Masking::operator()(const Tensor& x) {
  return x * cast(expand_dims(mask(x), -1), x.dtype());
}

}  // namespace kiln::nn

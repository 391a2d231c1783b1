// The conversions of kiln::float16, kiln::bfloat16 and kiln::minifloat (kiln/dtype.hpp), out of
// line so that one copy, compiled for the baseline instruction set, serves every caller; and the
// error of a compute kernel given a dtype it does not compute on (core/dtype_visit.hpp).

#include "kiln/dtype.hpp"
#include "core/dtype_visit.hpp"
#include "core/fail.hpp"
#include "core/half_bits.hpp"
#include "core/minifloat_bits.hpp"

namespace kiln {

float16::float16(float value) : bits(detail::f16_bits_from_float(value)) {}
float16::operator float() const { return detail::float_from_f16_bits(bits); }

bfloat16::bfloat16(float value) : bits(detail::bf16_bits_from_float(value)) {}
bfloat16::operator float() const { return detail::float_from_bf16_bits(bits); }

template <MinifloatFormat F>
minifloat<F>::minifloat(float value) : bits(detail::minifloat_bits_from_float<F>(value)) {}
template <MinifloatFormat F>
minifloat<F>::operator float() const {
  return detail::float_from_minifloat_bits<F>(bits);
}

template struct minifloat<MinifloatFormat::e4m3fn>;
template struct minifloat<MinifloatFormat::e4m3fnuz>;
template struct minifloat<MinifloatFormat::e5m2>;
template struct minifloat<MinifloatFormat::e5m2fnuz>;
template struct minifloat<MinifloatFormat::e2m1fn>;

}  // namespace kiln

namespace kiln::detail {

void fail_not_computed(DType dtype, const char* op) {
  fail(op, "has no kernel for {}; ops compute it in {} (kiln::compute_dtype)", dtype_name(dtype),
       dtype_name(compute_dtype(dtype)));
}

}  // namespace kiln::detail

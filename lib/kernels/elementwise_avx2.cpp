// Elementwise row kernels compiled for xsimd::fma3<xsimd::avx2> (see elementwise_arch.hpp).
#define KILN_ELEMENTWISE_ISA avx2
#include "kernels/elementwise_arch.hpp"

namespace kiln::detail {

template struct ElementwiseRows<xsimd::fma3<xsimd::avx2>>;

const ElementwiseRowTable& elementwise_rows_avx2() {
  return ElementwiseRows<xsimd::fma3<xsimd::avx2>>::table;
}

}  // namespace kiln::detail

// Elementwise row kernels compiled for xsimd::sse2 (see elementwise_arch.hpp).
#define KILN_ELEMENTWISE_ISA sse2
#include "kernels/elementwise_arch.hpp"

namespace kiln::detail {

template struct ElementwiseRows<xsimd::sse2>;

const ElementwiseRowTable& elementwise_rows_sse2() { return ElementwiseRows<xsimd::sse2>::table; }

}  // namespace kiln::detail

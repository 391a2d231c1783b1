// Elementwise row kernels compiled for xsimd::avx512f (see elementwise_arch.hpp).
// GCC 12's avx512fintrin.h warns about its own _mm512_undefined_* helpers (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define KILN_ELEMENTWISE_ISA avx512
#include "kernels/elementwise_arch.hpp"

namespace kiln::detail {

template struct ElementwiseRows<xsimd::avx512f>;

const ElementwiseRowTable& elementwise_rows_avx512() {
  return ElementwiseRows<xsimd::avx512f>::table;
}

}  // namespace kiln::detail

// The cast rows of the 8-, 4- and 2-bit dtypes (kernels/elementwise_table.hpp's
// narrow_cast_row): scalar loops over kernels/convert.hpp's rules, compiled once with the
// baseline flags and shared by every instruction set's row table. Their conversions are integer
// bit operations, the same on every instruction set; they are too rare to need SIMD copies.

#include <cstdint>

#include "kernels/convert.hpp"
#include "kernels/elementwise_table.hpp"

namespace kiln::detail {

template <class From, class To>
void narrow_cast_row(const void* in, std::int64_t in_stride, void* out, std::int64_t n) {
  static_assert(sizeof(From) == dtype_size(dtype_of<From>()) &&
                    sizeof(storage_t<To>) == dtype_size(dtype_of<To>()),
                "each element is stored as its dtype's C++ type (a narrow one in one byte)");
  const From* x = static_cast<const From*>(in);
  storage_t<To>* y = static_cast<storage_t<To>*>(out);
  if (in_stride == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = convert_element<To>(x[i]);
  } else {
    const storage_t<To> v = convert_element<To>(x[0]);
    for (std::int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

// Every pair with a narrow dtype on one side, each once: rows are the stored element types
// (a bool is read as its std::uint8_t, the u8 row), columns the dtype types (bool writes 0/1).
// The narrow list is written twice because a macro cannot expand inside its own expansion.
#define KILN_FOR_NARROW(X, A) \
  X(A, float8_e4m3fn)         \
  X(A, float8_e4m3fnuz)       \
  X(A, float8_e5m2)           \
  X(A, float8_e5m2fnuz)       \
  X(A, float4_e2m1fn)         \
  X(A, int4)                  \
  X(A, uint4)                 \
  X(A, int2)                  \
  X(A, uint2)
#define KILN_FOR_NARROW_INNER(X, A) \
  X(A, float8_e4m3fn)               \
  X(A, float8_e4m3fnuz)             \
  X(A, float8_e5m2)                 \
  X(A, float8_e5m2fnuz)             \
  X(A, float4_e2m1fn)               \
  X(A, int4)                        \
  X(A, uint4)                       \
  X(A, int2)                        \
  X(A, uint2)
#define KILN_FOR_WIDE_ROW(X, A) \
  X(A, float)                   \
  X(A, double)                  \
  X(A, std::int32_t)            \
  X(A, std::int64_t)            \
  X(A, std::int8_t)             \
  X(A, std::uint8_t)            \
  X(A, float16)                 \
  X(A, bfloat16)                \
  X(A, std::int16_t)            \
  X(A, std::uint16_t)           \
  X(A, std::uint32_t)           \
  X(A, std::uint64_t)
#define KILN_FOR_WIDE_COLUMN(X, A) KILN_FOR_WIDE_ROW(X, A) X(A, bool)

#define KILN_PAIR(From, To) \
  template void narrow_cast_row<From, To>(const void*, std::int64_t, void*, std::int64_t);
#define KILN_PAIR_REVERSED(To, From) KILN_PAIR(From, To)
#define KILN_WIDE_INTO(unused, To) KILN_FOR_WIDE_ROW(KILN_PAIR_REVERSED, To)
#define KILN_NARROW_FROM(unused, From) \
  KILN_FOR_NARROW_INNER(KILN_PAIR, From) KILN_FOR_WIDE_COLUMN(KILN_PAIR, From)

KILN_FOR_NARROW(KILN_WIDE_INTO, ~)
KILN_FOR_NARROW(KILN_NARROW_FROM, ~)

}  // namespace kiln::detail

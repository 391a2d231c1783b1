#pragma once
// The binary elementwise operations (one struct per primitive: scalar() and, for floating-point
// batches, simd()) for one xsimd architecture, the binary half of kernels/elementwise_ops_arch.hpp
// (whose helpers they use). Included only by elementwise_arch.hpp, after elementwise_ops_arch.hpp;
// the same one-definition rules apply (everything here is in an anonymous namespace, scalar math
// goes through __builtin_*).

#ifndef KILN_ELEMENTWISE_ISA
#error "include kernels/elementwise_arch.hpp, not kernels/elementwise_ops_binary_arch.hpp"
#endif

#include <cstdint>
#include <type_traits>

namespace kiln::detail {

namespace {

// ------------------------------------------------------------------ binary ops

struct NumericBinary {
  static constexpr bool has_simd = true;
};
struct ScalarNumericBinary {
  static constexpr bool has_simd = false;
};
struct PredicateBinary {
  static constexpr bool has_simd = false;
};

struct AddOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a + b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return wrap_add(a, b);
  }
};
struct SubOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a - b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return wrap_sub(a, b);
  }
};
struct MulOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a * b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return wrap_mul(a, b);
  }
};
struct DivOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return a / b;
  }
  template <class T>
  static T scalar(T a, T b) {
    return floor_div(a, b);
  }
};
/// libm's pow for floats: xsimd 8.1's pow gets zero, infinite and NaN operands wrong.
struct PowOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (std::is_same_v<T, float>)
      return __builtin_powf(a, b);
    else if constexpr (std::is_same_v<T, double>)
      return __builtin_pow(a, b);
    else
      return int_pow(a, b);
  }
};
/// NaN in either operand gives NaN (like numpy.maximum).
struct MaximumOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return xsimd::select((a >= b) | xsimd::isnan(a), a, b);
  }
  template <class T>
  static T scalar(T a, T b) {
    return a >= b ? a : b;
  }
};
struct MinimumOp : NumericBinary {
  template <class B>
  static B simd(const B& a, const B& b) {
    return xsimd::select((a <= b) | xsimd::isnan(a), a, b);
  }
  template <class T>
  static T scalar(T a, T b) {
    return a <= b ? a : b;
  }
};
struct ModOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (is_float_v<T>)
      return float_mod(a, b);
    else
      return floor_mod(a, b);
  }
};

/// The remainder of truncating division, with the sign of the dividend (C's fmod and %; ONNX
/// Mod with fmod = 1). For integers x fmod 0 is 0, and MIN fmod -1 is 0.
struct FmodOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (std::is_same_v<T, float>)
      return __builtin_fmodf(a, b);
    else if constexpr (std::is_same_v<T, double>)
      return __builtin_fmod(a, b);
    else if constexpr (std::is_unsigned_v<T>)
      return b == 0 ? 0 : a % b;
    else
      return b == 0 || b == -1 ? 0 : a % b;
  }
};
/// Division rounded toward zero (C's integer division). For integers x / 0 is 0 and MIN / -1
/// wraps to MIN; floats are trunc(a / b).
struct TruncDivOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (std::is_same_v<T, float>)
      return __builtin_truncf(a / b);
    else if constexpr (std::is_same_v<T, double>)
      return __builtin_trunc(a / b);
    else if (b == 0)
      return 0;
    else if constexpr (std::is_unsigned_v<T>)
      return a / b;
    else if (b == -1)
      return wrap_neg(a);
    else
      return a / b;
  }
};
/// The angle of the point (b, a) from the C library's atan2, in [-pi, pi].
struct Atan2Op : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if constexpr (std::is_same_v<T, float>)
      return __builtin_atan2f(a, b);
    else
      return __builtin_atan2(a, b);
  }
};

struct EqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a == b ? 1 : 0;
  }
};
struct NotEqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a != b ? 1 : 0;
  }
};
struct LessOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a < b ? 1 : 0;
  }
};
struct LessEqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a <= b ? 1 : 0;
  }
};
struct GreaterOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a > b ? 1 : 0;
  }
};
struct GreaterEqualOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a >= b ? 1 : 0;
  }
};
struct LogicalAndOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a != 0 && b != 0 ? 1 : 0;
  }
};
struct LogicalOrOp : PredicateBinary {
  template <class T>
  static std::uint8_t scalar(T a, T b) {
    return a != 0 || b != 0 ? 1 : 0;
  }
};
/// Bitwise ops on the two's complement bits of i32 and i64: Bits is std::bit_and<> and the
/// like.
template <class Bits>
struct BitwiseBinary : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    static_assert(std::is_integral_v<T>, "bitwise ops take integers only (primitives.def)");
    return static_cast<T>(Bits{}(a, b));
  }
};
using BitwiseAndOp = BitwiseBinary<std::bit_and<>>;
using BitwiseOrOp = BitwiseBinary<std::bit_or<>>;
using BitwiseXorOp = BitwiseBinary<std::bit_xor<>>;

/// Whether b is a shift count below T's width (and not negative).
template <class T>
bool shift_in_range(T b) {
  constexpr auto width = static_cast<T>(sizeof(T) * 8);
  if constexpr (std::is_signed_v<T>)
    return b >= 0 && b < width;
  else
    return b < width;
}
/// a << b on the two's complement bits; 0 when b is out of range.
struct LeftShiftOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return shift_in_range(b) ? static_cast<T>(static_cast<U>(a) << b) : T{0};
  }
};
/// a >> b, arithmetic for signed a; out of range b gives 0, or -1 for a negative a.
struct RightShiftOp : ScalarNumericBinary {
  template <class T>
  static T scalar(T a, T b) {
    if (shift_in_range(b)) return static_cast<T>(a >> b);
    if constexpr (std::is_signed_v<T>)
      return a < 0 ? T{-1} : T{0};
    else
      return T{0};
  }
};

}  // namespace

}  // namespace kiln::detail

#pragma once
// The primitive registry: the Prim enum and one descriptor per primitive, generated from
// primitives.def (which documents every column).

#include <array>
#include <cstdint>
#include <string_view>

#include "kiln/dtype.hpp"

namespace kiln::detail {

enum class Family : std::uint8_t {
  unary,
  binary,
  ternary,
  reduce,
  movement,
  indexing,
  window,
  linalg,
  recurrent,
  random,
  rows,
  collective
};

/// Which input dtypes an elementwise primitive accepts (`custom`: its front end decides).
enum class Accepts : std::uint8_t { floating, integer, numeric, any, custom };
/// An elementwise primitive's output dtype (`custom`: its front end decides).
enum class Output : std::uint8_t { same, boolean, custom };
/// How batch splitting treats a primitive (see primitives.def and jit/batch_split.cpp).
enum class SplitRule : std::uint8_t {
  elementwise,
  matmul,
  reduce,
  reshape,
  transpose,
  broadcast,
  slice,
  pad,
  concat,
  mixes_rows,
  never,
};

enum class Prim : std::uint16_t {
#define KILN_PRIMITIVE(name, arity, family, split, grad) name,
#include "primitives.def"
};

inline constexpr std::size_t num_primitives = 0
#define KILN_PRIMITIVE(name, arity, family, split, grad) +1
#include "primitives.def"
    ;

/// Everything kiln knows about a primitive apart from its kernel and gradient code.
struct PrimitiveInfo {
  std::string_view name;
  int arity;
  Family family;
  SplitRule split;
  bool differentiable;
  Accepts accepts = Accepts::custom;
  Output output = Output::custom;
  std::string_view label;   // the infix operator of graph listings ("+"), or ""
  bool row_kernel = false;  // a row in the row-kernel tables (KILN_UNARY and KILN_BINARY rows)
};

// The grad column read as "differentiable".
#define KILN_DIFFERENTIABLE_no_grad false
#define KILN_DIFFERENTIABLE_custom_grad true
#define KILN_DIFFERENTIABLE_grad(...) true

inline constexpr std::array<PrimitiveInfo, num_primitives> primitive_table{{
#define KILN_PRIMITIVE(name, arity, family, split, grad) \
  {#name,                                                \
   arity,                                                \
   Family::family,                                       \
   SplitRule::split,                                     \
   KILN_DIFFERENTIABLE_##grad,                           \
   Accepts::custom,                                      \
   Output::custom,                                       \
   "",                                                   \
   false},
#define KILN_UNARY(name, accepts, output, kernel, label, grad) \
  {#name,                                                      \
   1,                                                          \
   Family::unary,                                              \
   SplitRule::elementwise,                                     \
   KILN_DIFFERENTIABLE_##grad,                                 \
   Accepts::accepts,                                           \
   Output::output,                                             \
   label,                                                      \
   true},
#define KILN_BINARY(name, accepts, output, kernel, label, grad) \
  {#name,                                                       \
   2,                                                           \
   Family::binary,                                              \
   SplitRule::elementwise,                                      \
   KILN_DIFFERENTIABLE_##grad,                                  \
   Accepts::accepts,                                            \
   Output::output,                                              \
   label,                                                       \
   true},
#include "primitives.def"
}};

constexpr const PrimitiveInfo& info(Prim p) { return primitive_table[static_cast<std::size_t>(p)]; }
constexpr std::string_view name(Prim p) { return info(p).name; }
constexpr bool is_elementwise(Prim p) {
  Family f = info(p).family;
  return f == Family::unary || f == Family::binary || f == Family::ternary;
}

/// Whether p talks to other processes (collective_start, collective_wait): such a node is never
/// folded, merged with another, moved out of a loop or split, since every process must run the
/// same collectives in the same order, once per time the program reaches them.
constexpr bool is_collective(Prim p) { return info(p).family == Family::collective; }

/// Whether the row kernels of class `accepts` take dtype, one of the compute dtypes (kernels see
/// no other: the front ends check compute_dtype(x) against this, and dispatch computes the
/// others in it; see kiln::compute_dtype).
constexpr bool accepts_dtype(Accepts accepts, DType dtype) {
  switch (accepts) {
    case Accepts::floating:
      return dtype == DType::f32 || dtype == DType::f64;
    case Accepts::integer:
      return dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u64;
    case Accepts::numeric:
      return dtype != DType::boolean && compute_dtype(dtype) == dtype;
    case Accepts::any:
      return compute_dtype(dtype) == dtype;
    case Accepts::custom:
      return true;
  }
  return false;
}

}  // namespace kiln::detail

#pragma once
// The primitive registry: enum, names, arity and family, generated from primitives.def.

#include <array>
#include <cstdint>
#include <string_view>

namespace kiln::detail {

enum class Family : std::uint8_t { unary, binary, ternary, reduce, movement, linalg, random };

enum class Prim : std::uint16_t {
#define KILN_PRIMITIVE(name, arity, family) name,
#include "primitives.def"
#undef KILN_PRIMITIVE
};

inline constexpr std::size_t num_primitives = 0
#define KILN_PRIMITIVE(name, arity, family) +1
#include "primitives.def"
#undef KILN_PRIMITIVE
    ;

struct PrimitiveInfo {
  std::string_view name;
  int arity;
  Family family;
};

inline constexpr std::array<PrimitiveInfo, num_primitives> primitive_table{{
#define KILN_PRIMITIVE(name, arity, family) {#name, arity, Family::family},
#include "primitives.def"
#undef KILN_PRIMITIVE
}};

static_assert(primitive_table.size() == static_cast<std::size_t>(Prim::random_uniform) + 1,
              "primitives.def: table and enum disagree");

constexpr const PrimitiveInfo& info(Prim p) { return primitive_table[static_cast<std::size_t>(p)]; }
constexpr std::string_view name(Prim p) { return info(p).name; }
constexpr bool is_elementwise(Prim p) {
  Family f = info(p).family;
  return f == Family::unary || f == Family::binary || f == Family::ternary;
}

}  // namespace kiln::detail

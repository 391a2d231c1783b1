#pragma once
// The export file format shared by export_function (export_write.cpp) and load_function
// (export_read.cpp): names of node kinds, dtypes and primitives as the graph JSON spells them,
// and the checksum of the graph text.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "jit/graph.hpp"

namespace kiln::detail {

inline constexpr std::string_view function_format = "kiln.function";
// Metadata keys of the safetensors file.
inline constexpr const char* format_key = "kiln.format";
inline constexpr const char* version_key = "kiln.version";
inline constexpr const char* graph_key = "kiln.graph";
inline constexpr const char* checksum_key = "kiln.graph_checksum";

std::string_view kind_name(Node::Kind kind);
std::optional<Node::Kind> kind_named(std::string_view name);
std::optional<DType> dtype_named(std::string_view name);
std::optional<Prim> prim_named(std::string_view name);
/// FNV-1a (64 bits) of the graph text as 16 hex digits: catches a file edited or damaged
/// after it was written.
std::string graph_checksum(std::string_view text);

}  // namespace kiln::detail

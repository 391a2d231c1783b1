#pragma once
// Call signatures of kiln::function (the ArgPack of include/kiln/function.hpp is the packed
// form): what the cache lookup checks and keys on, and what its messages describe.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/function.hpp"

namespace kiln::detail {

/// "f32 [2,3]"
std::string shape_text(DType d, const Shape& s);

/// Throws when `args` do not match `o.input_signature` (when it is set).
void check_signature(const FunctionOptions& o, const ArgPack& args);

/// The cache key of a call whose signature has dynamic dims: each dynamic dim's size in the
/// key is replaced by a symbol; dynamic dims of equal size share one (their equality is part of
/// the signature, so ops that combine them trace correctly). Also returns, per symbol, where
/// its size is read from (tensor index, dim), when `sources` is given.
std::string relaxed_key(const ArgPack& args,
                        const std::vector<std::pair<std::uint32_t, std::uint32_t>>& dynamic_dims,
                        std::vector<std::pair<std::uint32_t, std::uint32_t>>* sources);

/// "argument 0: shape [32,5,10] dtype f32 -> shape [16,5,10] dtype f32; ..."
std::string describe_change(const std::vector<std::string>& before,
                            const std::vector<std::string>& now);

}  // namespace kiln::detail

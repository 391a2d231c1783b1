#pragma once
/// @file error.hpp
/// The one exception type kiln throws for bad input.

#include <stdexcept>
#include <string>

namespace kiln {

/// Thrown for every invalid argument, shape, dtype, file or state. The message starts
/// with the name of the op or subsystem in brackets, e.g.
/// `[matmul] inner dimensions differ: [32,10] x [20,80]`.
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message) : std::invalid_argument(message) {}
};

}  // namespace kiln

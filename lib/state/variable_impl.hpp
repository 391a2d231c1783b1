#pragma once
// The state behind kiln::Variable.

#include <atomic>
#include <mutex>
#include <string>

#include "kiln/variable.hpp"

namespace kiln::detail {

struct VariableImpl {
  std::uint64_t id = 0;
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::atomic<bool> trainable{true};
  mutable std::mutex mutex;  // guards value
  Tensor value;

  Tensor read() const {
    std::lock_guard lock(mutex);
    return value;
  }
  void write(Tensor t) {
    std::lock_guard lock(mutex);
    value = std::move(t);
  }
};

/// Checks that t may be assigned to v (defined, same dtype and shape) for op `op`.
void check_assignable(const VariableImpl& v, const Tensor& t, const char* op);

}  // namespace kiln::detail

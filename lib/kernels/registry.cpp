#include "kernels/kernel.hpp"

namespace kiln::detail {

KernelFn kernel_for(Prim p) {
  switch (info(p).family) {
    case Family::unary:
      return &run_unary;
    case Family::binary:
      return &run_binary;
    case Family::ternary:
      return &run_ternary;
    case Family::reduce:
      return &run_reduce;
    case Family::movement:
      return &run_movement;
    case Family::indexing:
      return &run_indexing;
    case Family::window:
      return &run_window;
    case Family::linalg:
      return &run_linalg;
    case Family::recurrent:
      return &run_recurrent;
    case Family::random:
      return &run_random;
    case Family::rows:
      return &run_rows;
    case Family::collective:
      return &run_collective;
  }
  return nullptr;
}

}  // namespace kiln::detail

#pragma once
// Central finite differences over the elements of f64 tensor arguments, for the gradient tests
// (the tape's gradients checked against them).

#include <cstddef>
#include <functional>
#include <vector>

#include <kiln/kiln.hpp>

namespace kiln::test {

/// d loss / d args[i][j] for every element j of args[i] (an f64 tensor), as
/// (loss(args with +eps at j) - loss(args with -eps at j)) / (2 eps).
inline std::vector<double> numeric_gradient(
    const std::function<double(const std::vector<Tensor>&)>& loss, const std::vector<Tensor>& args,
    std::size_t i, double eps = 1e-6) {
  const std::vector<double> values = args[i].to_vector<double>();
  std::vector<double> out(values.size());
  for (std::size_t j = 0; j < values.size(); ++j) {
    std::vector<Tensor> plus = args, minus = args;
    std::vector<double> vp = values, vm = values;
    vp[j] += eps;
    vm[j] -= eps;
    plus[i] = kiln::tensor(vp, args[i].shape());
    minus[i] = kiln::tensor(vm, args[i].shape());
    out[j] = (loss(plus) - loss(minus)) / (2 * eps);
  }
  return out;
}

}  // namespace kiln::test

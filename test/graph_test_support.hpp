#pragma once
// Helpers for tests that work on traced graphs directly (passes, plans).

#include <cmath>
#include <functional>
#include <vector>

#include <kiln/kiln.hpp>

#include "jit/graph.hpp"
#include "jit/trace.hpp"

namespace kiln::test {

/// Same shape, and every f32 element of a within tol * (1 + |b|) of b's.
inline bool close(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::abs(x[i] - y[i]) > tol * (1 + std::abs(y[i]))) return false;
  return true;
}

/// Records fn over f32 parameters of the given shapes into a graph, with no pass run.
inline detail::GraphData record(
    const std::vector<Shape>& shapes,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn) {
  detail::TraceContext trace("test", false);
  {
    detail::TraceScope scope(&trace);
    std::vector<Tensor> params;
    for (std::size_t i = 0; i < shapes.size(); ++i)
      params.push_back(trace.add_parameter(f32, shapes[i], static_cast<std::int32_t>(i)));
    for (const Tensor& out : fn(params)) trace.graph().outputs.push_back(trace.node_of(out, "out"));
  }
  return std::move(trace.graph());
}

}  // namespace kiln::test

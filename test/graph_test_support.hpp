#pragma once
// Helpers for tests that work on traced graphs directly (passes, plans).

#include <functional>
#include <vector>

#include <kiln/kiln.hpp>

#include "jit/graph.hpp"
#include "jit/trace.hpp"

namespace kiln::test {

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

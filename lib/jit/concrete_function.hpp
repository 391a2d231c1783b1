#pragma once
// What a ConcreteFunction holds: one traced signature's optimized graph and the Executables
// that run it (kiln::function's cache makes them; kiln::load_function makes them from a file).

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jit/executable.hpp"
#include "jit/graph.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

/// Behind a ConcreteFunction: one traced signature's optimized graph and its Executables by shape.
struct ConcreteFunctionImpl {
  std::shared_ptr<const GraphData> graph;
  Executable executable;  // static shapes; with dynamic dims, one per set of sizes in `bound`
  std::vector<std::size_t> vector_sizes;
  std::vector<std::string> descriptions;                       // of the arguments it was traced for
  std::vector<std::shared_ptr<VariableImpl>> owned_variables;  // created by its trace
  std::int64_t counted_bytes = 0;
  // Dynamic dims: where each symbol's size is read from (tensor index, dim), and the node
  // shapes for each set of sizes seen so far.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> symbol_sources;
  mutable std::mutex bound_mutex;
  mutable std::map<std::vector<std::int64_t>, std::shared_ptr<const Executable>> bound;
  mutable std::int64_t bound_bytes = 0;
  /// The executable for this call's sizes of the dynamic dims (built once per distinct sizes).
  std::shared_ptr<const Executable> executable_for(std::span<const Tensor* const> args) const;
  std::string key;   // the cache key it is stored under
  std::string name;  // the function's (FunctionOptions::name), for messages
  ~ConcreteFunctionImpl();
};

}  // namespace kiln::detail

// Executables (see executable.hpp): building the whole plan and the batch split of one set of
// shapes, and a call that picks between them.
#include "jit/executable.hpp"

#include <atomic>
#include <chrono>

#include "kernels/parallel.hpp"

namespace kiln::detail {

Executable build_executable(const GraphData& g, const std::vector<Shape>* shapes,
                            const std::vector<std::int64_t>* dim_values) {
  Executable e;
  e.split = plan_batch_split(g, shapes);
  e.plan = build_plan(g, shapes, dim_values);
  return e;
}

void run_executable(const Executable& e, const GraphData& g, std::span<const Tensor* const> args,
                    const std::string& function_name, std::vector<Tensor>& outputs) {
  if (!e.split) {
    run_plan(e.plan, g, args, function_name, outputs);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const std::int64_t estimate = e.split->call_ns.load(std::memory_order_relaxed);
  // Each half takes about half a whole call, or about a whole split call: the smaller guess.
  if (pair_helper_ready(estimate / 2))
    run_batch_split(*e.split, g, args, function_name, outputs);
  else
    run_plan(e.plan, g, args, function_name, outputs);
  const std::int64_t took = std::chrono::nanoseconds(Clock::now() - start).count();
  e.split->call_ns.store(
      estimate == 0 || took < estimate ? took : estimate + (took - estimate) / 16,
      std::memory_order_relaxed);
}

}  // namespace kiln::detail

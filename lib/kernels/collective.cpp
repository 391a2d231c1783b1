// Kernels of the collective primitives: they hand the work to kiln::distributed's engine.
#include "kernels/collective.hpp"

#include <atomic>

#include "core/fail.hpp"

namespace kiln::detail {

namespace {
std::atomic<CollectiveEngine*> installed{nullptr};
}  // namespace

CollectiveEngine* collective_engine() { return installed.load(std::memory_order_acquire); }
void set_collective_engine(CollectiveEngine* engine) {
  installed.store(engine, std::memory_order_release);
}

void run_collective(const KernelCall& call) {
  const char* op = call.prim == Prim::collective_start ? "distributed.collective_start"
                                                       : "distributed.collective_wait";
  CollectiveEngine* engine = collective_engine();
  if (engine == nullptr)
    fail(op,
         "kiln::distributed is not started: call kiln::distributed::init() before running a "
         "function that synchronises gradients");
  const auto kind = static_cast<CollectiveKind>(call.attrs.ints.at(0));
  if (call.prim == Prim::collective_start) {
    CollectiveParams params;
    if (kind == CollectiveKind::replicas) params = {call.attrs.ints.at(1), call.attrs.ints.at(2)};
    *call.out.ptr<std::int64_t>() = engine->start(kind, call.attrs.dtype, call.inputs, params, op);
  } else {
    engine->wait(*call.inputs[0].ptr<const std::int64_t>(), call.out, call.attrs.value, op);
  }
}

}  // namespace kiln::detail

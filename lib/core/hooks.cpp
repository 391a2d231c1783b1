#include "core/hooks.hpp"

namespace kiln::detail {

namespace {
__attribute__((tls_model("initial-exec"))) thread_local TraceHooks* active = nullptr;
}  // namespace

TraceHooks* active_trace() { return active; }

TraceHooks* set_active_trace(TraceHooks* trace) {
  TraceHooks* previous = active;
  active = trace;
  return previous;
}

__attribute__((tls_model("initial-exec"))) thread_local int recording_tapes = 0;

TapeHooks tape_hooks;
Tensor (*densify_slices)(const Tensor&) = nullptr;

}  // namespace kiln::detail

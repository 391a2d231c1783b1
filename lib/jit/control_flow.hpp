#pragma once
// The traced side of kiln::scan, while_loop and cond (control_flow_traced.cpp), and the checks
// the eager and traced sides share (control_flow.cpp).

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/control_flow.hpp"

namespace kiln::detail {

struct GraphData;

using Tensors = std::vector<Tensor>;
using Branch = std::function<Tensors(const Tensors&)>;

/// "f32 [2,3]".
std::string type_text(const Tensor& t);
/// Fails unless `now` has the shapes and dtypes of `before`: "[op] <who> changed <what> 0 from
/// f32 [2,3] to f32 [2,4]".
void check_same_types(const Tensors& before, const Tensors& now, const char* op, const char* what,
                      const char* who);
/// Fails unless every tensor is defined: "[op] <what> 1 is an undefined tensor".
void check_all_defined(const Tensors& ts, const char* op, const char* what);
/// A concrete boolean scalar's value; fails naming `what` otherwise.
bool truth(const Tensor& t, const char* op, const char* what);

/// While a trace records: the body traced once into a region node. Under a gradient tape the
/// node is recorded with its gradient rule, which works on the region's graph (never on the
/// C++ body again).
std::pair<Tensors, Tensors> traced_scan(const ScanBody& body, const Tensors& init,
                                        const Tensors& xs, std::int64_t length, bool reverse);
Tensors traced_while_loop(const std::function<Tensor(const Tensors&)>& cond_fn, const Branch& body,
                          const Tensors& init, std::int64_t maximum_iterations);
Tensors traced_cond(const Tensor& pred, const Branch& true_fn, const Branch& false_fn,
                    const Tensors& operands);

/// Values for a graph's inputs other than its parameters when it is replayed: its variable
/// reads (by variable slot) and chosen constants (by node index).
struct ReplayBindings {
  Tensors variables;
  std::unordered_map<std::int32_t, Tensor> constants;
};

/// Applies graph g's nodes again, in the trace being recorded (or eagerly, for a graph of
/// primitives only), on `args` (one per parameter, by parameter index); returns its outputs.
/// A region graph needs no bindings; a function's graph needs them for its variable reads.
Tensors replay(const GraphData& g, const Tensors& args, const ReplayBindings* bindings = nullptr);

/// In the trace being recorded: the gradients of sum_k <fn(args)_k, cotangents_k> (undefined
/// cotangents count as zero) with respect to args and to `captures` (tensors of an enclosing
/// trace that fn uses, directly or through the region's captured tensors). Non-floating ones
/// get zeros.
Tensors region_vjp(const Branch& fn, const Tensors& args, const Tensors& captures,
                   const Tensors& cotangents);

/// kiln::scan with options.checkpoint_every = k > 1 under a gradient tape and a static trip
/// count above k (lib/jit/recompute.cpp): a scan over segments of k steps whose body is a scan of
/// k steps (eagerly each segment is a kiln::checkpoint), then a plain scan over the remainder.
std::pair<Tensors, Tensors> segmented_scan(const ScanBody& body, const Tensors& init,
                                           const Tensors& xs, std::int64_t length,
                                           const ScanOptions& options);

}  // namespace kiln::detail

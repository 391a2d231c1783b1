#pragma once
// The traced side of kiln::scan, while_loop and cond (control_flow_traced.cpp), and the checks
// the eager and traced sides share (control_flow.cpp).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/control_flow.hpp"

namespace kiln::detail {

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

}  // namespace kiln::detail

#pragma once
/// @file function.hpp
/// kiln::function: trace once per input signature, then replay the cached, optimized graph.

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"
#include "kiln/variable.hpp"

namespace kiln {

namespace detail {
struct GraphData;
struct ConcreteFunctionImpl;
class FunctionImpl;
}  // namespace detail

/// The dtype and shape of one tensor argument (for FunctionOptions::input_signature).
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
  TensorSpec(Shape s, DType d = DType::f32) : shape(std::move(s)), dtype(d) {}
};

/// What a function does once it has traced max_traces signatures and meets a new one.
enum class OnTraceLimit { run_eagerly, throw_error };

struct FunctionOptions {
  /// Used in messages and graph listings.
  std::string name = "function";
  /// When set, every call must match these specs (one per tensor argument, in order). A -1
  /// dim is dynamic: one trace serves every size there (see docs/guide on dynamic dims).
  std::vector<TensorSpec> input_signature = {};
  /// Concrete functions kept per function before `on_limit` applies.
  int max_traces = 8;
  OnTraceLimit on_limit = OnTraceLimit::run_eagerly;
  /// Run the graph passes. With false the plan runs the graph exactly as traced (for
  /// debugging, and for tests that compare optimized against unoptimized results).
  bool optimize = true;
  /// Individual passes, used when `optimize` is true (dead-code and common-subexpression
  /// elimination always run then).
  bool fold_constants = true;    ///< evaluate subgraphs that depend only on constants
  bool simplify = true;          ///< x*1, x+0, transpose of transpose, reshape chains, ...
  bool fuse_elementwise = true;  ///< one kernel per tree of elementwise ops
  /// Move loop-invariant work out of scan and while_loop bodies, and compute a scan's
  /// per-step matmuls that do not need the carry (x_t @ W) as one product over all steps.
  bool hoist_loop_invariants = true;
  /// Turn a scan carry that sums per-step products transpose(P_t) @ B_t (a scan gradient's
  /// accumulator for a weight used in a matmul) into one product over all steps after the
  /// loop (static step counts only).
  bool hoist_accumulators = true;
};

/// A traced graph (read-only view for introspection).
class Graph {
 public:
  /// Nodes in the optimized graph (parameters, constants, variable reads and ops).
  std::size_t num_nodes() const;
  /// A readable listing, one node per line, like a jaxpr.
  std::string to_string() const;
  /// Graphviz (dot) text.
  std::string to_dot() const;
  explicit Graph(std::shared_ptr<const detail::GraphData> data) : data_(std::move(data)) {}

 private:
  std::shared_ptr<const detail::GraphData> data_;
};

/// One traced input signature of a Function (a concrete function): its optimized graph, compiled.
class ConcreteFunction {
 public:
  Graph graph() const;
  /// The name of the function it was traced for (FunctionOptions::name).
  const std::string& name() const;
  explicit ConcreteFunction(std::shared_ptr<const detail::ConcreteFunctionImpl> impl)
      : impl_(std::move(impl)) {}
  /// For kiln's own use (kiln::export_function).
  const std::shared_ptr<const detail::ConcreteFunctionImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<const detail::ConcreteFunctionImpl> impl_;
};

/// Drops every function's cached graphs.
void clear_caches();
/// When true, every kiln::function runs its callable eagerly (no tracing): for debugging.
/// Also enabled by the environment variable KILN_RUN_EAGERLY=1.
void run_functions_eagerly(bool eager);
bool functions_run_eagerly();
/// Where kiln's warnings go (default: standard error). Pass nullptr to restore the default.
void set_log_sink(std::function<void(const std::string&)> sink);

namespace detail {

/// The flattened arguments of one call: tensors in order, and the cache key (raw bytes).
struct ArgPack {
  struct Arg {
    char kind;                // 'T' tensor, 'V' tensor list, 'R' variable, 'S' static value
    std::uint32_t first = 0;  // tensors: index of the first one in `tensors`
    std::uint32_t count = 0;  // tensors: how many
    std::string text;         // static values and variables: printable form
  };
  ArgPack() {
    tensors.reserve(4);
    dims_at.reserve(4);
    key.reserve(96);
    args.reserve(4);
  }
  /// The call's tensors, borrowed: the caller's arguments outlive the call.
  std::vector<const Tensor*> tensors;
  std::string key;
  std::vector<Arg> args;
  std::vector<std::uint32_t> dims_at;  // per tensor: where its dims start in `key`
  /// One line per argument ("shape [32,5,10] dtype f32", "value 3"), for messages.
  std::vector<std::string> describe() const;
  /// Empties the pack, keeping its capacity.
  void clear() {
    tensors.clear();
    key.clear();
    args.clear();
    dims_at.clear();
  }
};
void pack_arg(ArgPack& p, const Tensor& t);
void pack_arg(ArgPack& p, const std::vector<Tensor>& ts);
void pack_arg(ArgPack& p, const Variable& v);
void pack_arg(ArgPack& p, const std::string& s);
void pack_arg(ArgPack& p, const char* s);
void pack_static(ArgPack& p, char type, const void* bytes, std::size_t size, std::string text);
template <class T>
requires std::is_arithmetic_v<T>
void pack_arg(ArgPack& p, T v) {
  const char type = std::is_same_v<T, bool> ? 'b' : std::is_integral_v<T> ? 'i' : 'f';
  pack_static(p, type, &v, sizeof(v), std::to_string(v));
}

/// Replaces the tensors of an argument by the next placeholders (for tracing).
inline const Tensor& substitute(const Tensor&, const std::vector<Tensor>& ph, std::size_t& pos) {
  return ph[pos++];
}
inline std::vector<Tensor> substitute(const std::vector<Tensor>& ts, const std::vector<Tensor>& ph,
                                      std::size_t& pos) {
  std::vector<Tensor> out(ph.begin() + static_cast<std::ptrdiff_t>(pos),
                          ph.begin() + static_cast<std::ptrdiff_t>(pos + ts.size()));
  pos += ts.size();
  return out;
}
template <class T>
const T& substitute(const T& v, const std::vector<Tensor>&, std::size_t&) {
  return v;
}

/// Flattening results: Tensor, std::vector<Tensor>, std::pair and std::tuple of those.
inline void flatten_result(const Tensor& t, std::vector<Tensor>& out, std::vector<std::size_t>&) {
  out.push_back(t);
}
inline void flatten_result(const std::vector<Tensor>& ts, std::vector<Tensor>& out,
                           std::vector<std::size_t>& sizes) {
  sizes.push_back(ts.size());
  out.insert(out.end(), ts.begin(), ts.end());
}
template <class... Ts>
void flatten_result(const std::tuple<Ts...>& t, std::vector<Tensor>& out,
                    std::vector<std::size_t>& sizes) {
  std::apply([&](const auto&... parts) { (flatten_result(parts, out, sizes), ...); }, t);
}
template <class A, class B>
void flatten_result(const std::pair<A, B>& p, std::vector<Tensor>& out,
                    std::vector<std::size_t>& sizes) {
  flatten_result(p.first, out, sizes);
  flatten_result(p.second, out, sizes);
}

/// Whether R is a result kiln::function can return: void, Tensor, std::vector<Tensor>, or a
/// std::pair / std::tuple of those (not void).
template <class R>
struct is_function_result : std::false_type {};
template <>
struct is_function_result<void> : std::true_type {};
template <>
struct is_function_result<Tensor> : std::true_type {};
template <>
struct is_function_result<std::vector<Tensor>> : std::true_type {};
template <class A, class B>
struct is_function_result<std::pair<A, B>>
    : std::bool_constant<is_function_result<A>::value && is_function_result<B>::value &&
                         !std::is_void_v<A> && !std::is_void_v<B>> {};
template <class... Ts>
struct is_function_result<std::tuple<Ts...>>
    : std::bool_constant<((is_function_result<Ts>::value && !std::is_void_v<Ts>)&&...)> {};

template <class R>
struct Rebuild;
template <>
struct Rebuild<Tensor> {
  static Tensor from(std::vector<Tensor>& flat, const std::vector<std::size_t>&, std::size_t& pos,
                     std::size_t&) {
    return std::move(flat[pos++]);
  }
};
template <>
struct Rebuild<std::vector<Tensor>> {
  static std::vector<Tensor> from(std::vector<Tensor>& flat, const std::vector<std::size_t>& sizes,
                                  std::size_t& pos, std::size_t& size_pos) {
    const std::size_t n = sizes[size_pos++];
    std::vector<Tensor> out(
        std::make_move_iterator(flat.begin() + static_cast<std::ptrdiff_t>(pos)),
        std::make_move_iterator(flat.begin() + static_cast<std::ptrdiff_t>(pos + n)));
    pos += n;
    return out;
  }
};
template <class... Ts>
struct Rebuild<std::tuple<Ts...>> {
  static std::tuple<Ts...> from(std::vector<Tensor>& flat, const std::vector<std::size_t>& sizes,
                                std::size_t& pos, std::size_t& size_pos) {
    return std::tuple<Ts...>{Rebuild<Ts>::from(flat, sizes, pos, size_pos)...};
  }
};
template <class A, class B>
struct Rebuild<std::pair<A, B>> {
  static std::pair<A, B> from(std::vector<Tensor>& flat, const std::vector<std::size_t>& sizes,
                              std::size_t& pos, std::size_t& size_pos) {
    A a = Rebuild<A>::from(flat, sizes, pos, size_pos);
    B b = Rebuild<B>::from(flat, sizes, pos, size_pos);
    return {std::move(a), std::move(b)};
  }
};

/// What a traced callable produced: flat outputs and the sizes of vector results.
struct TraceResult {
  std::vector<Tensor> outputs;
  std::vector<std::size_t> vector_sizes;
};

/// A non-owning reference to the callable that traces (no allocation per call).
class TraceFnRef {
 public:
  template <class L>
  TraceFnRef(L& l)  // NOLINT: implicit on purpose
      : object_(&l),
        call_([](void* o, const std::vector<Tensor>& ph) { return (*static_cast<L*>(o))(ph); }) {}
  TraceResult operator()(const std::vector<Tensor>& placeholders) const {
    return call_(object_, placeholders);
  }

 private:
  void* object_;
  TraceResult (*call_)(void*, const std::vector<Tensor>&);
};

/// What the copies of a kiln::Function share besides f: options and the ConcreteFunctionImpl cache.
/// The non-template part of kiln::Function: the cache by input signature, tracing on a miss,
/// running a ConcreteFunctionImpl's Executable, retracing diagnostics.
class FunctionImpl {
 public:
  explicit FunctionImpl(FunctionOptions options);
  ~FunctionImpl();
  FunctionImpl(const FunctionImpl&) = delete;
  FunctionImpl& operator=(const FunctionImpl&) = delete;

  enum class Mode { run, run_eagerly };
  /// The concrete function for this call (tracing with `trace` on a miss), or null with
  /// mode = run_eagerly when the call must run eagerly.
  std::shared_ptr<const ConcreteFunctionImpl> lookup(const ArgPack& args, Mode& mode,
                                                     TraceFnRef trace);
  /// Runs a concrete function on the call's tensors; fills `outputs` (flat, cleared first).
  void execute(const ConcreteFunctionImpl& cf, const ArgPack& args,
               std::vector<Tensor>& outputs) const;
  const std::vector<std::size_t>& vector_sizes(const ConcreteFunctionImpl& cf) const;

  int tracing_count() const;
  std::size_t cache_size() const;
  void clear();
  const FunctionOptions& options() const { return options_; }

 private:
  struct State;
  FunctionOptions options_;
  std::unique_ptr<State> state_;
};

/// True while this thread is tracing some function (nested functions then inline).
bool tracing();
/// Throws the error for get_concrete_function on a signature that runs eagerly.
[[noreturn]] void throw_no_concrete_function(const std::string& name);

}  // namespace detail

/// A callable that traces `F` once per input signature and replays the cached graph.
/// Arguments may be tensors, std::vector<Tensor>, Variables (keyed by identity) and static
/// values (bool, integers, floating point, std::string) that are part of the cache key by value.
/// Results may be a Tensor, a std::vector<Tensor>, or a std::pair / std::tuple of those; a
/// callable that returns nothing (void) runs for its side effects (variable assignments),
/// traced and cached like any other.
template <class F>
class Function {
 public:
  Function(F f, FunctionOptions options)
      : f_(std::make_shared<F>(std::move(f))),
        impl_(std::make_shared<detail::FunctionImpl>(std::move(options))) {}

  template <class... Args>
  auto operator()(const Args&... args) const {
    using R = std::invoke_result_t<const F&, const Args&...>;
    static_assert(detail::is_function_result<R>::value,
                  "kiln::function: the callable must return void, a Tensor, a "
                  "std::vector<Tensor>, or a std::pair / std::tuple of those");
    if (detail::tracing()) return (*f_)(args...);  // nested: inline into the outer trace
    // A per-thread pack reused across calls (no allocation once warm); released on exit so it
    // does not keep the caller's tensors alive. Calls do not nest here: user code runs only
    // while tracing, where nested functions inline.
    thread_local detail::ArgPack reused;
    struct Release {
      detail::ArgPack& p;
      ~Release() { p.clear(); }
    } release{reused};
    detail::ArgPack& pack = reused;
    (detail::pack_arg(pack, args), ...);
    detail::FunctionImpl::Mode mode = detail::FunctionImpl::Mode::run;
    auto tracer = make_tracer<R>(args...);
    auto cf = impl_->lookup(pack, mode, tracer);
    if (mode == detail::FunctionImpl::Mode::run_eagerly) {
      detail::VariableSnapshot snapshot;  // one value of each variable for the whole call
      return (*f_)(args...);
    }
    // Outputs also go through a per-thread vector (no allocation per call once warm).
    thread_local std::vector<Tensor> flat;
    struct ReleaseOutputs {
      std::vector<Tensor>& v;
      ~ReleaseOutputs() { v.clear(); }
    } release_outputs{flat};
    impl_->execute(*cf, pack, flat);
    if constexpr (!std::is_void_v<R>) {
      std::size_t pos = 0, size_pos = 0;
      return detail::Rebuild<R>::from(flat, impl_->vector_sizes(*cf), pos, size_pos);
    }
  }

  /// How many times the callable was traced.
  int tracing_count() const { return impl_->tracing_count(); }
  /// Number of cached concrete functions.
  std::size_t cache_size() const { return impl_->cache_size(); }
  /// The concrete function for these arguments (tracing if needed).
  template <class... Args>
  ConcreteFunction get_concrete_function(const Args&... args) const {
    using R = std::invoke_result_t<const F&, const Args&...>;
    static_assert(detail::is_function_result<R>::value,
                  "kiln::function: the callable must return void, a Tensor, a "
                  "std::vector<Tensor>, or a std::pair / std::tuple of those");
    detail::ArgPack pack;
    (detail::pack_arg(pack, args), ...);
    detail::FunctionImpl::Mode mode = detail::FunctionImpl::Mode::run;
    auto tracer = make_tracer<R>(args...);
    auto cf = impl_->lookup(pack, mode, tracer);
    if (!cf) detail::throw_no_concrete_function(impl_->options().name);
    return ConcreteFunction(cf);
  }

 private:
  /// The callable that runs f on placeholders while tracing and flattens its result.
  template <class R, class... Args>
  auto make_tracer(const Args&... args) const {
    return [this, &args...](const std::vector<Tensor>& placeholders) {
      std::size_t pos = 0;
      detail::TraceResult result;
      const auto call = [&](const auto&... a) -> R { return (*f_)(a...); };
      const std::tuple<decltype(detail::substitute(args, placeholders, pos))...> substituted{
          detail::substitute(args, placeholders, pos)...};
      if constexpr (std::is_void_v<R>) {
        std::apply(call, substituted);
      } else {
        R r = std::apply(call, substituted);
        detail::flatten_result(r, result.outputs, result.vector_sizes);
      }
      return result;
    };
  }
  std::shared_ptr<F> f_;
  std::shared_ptr<detail::FunctionImpl> impl_;
};

/// Wraps f into a trace-and-cache Function.
template <class F>
Function<F> function(F f, FunctionOptions options = {}) {
  return Function<F>(std::move(f), std::move(options));
}

}  // namespace kiln

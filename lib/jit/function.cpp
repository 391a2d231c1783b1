// kiln::function's machinery (FunctionImpl, ConcreteFunctionImpl): the per-function cache of
// concrete functions, tracing, running a concrete function's Executable, retracing diagnostics
// and global switches.
#include "kiln/function.hpp"

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <unordered_map>

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "jit/concrete_function.hpp"
#include "jit/executable.hpp"
#include "jit/graph.hpp"
#include "jit/log.hpp"
#include "jit/passes.hpp"
#include "jit/plan.hpp"
#include "jit/signature.hpp"
#include "jit/trace.hpp"
#include "ops/dispatch.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

namespace {

std::atomic<bool> eager_override{[] {
  const char* env = std::getenv("KILN_RUN_EAGERLY");
  return env != nullptr && std::string_view(env) == "1";
}()};

std::mutex sink_mutex;
std::function<void(const std::string&)> log_sink;

std::mutex registry_mutex;
std::set<FunctionImpl*>& registry() {
  static auto* r = new std::set<FunctionImpl*>;
  return *r;
}

}  // namespace

void log_warning(const std::string& message) {
  std::lock_guard lock(sink_mutex);
  if (log_sink)
    log_sink(message);
  else
    std::cerr << "kiln warning: " << message << "\n";
}

ConcreteFunctionImpl::~ConcreteFunctionImpl() {
  if (graph)
    count_cached_function(-1, -static_cast<std::int64_t>(graph->nodes.size()),
                          -counted_bytes - bound_bytes);
}

std::shared_ptr<const Executable> ConcreteFunctionImpl::executable_for(
    std::span<const Tensor* const> args) const {
  thread_local std::vector<std::int64_t> values;
  values.clear();
  for (auto [t, d] : symbol_sources) values.push_back(args[t]->shape()[d]);
  std::lock_guard lock(bound_mutex);
  auto it = bound.find(values);
  if (it != bound.end()) return it->second;
  // Bounded: a function called with very many distinct sizes recomputes (cheaply) past this.
  constexpr std::size_t max_bound = 64;
  if (bound.size() >= max_bound) {
    bound.clear();
    count_cached_function(0, 0, -bound_bytes);
    bound_bytes = 0;
  }
  const std::vector<Shape> shapes = bind_shapes(*graph, values);
  auto bound_executable =
      std::make_shared<const Executable>(build_executable(*graph, &shapes, &values));
  const auto bytes = bound_executable->bytes() +
                     static_cast<std::int64_t>(values.size() * sizeof(std::int64_t) + 64);
  bound_bytes += bytes;
  count_cached_function(0, 0, bytes);
  bound.emplace(values, bound_executable);
  return bound_executable;
}

bool tracing() { return current_trace() != nullptr; }

[[noreturn]] void throw_no_concrete_function(const std::string& name) {
  fail(name,
       "no concrete function: the trace limit was reached and this function runs new "
       "signatures eagerly");
}

/// Whether each of the last 10 calls traced, as bits (cheap on every cached call).
class RecentCalls {
 public:
  void push(bool traced) {
    bits_ = static_cast<std::uint16_t>(((bits_ << 1) | (traced ? 1u : 0u)) & 0x3ffu);
    if (count_ < 10) ++count_;
  }
  int traced() const { return std::popcount(bits_); }
  int size() const { return count_; }

 private:
  std::uint16_t bits_ = 0;
  int count_ = 0;
};

/// The lock of one function's cache. Its critical sections are short (a key comparison on the
/// cached path), so a waiter spins briefly, then yields; locking is one atomic exchange and
/// unlocking a release store, cheaper than a mutex on every cached call.
class CacheLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins >= 64) std::this_thread::yield();
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

/// A trace in progress, which callers with the same signature wait for.
struct PendingTrace {
  std::thread::id tracer = std::this_thread::get_id();
  std::mutex mutex;
  std::condition_variable done_changed;
  bool done = false;

  void wait() {
    std::unique_lock lock(mutex);
    done_changed.wait(lock, [&] { return done; });
  }
  void finish() {
    {
      std::lock_guard lock(mutex);
      done = true;
    }
    done_changed.notify_all();
  }
};

struct FunctionImpl::State {
  mutable CacheLock mutex;
  std::unordered_map<std::string, std::shared_ptr<const ConcreteFunctionImpl>> cache;
  int traces = 0;
  RecentCalls recent;                                // whether each of the last 10 calls traced
  std::shared_ptr<const ConcreteFunctionImpl> last;  // concrete function of the previous call
  int retrace_warnings = 0;
  bool limit_warned = false;
  // Signatures being traced now, each by one thread; they count against max_traces, and a
  // second caller with the same signature waits for that trace instead of tracing again.
  std::unordered_map<std::string, std::shared_ptr<PendingTrace>> pending;
  // Dims marked -1 in the input_signature: (tensor index, dim), in order.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> dynamic_dims;
};

FunctionImpl::FunctionImpl(FunctionOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {
  for (std::size_t t = 0; t < options_.input_signature.size(); ++t) {
    const Shape& spec = options_.input_signature[t].shape;
    for (std::size_t d = 0; d < spec.size(); ++d) {
      if (spec[d] == -1)
        state_->dynamic_dims.emplace_back(static_cast<std::uint32_t>(t),
                                          static_cast<std::uint32_t>(d));
      else if (spec[d] < 0)
        fail(options_.name, "input_signature {}: dim {} is {}; use -1 for a dynamic dim", t, d,
             spec[d]);
    }
  }
  std::lock_guard lock(registry_mutex);
  registry().insert(this);
}

FunctionImpl::~FunctionImpl() {
  std::lock_guard lock(registry_mutex);
  registry().erase(this);
}

int FunctionImpl::tracing_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->traces;
}

std::size_t FunctionImpl::cache_size() const {
  std::lock_guard lock(state_->mutex);
  return state_->cache.size();
}

void FunctionImpl::clear() {
  std::unordered_map<std::string, std::shared_ptr<const ConcreteFunctionImpl>> dropped;
  std::shared_ptr<const ConcreteFunctionImpl> last;
  std::lock_guard lock(state_->mutex);
  dropped.swap(state_->cache);
  last.swap(state_->last);
}

std::shared_ptr<const ConcreteFunctionImpl> FunctionImpl::lookup(const ArgPack& args, Mode& mode,
                                                                 TraceFnRef trace_fn) {
  mode = Mode::run;
  check_signature(options_, args);
  if (eager_override.load(std::memory_order_relaxed) || any_tape_recording()) {
    // Debug switch, or a tape outside the function needs to see its ops: run eagerly.
    mode = Mode::run_eagerly;
    return nullptr;
  }
  State& st = *state_;
  const bool dynamic = !st.dynamic_dims.empty();
  thread_local std::string dynamic_key;
  if (dynamic) dynamic_key = relaxed_key(args, st.dynamic_dims, nullptr);
  const std::string& key = dynamic ? dynamic_key : args.key;
  // Descriptions of the previous call's arguments, for messages naming what changed.
  const auto previous = [](const State& state) -> std::vector<std::string> {
    return state.last ? state.last->descriptions : std::vector<std::string>{};
  };
  std::shared_ptr<PendingTrace> pending;  // this thread's trace of `key`, once reserved
  bool first_trace = false;
  for (;;) {
    std::shared_ptr<PendingTrace> other;
    {
      std::lock_guard lock(st.mutex);
      // Most calls repeat the previous call's signature: compare with it before hashing.
      if (st.last && st.last->key == key) {
        st.recent.push(false);
        return st.last;
      }
      auto it = st.cache.find(key);
      if (it != st.cache.end()) {
        st.recent.push(false);
        if (st.last != it->second) st.last = it->second;
        return it->second;
      }
      auto busy = st.pending.find(key);
      if (busy != st.pending.end()) {
        // Tracing the same signature on this thread again (get_concrete_function from inside
        // the trace) cannot wait for itself: it traces without a place of its own.
        if (busy->second->tracer == std::this_thread::get_id()) break;
        other = busy->second;
      } else {
        // Traces in progress hold their places under the limit, so concurrent first calls
        // cannot trace past it.
        const int reserved = st.traces + static_cast<int>(st.pending.size());
        if (reserved >= options_.max_traces) {
          if (options_.on_limit == OnTraceLimit::throw_error)
            fail(options_.name,
                 "a new input signature after {} traces (max_traces); {}. Mark varying dims "
                 "dynamic with input_signature, pass varying numbers as tensors, or raise "
                 "max_traces",
                 reserved, describe_change(previous(st), args.describe()));
          if (!st.limit_warned) {
            st.limit_warned = true;
            log_warning(
                fmt::format("[{}] reached max_traces={}; new input signatures now run eagerly "
                            "({})",
                            options_.name, options_.max_traces,
                            describe_change(previous(st), args.describe())));
          }
          mode = Mode::run_eagerly;
          return nullptr;
        }
        pending = std::make_shared<PendingTrace>();
        st.pending.emplace(key, pending);
        first_trace = st.traces == 0;
      }
    }
    if (pending) break;
    other->wait();  // then look again: it published its result, or failed
  }
  // However this trace ends, its place under the limit is given back and waiters wake.
  struct EndPending {
    State& st;
    std::string key;
    std::shared_ptr<PendingTrace> pending;
    ~EndPending() {
      if (!pending) return;
      {
        std::lock_guard lock(st.mutex);
        st.pending.erase(key);
      }
      pending->finish();
    }
  } end_pending{st, pending ? key : std::string(), pending};

  // Trace outside the lock (user code may call other functions). A failed trace publishes
  // nothing and releases the variables it created.
  TraceContext trace(options_.name, /*allow_variable_creation*/ first_trace);
  TraceResult result;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> symbol_sources;
  const std::string traced_key =
      dynamic ? relaxed_key(args, st.dynamic_dims, &symbol_sources) : args.key;
  {
    TraceScope scope(&trace);
    trace.set_num_symbols(static_cast<std::int64_t>(symbol_sources.size()));
    std::vector<Tensor> placeholders;
    placeholders.reserve(args.tensors.size());
    for (std::size_t i = 0; i < args.tensors.size(); ++i) {
      Shape shape = args.tensors[i]->shape();
      if (dynamic)  // the symbols the key holds
        std::memcpy(shape.begin(), traced_key.data() + args.dims_at[i],
                    shape.size() * sizeof(std::int64_t));
      placeholders.push_back(
          trace.add_parameter(args.tensors[i]->dtype(), shape, static_cast<std::int32_t>(i)));
    }
    result = trace_fn(placeholders);
    for (std::size_t i = 0; i < result.outputs.size(); ++i) {
      const std::string what = fmt::format("output {}", i);
      if (!result.outputs[i].defined()) fail(options_.name, "output {} is an undefined tensor", i);
      trace.graph().outputs.push_back(trace.node_of(result.outputs[i], what.c_str()));
    }
  }
  auto graph = std::make_shared<GraphData>(std::move(trace.graph()));
  run_graph_passes(*graph, options_);
  auto cf = std::make_shared<ConcreteFunctionImpl>();
  if (symbol_sources.empty()) cf->executable = build_executable(*graph);  // else per set of sizes
  cf->graph = graph;
  cf->vector_sizes = std::move(result.vector_sizes);
  cf->descriptions = args.describe();
  cf->owned_variables = std::move(trace.owned_variables());
  cf->symbol_sources = std::move(symbol_sources);
  cf->key = traced_key;
  cf->name = options_.name;
  cf->counted_bytes =
      graph->bytes() + cf->executable.bytes() + static_cast<std::int64_t>(cf->key.capacity());
  trace.commit();  // nothing below can fail: keep what the trace registered
  count_cached_function(1, static_cast<std::int64_t>(graph->nodes.size()), cf->counted_bytes);

  std::lock_guard lock(st.mutex);
  auto [it, inserted] = st.cache.emplace(traced_key, cf);
  if (!inserted) return it->second;  // only after a nested trace of the same signature
  ++st.traces;
  st.recent.push(true);
  const int traced = st.recent.traced();
  if (st.traces > 1 && traced >= 5 && st.retrace_warnings < 2) {
    ++st.retrace_warnings;
    log_warning(fmt::format(
        "[{}] retracing: {} of the last {} calls traced a new graph ({} traces so far). Changed: "
        "{}. Retracing is expensive: mark varying dims dynamic (-1) in input_signature, pass "
        "changing numbers as tensors, and avoid new static values per call",
        options_.name, traced, st.recent.size(), st.traces,
        describe_change(previous(st), args.describe())));
  }
  st.last = cf;
  return cf;
}

void FunctionImpl::execute(const ConcreteFunctionImpl& cf, const ArgPack& args,
                           std::vector<Tensor>& outputs) const {
  if (cf.symbol_sources.empty()) {
    run_executable(cf.executable, *cf.graph, args.tensors, options_.name, outputs);
    return;
  }
  const auto executable = cf.executable_for(args.tensors);
  run_executable(*executable, *cf.graph, args.tensors, options_.name, outputs);
}

const std::vector<std::size_t>& FunctionImpl::vector_sizes(const ConcreteFunctionImpl& cf) const {
  return cf.vector_sizes;
}

}  // namespace detail

std::size_t Graph::num_nodes() const { return data_->nodes.size(); }
std::string Graph::to_string() const { return data_->to_string(); }
std::string Graph::to_dot() const { return data_->to_dot(); }
Graph ConcreteFunction::graph() const { return Graph(impl_->graph); }
const std::string& ConcreteFunction::name() const { return impl_->name; }

void clear_caches() {
  std::lock_guard lock(detail::registry_mutex);
  for (detail::FunctionImpl* f : detail::registry()) f->clear();
}

void run_functions_eagerly(bool eager) { detail::eager_override.store(eager); }
bool functions_run_eagerly() { return detail::eager_override.load(); }

void set_log_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard lock(detail::sink_mutex);
  detail::log_sink = std::move(sink);
}

}  // namespace kiln

// DistributedOptimizer (gradient buckets over the collective primitives) and
// broadcast_variables. No MPI here: the collectives are ops (lib/ops/collective.hpp) that the
// engine in mpi.cpp runs.
#include <algorithm>
#include <numeric>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/creation.hpp"
#include "kiln/distributed.hpp"
#include "kiln/ops.hpp"
#include "kiln/sparse.hpp"
#include "ops/collective.hpp"
#include "ops/rows.hpp"

namespace kiln::distributed {

namespace {

using detail::CollectiveKind;
using detail::fail;

constexpr const char* optimizer_op = "distributed.DistributedOptimizer";

/// Where gradient i comes in the order the backward pass computes them: while tracing, its
/// node (nodes are recorded in the order they run); otherwise the variables in reverse (a
/// backward pass reaches the last layer's first).
std::vector<std::size_t> readiness_order(const std::vector<Tensor>& grads) {
  std::vector<std::size_t> order;
  std::vector<std::int64_t> key(grads.size(), 0);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    order.push_back(i);
    const Tensor& t =
        grads[i].is_indexed_slices() ? detail::slices_parts(grads[i]).values : grads[i];
    const detail::TensorImpl& impl = *t.impl();
    key[i] = impl.is_symbolic() ? impl.node : -static_cast<std::int64_t>(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
  return order;
}

/// FNV-1a over a list of numbers.
std::uint64_t fingerprint(const std::vector<std::int64_t>& values) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::int64_t v : values)
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<std::uint64_t>(v) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  return h;
}

}  // namespace

void broadcast_variables(const std::vector<Variable>& vars, int root) {
  constexpr const char* op = "distributed.broadcast_variables";
  if (detail::active_trace() != nullptr) fail(op, "runs eagerly; call it outside kiln::function");
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (!vars[i].defined()) fail(op, "variable {} is an empty Variable handle", i);
  for (const Variable& v : vars) v.assign(broadcast(v.value(), root));
}

DistributedOptimizer::DistributedOptimizer(optim::Optimizer& optimizer,
                                           DistributedOptimizerOptions options)
    : optimizer_(&optimizer), options_(options) {
  if (options_.fusion_bytes < 0)
    fail(optimizer_op, "fusion_bytes must be >= 0, got {}", options_.fusion_bytes);
  if (options_.op != ReduceOp::mean && options_.op != ReduceOp::sum)
    fail(optimizer_op, "combines gradients by mean or sum");
  if (options_.replicas_to_aggregate < 0 || options_.total_num_replicas < 0)
    fail(optimizer_op, "replicas_to_aggregate and total_num_replicas must be >= 0, got {} and {}",
         options_.replicas_to_aggregate, options_.total_num_replicas);
  if (options_.max_lag < 1) fail(optimizer_op, "max_lag must be >= 1, got {}", options_.max_lag);
  if (options_.total_num_replicas > 0 &&
      options_.replicas_to_aggregate > options_.total_num_replicas)
    fail(optimizer_op, "replicas_to_aggregate ({}) is more than total_num_replicas ({})",
         options_.replicas_to_aggregate, options_.total_num_replicas);
  if (initialized()) check_processes(size());
  optimizer.set_gradient_aggregator(this);
}

void DistributedOptimizer::check_processes(int processes) const {
  if (options_.total_num_replicas > 0 && options_.total_num_replicas != processes)
    fail(optimizer_op,
         "total_num_replicas is {}, but the job has {} processes (each process is one replica)",
         options_.total_num_replicas, processes);
  if (options_.replicas_to_aggregate > processes)
    fail(optimizer_op, "replicas_to_aggregate is {}, but the job has only {} processes",
         options_.replicas_to_aggregate, processes);
}

DistributedOptimizer::~DistributedOptimizer() {
  if (optimizer_->gradient_aggregator() == this) optimizer_->set_gradient_aggregator(nullptr);
}

std::vector<Tensor> DistributedOptimizer::aggregate(const std::vector<Tensor>& grads,
                                                    const std::vector<Variable>& /*vars*/) {
  if (!initialized())
    fail(optimizer_op, "kiln::distributed is not started: call kiln::distributed::init() first");
  std::vector<Tensor> out(grads);
  const int processes = size();
  check_processes(processes);
  if (processes == 1) return out;
  const int replicas = options_.replicas_to_aggregate;  // 0: allreduce
  const double scale =
      options_.op == ReduceOp::mean ? 1.0 / (replicas > 0 ? replicas : processes) : 1.0;

  // The buckets, in the order the gradients are ready; a description of them for the check.
  struct Bucket {
    DType dtype;
    std::vector<std::size_t> members;
    std::int64_t bytes = 0;
  };
  std::vector<Bucket> buckets;
  std::vector<std::size_t> sparse;
  std::vector<std::int64_t> layout;
  for (std::size_t i : readiness_order(grads)) {
    // Sync replicas sums buckets on process 0: an embedding's gradient goes dense there.
    if (replicas > 0 && grads[i].is_indexed_slices()) out[i] = to_dense(grads[i]);
    const Tensor& g = out[i];
    if (g.is_indexed_slices()) {
      sparse.push_back(i);
      const detail::RowSlices& p = detail::slices_parts(g);
      layout.push_back(-1);
      layout.push_back(static_cast<std::int64_t>(p.indices.dtype()));
      for (std::int64_t d : p.values.shape().to_vector()) layout.push_back(d);
      continue;
    }
    const std::int64_t bytes =
        static_cast<std::int64_t>(g.size()) * static_cast<std::int64_t>(dtype_size(g.dtype()));
    Bucket* open = nullptr;
    for (Bucket& b : buckets)
      if (b.dtype == g.dtype()) open = &b;  // the newest bucket of this dtype
    if (open == nullptr || (open->bytes > 0 && open->bytes + bytes > options_.fusion_bytes)) {
      buckets.push_back(Bucket{g.dtype(), {}, 0});
      open = &buckets.back();
    }
    open->members.push_back(i);
    open->bytes += bytes;
  }
  for (const Bucket& b : buckets) {
    layout.push_back(static_cast<std::int64_t>(b.dtype));
    layout.push_back(b.bytes);
  }
  layout.push_back(replicas);
  layout.push_back(options_.max_lag);

  // Every process must send the same buckets: checked once per layout, eagerly.
  const std::uint64_t mine = fingerprint(layout);
  if (std::find(checked_layouts_.begin(), checked_layouts_.end(), mine) == checked_layouts_.end()) {
    detail::TraceSuspension eager;
    const auto signed_mine = static_cast<std::int64_t>(mine >> 1);
    const auto highest =
        allreduce(tensor<std::int64_t>({signed_mine, -signed_mine}, {2}), ReduceOp::max)
            .to_vector<std::int64_t>();
    if (highest[0] != signed_mine || highest[1] != -signed_mine)
      fail(optimizer_op,
           "the processes have different gradients to combine ({} buckets of dense gradients "
           "and {} indexed-slices gradients here); every process must train the same variables "
           "with gradients of the same shapes",
           buckets.size(), sparse.size());
    checked_layouts_.push_back(mine);
  }

  // Sync replicas: a process may lag max_lag steps, each one round per bucket.
  const CollectiveKind kind = replicas > 0 ? CollectiveKind::replicas : CollectiveKind::sum;
  const detail::CollectiveParams params{
      replicas, static_cast<std::int64_t>(options_.max_lag) *
                    std::max<std::int64_t>(1, static_cast<std::int64_t>(buckets.size()))};
  for (const Bucket& b : buckets) {
    std::vector<Tensor> parts;
    for (std::size_t i : b.members) parts.push_back(out[i]);
    const std::int64_t elements = b.bytes / static_cast<std::int64_t>(dtype_size(b.dtype));
    const Tensor ticket = detail::collective_start(kind, parts, params);
    const Tensor joined = detail::collective_wait(ticket, kind, b.dtype, Shape{elements}, scale);
    std::int64_t offset = 0;
    for (std::size_t i : b.members) {
      const auto n = static_cast<std::int64_t>(grads[i].size());
      out[i] = reshape(slice(joined, 0, offset, offset + n), grads[i].shape());
      offset += n;
    }
  }
  for (std::size_t i : sparse) {
    const detail::RowSlices& p = detail::slices_parts(grads[i]);
    const auto gathered = [&](const Tensor& t, double factor) {
      Shape shape = t.shape();
      shape[0] *= processes;
      const Tensor ticket = detail::collective_start(CollectiveKind::gather, {&t, 1});
      return detail::collective_wait(ticket, CollectiveKind::gather, t.dtype(), shape, factor);
    };
    out[i] = detail::make_slices(gathered(p.indices, 1.0), gathered(p.values, scale),
                                 grads[i].shape(), /*unique*/ false, p.padded);
  }
  return out;
}

}  // namespace kiln::distributed

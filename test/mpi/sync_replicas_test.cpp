// Sync replicas (DistributedOptimizerOptions::replicas_to_aggregate) across real processes: run
// by scripts/test.sh with `mpirun -np 2` and `-np 4 --oversubscribe`. The last rank sleeps
// before each step, so process 0 combines the other ranks' gradients and drops its late ones:
// with p ranks, p - 1 of p are aggregated. Every rank must then hold the weights of one process
// trained alone on the p - 1 fast ranks' rows, reach the same step count, and (the backup
// worker's point) the fast ranks must not wait for the slow one, unless max_lag says so.
#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include "mpi_check.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace dist = kiln::distributed;
using kiln::Tensor;

namespace {

using mpi_check::check;
using mpi_check::largest_difference;

constexpr int steps = 10;
constexpr auto slow_step = std::chrono::milliseconds(150);

kiln::nn::Sequential make_net(const std::string& name) {
  return kiln::nn::Sequential({kiln::nn::Dense(8, kiln::nn::Activation::tanh), kiln::nn::Dense(1)},
                              name);
}

void train_step(kiln::nn::Sequential& net, kiln::optim::Optimizer& opt, const Tensor& x,
                const Tensor& y) {
  kiln::GradientTape tape;
  const Tensor loss = kiln::mean(kiln::square(net(x) - y));
  opt.apply(tape.gradient(loss, net.trainable_variables()), net.trainable_variables());
}

std::unique_ptr<kiln::optim::Optimizer> make_optimizer(bool adam) {
  if (adam)
    return std::make_unique<kiln::optim::Adam>(kiln::optim::AdamOptions{.learning_rate = 0.01});
  return std::make_unique<kiln::optim::SGD>(
      kiln::optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
}

struct Case {
  std::string name;
  bool traced = false, adam = false;
  int aggregate = 0;  // replicas_to_aggregate
  int max_lag = 20;
  std::int64_t fusion_bytes = std::int64_t{4} << 20;
  bool slow_last = true;  // the last rank sleeps before each step
};

/// Runs one case; returns the number of buckets each step sends (for the dropped count).
std::int64_t run(const Case& c) {
  const int rank = dist::rank(), size = dist::size();
  const std::int64_t per_rank = 4;
  const Tensor x = kiln::random::normal({per_rank * size, 5}, 0.0, 1.0, 21);
  const Tensor y = kiln::sum(kiln::square(x), {1}, true) * 0.1;
  const Tensor my_x = kiln::slice(x, 0, rank * per_rank, (rank + 1) * per_rank);
  const Tensor my_y = kiln::slice(y, 0, rank * per_rank, (rank + 1) * per_rank);
  // The reference trains on the rows of the ranks whose gradients count.
  const Tensor ref_x = kiln::slice(x, 0, 0, per_rank * c.aggregate);
  const Tensor ref_y = kiln::slice(y, 0, 0, per_rank * c.aggregate);
  // A first step on rows every rank shares: which ranks it combines does not matter, and it
  // takes the one-time layout check (an allreduce all ranks meet at) out of the timed steps.
  const Tensor warm_x = kiln::slice(x, 0, 0, per_rank), warm_y = kiln::slice(y, 0, 0, per_rank);

  kiln::nn::Sequential net = make_net(c.name + "_net"), ref = make_net(c.name + "_ref");
  net(x);
  ref(x);
  mpi_check::same_start(net.variables(), ref.variables());

  auto opt = make_optimizer(c.adam), ref_opt = make_optimizer(c.adam);
  dist::DistributedOptimizer sync(*opt, {.fusion_bytes = c.fusion_bytes,
                                         .replicas_to_aggregate = c.aggregate,
                                         .total_num_replicas = size,
                                         .max_lag = c.max_lag});
  auto step = kiln::function([&](const Tensor& xs, const Tensor& ys) {
    train_step(net, sync, xs, ys);
    return std::vector<Tensor>{};
  });
  const auto one_step = [&](const Tensor& xs, const Tensor& ys) {
    if (c.traced)
      step(xs, ys);
    else
      train_step(net, sync, xs, ys);
  };
  one_step(warm_x, warm_y);
  train_step(ref, *ref_opt, warm_x, warm_y);

  const bool slow = c.slow_last && rank == size - 1;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    if (slow) std::this_thread::sleep_for(slow_step);
    one_step(my_x, my_y);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int i = 0; i < steps; ++i) train_step(ref, *ref_opt, ref_x, ref_y);

  const double tolerance = c.adam ? 1e-4 : 1e-5;
  const double difference = largest_difference(net.variables(), ref.variables());
  check(difference < tolerance, c.name + ": weights of the first " + std::to_string(c.aggregate) +
                                    " ranks' rows (difference " + std::to_string(difference) + ")");
  check(opt->iterations().value().item<std::int64_t>() == steps + 1,
        c.name + ": the global step is " + std::to_string(steps + 1) + " on every rank");

  // The times of every rank, to see who waited for whom.
  const auto times = dist::allgather(kiln::tensor<double>({seconds}, {1})).to_vector<double>();
  if (c.slow_last && rank == 0) {
    const double slowest = times.back();
    double fast = 0;
    for (int r = 0; r + 1 < size; ++r) fast = std::max(fast, times[static_cast<std::size_t>(r)]);
    if (c.max_lag >= steps)
      check(fast < 0.5 * slowest, c.name + ": the fast ranks did not wait for the slow one (" +
                                      std::to_string(fast) + " s against " +
                                      std::to_string(slowest) + " s)");
    else
      check(fast > 0.6 * slowest, c.name + ": max_lag " + std::to_string(c.max_lag) +
                                      " held the fast ranks back (" + std::to_string(fast) +
                                      " s against " + std::to_string(slowest) + " s)");
  }
  // Buckets per step: one for these few bytes, or one per gradient with tiny fusion buffers.
  return c.fusion_bytes >= 1024 ? 1 : static_cast<std::int64_t>(net.trainable_variables().size());
}

/// train::fit takes a sync-replicas DistributedOptimizer as its optimizer: with every process
/// aggregated it trains as fit's own allreduce does.
void check_fit() {
  const int size = dist::size();
  const std::int64_t per = 4, n = per * size * 3;
  const Tensor x = kiln::random::normal({n, 5}, 0.0, 1.0, 31);
  const Tensor y = kiln::sum(kiln::square(x), {1}, true) * 0.1;
  kiln::nn::Sequential net = make_net("fit_net"), ref = make_net("fit_ref");
  net(x);
  ref(x);
  mpi_check::same_start(net.variables(), ref.variables());
  kiln::optim::Adam adam({.learning_rate = 0.01}), ref_adam({.learning_rate = 0.01});
  dist::DistributedOptimizer sync(adam, {.replicas_to_aggregate = size});
  const kiln::train::FitOptions options{
      .epochs = 2, .batch_size = per, .seed = 5, .verbose = 0, .distributed = true};
  const auto history =
      kiln::train::fit(net, sync, kiln::nn::losses::mean_squared_error, x, y, options);
  const auto plain =
      kiln::train::fit(ref, ref_adam, kiln::nn::losses::mean_squared_error, x, y, options);
  check(history.loss.size() == 2 && plain.loss.size() == 2 &&
            std::abs(history.loss[1] - plain.loss[1]) < 1e-5,
        "fit with sync replicas logs the losses of fit's allreduce");
  check(largest_difference(net.variables(), ref.variables()) < 1e-5,
        "fit with sync replicas, every process aggregated, gives fit's allreduce weights");
  check(adam.gradient_aggregator() == &sync, "fit keeps the caller's DistributedOptimizer");
}

void check_errors() {
  const int size = dist::size();
  kiln::optim::SGD sgd({.learning_rate = 0.1});
  mpi_check::check_error(
      [&] { dist::DistributedOptimizer d(sgd, {.replicas_to_aggregate = size + 1}); },
      "the job has only", "more replicas to aggregate than processes");
  mpi_check::check_error(
      [&] { dist::DistributedOptimizer d(sgd, {.total_num_replicas = size + 1}); },
      "total_num_replicas is", "total_num_replicas other than the process count");
  mpi_check::check_error([&] { dist::DistributedOptimizer d(sgd, {.max_lag = 0}); },
                         "max_lag must be >= 1", "max_lag 0");
  mpi_check::check_error(
      [&] {
        dist::DistributedOptimizer d(sgd, {.replicas_to_aggregate = 3, .total_num_replicas = 2});
      },
      "more than total_num_replicas", "replicas_to_aggregate above total_num_replicas");
}

}  // namespace

int main() {
  dist::init();
  const int size = dist::size();
  const int backups = 1;  // the slow last rank
  std::int64_t expected_dropped = 0;
  const auto count = [&](const Case& c) {
    const std::int64_t buckets = run(c);
    expected_dropped += (steps + 1) * buckets * (size - c.aggregate);
  };
  count({.name = "eager_sgd", .aggregate = size - backups});
  count({.name = "traced_adam_small_buckets",
         .traced = true,
         .adam = true,
         .aggregate = size - backups,
         .fusion_bytes = 1});
  count(
      {.name = "traced_sgd_max_lag_1", .traced = true, .aggregate = size - backups, .max_lag = 1});
  count({.name = "all_aggregated", .traced = true, .aggregate = size, .slow_last = false});
  check_fit();
  check_errors();

  const int rank = dist::rank();
  const int status = mpi_check::finish("sync replicas");
  // finalize() received the last late buckets: now process 0 has counted every dropped one.
  if (rank == 0) {
    const std::int64_t dropped = dist::dropped_gradients();
    std::printf("process 0 dropped %lld gradient buckets (expected %lld)\n",
                static_cast<long long>(dropped), static_cast<long long>(expected_dropped));
    if (dropped != expected_dropped) return 1;
  }
  return status;
}

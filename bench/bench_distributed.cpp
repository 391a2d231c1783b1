// Data-parallel training across processes (issue 22). Run under mpirun with 1 and 2 processes
// (bench/distributed.sh does both and prints the scaling); every process measures the same
// fixed number of steps (a repetition count chosen per process would make the processes call
// different numbers of collectives), and rank 0 reports medians over samples.
//   1. user scenario 2's train step (LSTM(64, return_sequences) -> LSTM(32) -> Dense(1,
//      sigmoid), 5 steps, 10 features, Adam, binary cross-entropy), global batch 64 split over
//      the processes: strong scaling;
//   2. workload 7's train step (one nn::LSTM(256) layer, 128 features, 50 steps, SGD, MSE of the
//      last h; bench/lstm_model.hpp), global batch 64 split over the processes: strong scaling;
//   3. an MLP of 16 Dense(256) layers (32 gradients, 4.2 MB), global batch 256: steps/s for
//      fusion_bytes from 0 (one allreduce per gradient) to 16 MiB, the sweep behind the
//      default;
//   4. allreduce time for 4 KiB .. 16 MiB of f32: kiln's gradient bucket path (a traced
//      collective_start/collective_wait, as DistributedOptimizer emits) and
//      kiln::distributed::allreduce (eager: layout check, thread hop). bench_mpi_allreduce
//      times MPI_Allreduce alone on the same bytes (an osu_allreduce-style loop) for the ratio.
// Usage: mpirun -np N kiln_bench_distributed [--quick]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include "lstm_model.hpp"
#include "ops/collective.hpp"

namespace {

using kiln::Tensor;
namespace dist = kiln::distributed;
namespace nn = kiln::nn;
using Clock = std::chrono::steady_clock;

bool quick = false;

/// Median seconds per call of fn over `samples` samples of `calls` calls each, the same counts
/// on every process (after `warmup` calls), the processes lined up before each sample.
double median_seconds(int warmup, int samples, int calls, const std::function<void()>& fn) {
  if (quick) warmup = 1, samples = 1, calls = 1;
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> per_call;
  for (int s = 0; s < samples; ++s) {
    dist::barrier();
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    per_call.push_back(std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

/// A traced train step of `model` on (x, y) with `opt` wrapped for the processes.
template <class M>
std::function<void()> train_step(M& model, kiln::optim::Optimizer& opt, const Tensor& x,
                                 const Tensor& y, bool binary) {
  auto step = kiln::function([&model, &opt, binary](const Tensor& in, const Tensor& target) {
    kiln::GradientTape tape;
    const Tensor out = model(in);
    const Tensor loss = binary ? kiln::nn::losses::binary_crossentropy(target, out)
                               : kiln::mean(kiln::square(out - target));
    opt.apply(tape.gradient(loss, model.trainable_variables()), model.trainable_variables());
    return loss;
  });
  return [step, x, y]() mutable { step(x, y); };
}

Tensor my_rows(const Tensor& t, std::int64_t global) {
  const std::int64_t per = global / dist::size();
  return kiln::slice(t, 0, dist::rank() * per, (dist::rank() + 1) * per);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      quick = true;
    } else {
      fmt::print(stderr, "usage: kiln_bench_distributed [--quick] (under mpirun)\n");
      return 2;
    }
  }
  dist::init();
  const int rank = dist::rank(), size = dist::size();
  const auto say = [&](const std::string& line) {
    if (rank == 0) fmt::print("{}\n", line);
  };
  say(fmt::format("kiln_bench_distributed: {} process{}, KILN_NUM_THREADS={}", size,
                  size == 1 ? "" : "es",
                  std::getenv("KILN_NUM_THREADS") ? std::getenv("KILN_NUM_THREADS") : "unset"));

  {  // 1. scenario 2
    const std::int64_t global = 64;
    const Tensor x_all = kiln::random::normal({global, 5, 10}, 0.0, 1.0, 1);
    const Tensor y_all = kiln::cast(kiln::sum(kiln::slice(x_all, 2, 0, 1), {1}) > 0.f, kiln::f32);
    nn::Sequential model({nn::LSTM(64, {.return_sequences = true}), nn::LSTM(32),
                          nn::Dense(1, nn::Activation::sigmoid)},
                         "net");
    const Tensor x = my_rows(x_all, global), y = my_rows(y_all, global);
    model(x);
    dist::broadcast_variables(model.variables());
    kiln::optim::Adam adam({.learning_rate = 1e-3});
    dist::DistributedOptimizer opt(adam);
    const double s = median_seconds(20, 15, 20, train_step(model, opt, x, y, true));
    say(fmt::format("scenario2_step global_batch={} per_process={} median_ms={:.4f}", global,
                    global / size, s * 1e3));
  }

  {  // 2. workload 7
    const std::int64_t global = 64, features = 128, steps = 50, units = 256;
    const Tensor x_all = kiln::random::normal({global, steps, features}, 0.0, 1.0, 4);
    const Tensor y_all = kiln::random::normal({global, units}, 0.0, 1.0, 5);
    const Tensor x = my_rows(x_all, global), y = my_rows(y_all, global);
    kiln::bench::LstmModel model(units, {}, 0.01);
    model.create_weights(x, 6);
    dist::broadcast_variables(model.variables());
    dist::DistributedOptimizer opt(model.opt);
    auto step = kiln::function(
        [&model](const Tensor& in, const Tensor& target) { return model.step(in, target); });
    const double s = median_seconds(3, 7, 3, [&] { step(x, y); });
    say(fmt::format("lstm256_step global_batch={} per_process={} median_ms={:.4f}", global,
                    global / size, s * 1e3));
  }

  {  // 3. fusion
    const std::int64_t global = 256, width = 256;
    const Tensor x_all = kiln::random::normal({global, width}, 0.0, 1.0, 2);
    const Tensor y_all = kiln::random::normal({global, width}, 0.0, 1.0, 3);
    const Tensor x = my_rows(x_all, global), y = my_rows(y_all, global);
    for (const std::int64_t fusion :
         {std::int64_t{0}, std::int64_t{64} << 10, std::int64_t{256} << 10, std::int64_t{1} << 20,
          std::int64_t{4} << 20, std::int64_t{16} << 20}) {
      nn::Sequential mlp(fmt::format("mlp_{}", fusion));
      for (int i = 0; i < 16; ++i) mlp.add(nn::Dense(width, nn::Activation::tanh));
      mlp(x);
      dist::broadcast_variables(mlp.variables());
      kiln::optim::SGD sgd({.learning_rate = 1e-3});
      dist::DistributedOptimizerOptions options;
      options.fusion_bytes = fusion;
      dist::DistributedOptimizer opt(sgd, options);
      const double s = median_seconds(10, 15, 10, train_step(mlp, opt, x, y, false));
      say(fmt::format("mlp16x256_step fusion_bytes={} median_ms={:.4f} steps_per_s={:.1f}",
                      options.fusion_bytes, s * 1e3, 1.0 / s));
    }
  }

  // 4. bandwidth
  for (std::int64_t bytes = 4096; bytes <= (std::int64_t{16} << 20); bytes *= 4) {
    const std::int64_t n = bytes / 4;
    const Tensor g = kiln::full({n}, 1.0 + rank, kiln::f32);
    // The ops DistributedOptimizer emits for one bucket, compiled.
    auto bucket = kiln::function([n](const Tensor& t) {
      using kiln::detail::CollectiveKind;
      const Tensor ticket = kiln::detail::collective_start(CollectiveKind::sum, {&t, 1});
      // One element out, so the result lives in the plan's arena as in a train step (a whole
      // output would be a fresh buffer per call).
      return kiln::slice(
          kiln::detail::collective_wait(ticket, CollectiveKind::sum, kiln::f32, {n}, 0.5), 0, 0, 1);
    });
    const int calls = bytes >= (1 << 20) ? 5 : 50;
    const double graph = median_seconds(5, 11, calls, [&] { bucket(g); });
    const double eager = median_seconds(5, 11, calls, [&] { dist::allreduce(g); });
    say(fmt::format("allreduce bytes={} kiln_bucket_us={:.2f} kiln_eager_us={:.2f}", bytes,
                    graph * 1e6, eager * 1e6));
  }
  dist::finalize();
  return 0;
}

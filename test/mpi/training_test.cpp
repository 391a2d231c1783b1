// Data-parallel training across real processes (kiln::distributed::DistributedOptimizer): run by
// scripts/test.sh with `mpirun -np 2` and `-np 4 --oversubscribe`. Each rank trains on its part
// of a global batch with its gradients averaged over the ranks; the same process also trains a
// reference copy of the model, alone, on the whole batch. After 10 steps the two must hold the
// same weights (within float rounding), on every rank. Rank 0 prints the summary line.
#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include "mpi_check.hpp"

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dist = kiln::distributed;
using kiln::Tensor;
using kiln::Variable;

namespace {

using mpi_check::check;
using mpi_check::largest_difference;

/// Word ids [rows, 3] -> embedding [rows, 3, 8] -> with 6 features -> tanh(16) -> 1.
struct Net : kiln::Module {
  kiln::nn::Embedding embed{40, 8};
  kiln::nn::Dense hidden{16, kiln::nn::Activation::tanh};
  kiln::nn::Dense out{1};
  explicit Net(const std::string& name) : Module(name) {
    add_module("embed", embed);
    add_module("hidden", hidden);
    add_module("out", out);
  }
  Tensor operator()(const Tensor& ids, const Tensor& features) {
    const Tensor e = kiln::reshape(embed(ids), {ids.dim(0), 24});
    return out(hidden(kiln::concat({e, features}, 1)));
  }
};

struct Data {
  Tensor ids, features, target;
  Data rows(std::int64_t from, std::int64_t to) const {
    return {kiln::slice(ids, 0, from, to), kiln::slice(features, 0, from, to),
            kiln::slice(target, 0, from, to)};
  }
};

using Step = std::function<void(Net&, kiln::optim::Optimizer&, const Data&)>;

/// One step: mean squared error, its gradients, an update (eager, or traced once per model).
void train_step(Net& net, kiln::optim::Optimizer& opt, const Data& d) {
  kiln::GradientTape tape;
  const Tensor loss = kiln::mean(kiln::square(net(d.ids, d.features) - d.target));
  opt.apply(tape.gradient(loss, net.trainable_variables()), net.trainable_variables());
}

/// Trains a distributed model and a reference for 10 steps; returns the largest difference.
double train_both(const std::string& name, bool traced, bool adam, std::int64_t fusion_bytes,
                  std::string* listing) {
  const int rank = dist::rank(), size = dist::size();
  const std::int64_t per_rank = 6, global = per_rank * size;
  Net net(name + "_net"), ref(name + "_ref");
  const Data all{kiln::random::uniform_int({global, 3}, 0, 40, 7, kiln::i64),
                 kiln::random::normal({global, 6}, 0.0, 1.0, 8),
                 kiln::random::normal({global, 1}, 0.0, 1.0, 9)};
  const Data mine = all.rows(rank * per_rank, (rank + 1) * per_rank);
  net(mine.ids, mine.features);  // builds the variables
  ref(all.ids, all.features);
  // Different on every rank before the broadcast: rank 0's values must win everywhere.
  for (const Variable& v : net.variables()) v.assign(v.value() + static_cast<double>(rank));
  mpi_check::same_start(net.variables(), ref.variables());
  const auto nv = net.variables();
  Net start(name + "_start");
  start(all.ids, all.features);
  const auto sv = start.variables();
  for (std::size_t i = 0; i < nv.size(); ++i) sv[i].assign(nv[i].value());

  std::unique_ptr<kiln::optim::Optimizer> opt, ref_opt;
  if (adam) {
    opt = std::make_unique<kiln::optim::Adam>(kiln::optim::AdamOptions{.learning_rate = 0.01});
    ref_opt = std::make_unique<kiln::optim::Adam>(kiln::optim::AdamOptions{.learning_rate = 0.01});
  } else {
    opt = std::make_unique<kiln::optim::SGD>(
        kiln::optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
    ref_opt = std::make_unique<kiln::optim::SGD>(
        kiln::optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
  }
  dist::DistributedOptimizer sync(*opt, {.fusion_bytes = fusion_bytes});
  auto step = kiln::function([&](const Tensor& ids, const Tensor& features, const Tensor& y) {
    train_step(net, sync, {ids, features, y});
    return std::vector<Tensor>{};
  });
  for (int i = 0; i < 10; ++i) {
    if (traced)
      step(mine.ids, mine.features, mine.target);
    else
      train_step(net, sync, mine);
    train_step(ref, *ref_opt, all);
  }
  // The test means something only if training moved the weights.
  check(largest_difference(net.variables(), start.variables()) > 1e-3,
        name + ": the weights moved");
  if (traced && listing != nullptr)
    *listing = step.get_concrete_function(mine.ids, mine.features, mine.target).graph().to_string();
  return largest_difference(net.variables(), ref.variables());
}

/// train::fit with distributed = true and batch B per process against fit in this process alone
/// with batch p x B, on the same data and shuffle: the same weights, losses and val_losses.
void check_fit() {
  const int size = dist::size();
  const std::int64_t per = 6, n = per * size * 4;
  const Tensor x = kiln::random::normal({n, 5}, 0.0, 1.0, 11);
  const Tensor y = kiln::sum(kiln::square(x), {1}, true) * 0.1;
  const auto model = [](const std::string& name) {
    return kiln::nn::Sequential(
        {kiln::nn::Dense(8, kiln::nn::Activation::tanh), kiln::nn::Dense(1)}, name);
  };
  kiln::nn::Sequential net = model("fit_net"), ref = model("fit_ref");
  net(x);
  ref(x);
  mpi_check::same_start(net.variables(), ref.variables());
  const auto nv = net.variables(), rv = ref.variables();
  kiln::optim::Adam adam({.learning_rate = 0.01}), ref_adam({.learning_rate = 0.01});
  const auto mse = kiln::nn::losses::mean_squared_error;
  kiln::train::FitOptions options{.epochs = 3, .batch_size = per, .seed = 5, .verbose = 0};
  options.validation_split = 0.25;
  options.distributed = true;
  const auto history = kiln::train::fit(net, adam, mse, x, y, options);
  options.distributed = false;
  options.batch_size = per * size;
  const auto alone = kiln::train::fit(ref, ref_adam, mse, x, y, options);
  bool same_losses = history.loss.size() == 3 && alone.loss.size() == 3;
  for (std::size_t e = 0; same_losses && e < 3; ++e)
    same_losses = std::abs(history.loss[e] - alone.loss[e]) < 1e-5 &&
                  std::abs(history.val_loss[e] - alone.val_loss[e]) < 1e-5;
  check(same_losses, "distributed fit logs the losses of one process with batch p x B");
  double worst = 0;
  for (std::size_t i = 0; i < nv.size(); ++i) {
    const auto a = nv[i].value().to_vector<float>(), b = rv[i].value().to_vector<float>();
    for (std::size_t k = 0; k < a.size(); ++k)
      worst = std::max(worst, static_cast<double>(std::abs(a[k] - b[k])));
  }
  check(worst < 1e-5, "distributed fit gives the weights of one process with batch p x B (" +
                          std::to_string(worst) + ")");
  check(adam.gradient_aggregator() == nullptr, "fit removes the synchronisation it added");
}

}  // namespace

int main() {
  dist::init();

  std::string listing;
  const double traced_sgd = train_both("traced_sgd", true, false, std::int64_t{4} << 20, nullptr);
  check(traced_sgd < 1e-5, "traced SGD (one bucket) matches one process on the whole batch (" +
                               std::to_string(traced_sgd) + ")");
  const double traced_adam = train_both("traced_adam", true, true, 256, &listing);
  check(traced_adam < 1e-4,
        "traced Adam (256-byte buckets) matches one process (" + std::to_string(traced_adam) + ")");
  const double eager = train_both("eager_sgd", false, false, 256, nullptr);
  check(eager < 1e-5,
        "eager SGD (256-byte buckets) matches one process (" + std::to_string(eager) + ")");

  check_fit();

  // In the compiled step the first bucket is sent before the backward pass ends: a matmul (of
  // an earlier layer's gradient) runs after it.
  const auto first_start = listing.find("collective_start");
  const auto last_matmul = listing.rfind("matmul");
  check(first_start != std::string::npos && last_matmul != std::string::npos &&
            first_start < last_matmul,
        "a bucket is queued while the backward pass still runs");

  return mpi_check::finish("kiln::distributed training");
}

// Checkpoints of a distributed fit: written by rank 0 alone, restored on another number of
// processes. scripts/test.sh runs `checkpoint_test save DIR` under mpirun -np 4, then
// `checkpoint_test restore DIR` under -np 2 (and the other way round):
//   save     a distributed fit with a ModelCheckpoint (every process passes it; only rank 0
//            runs it) and a CSVLogger; the checkpoint must hold the fit's final weights, and
//            rank 0's files must be the only ones;
//   restore  every process loads the checkpoint into a fresh model: all hold the saved
//            weights; a further distributed epoch keeps them equal on every process.
#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include "mpi_check.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace dist = kiln::distributed;
using kiln::Tensor;

namespace {

using mpi_check::check;

kiln::nn::Sequential make_model() {
  return kiln::nn::Sequential({kiln::nn::Dense(8, kiln::nn::Activation::tanh), kiln::nn::Dense(1)},
                              "net");
}

/// Whether every process holds the same values in `vars` (their largest and smallest agree).
bool same_everywhere(const std::vector<kiln::Variable>& vars) {
  for (const kiln::Variable& v : vars) {
    const Tensor high = dist::allreduce(v.value(), dist::ReduceOp::max);
    const Tensor low = dist::allreduce(v.value(), dist::ReduceOp::min);
    if (kiln::max(kiln::abs(high - low)).item<float>() != 0.0f) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode != "save" && mode != "restore") {
    std::fprintf(stderr, "usage: checkpoint_test save|restore DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[2];
  dist::init();
  const int rank = dist::rank();
  const Tensor x = kiln::random::normal({96, 5}, 0.0, 1.0, 3);
  const Tensor y = kiln::sum(x, {1}, true) * 0.5;
  kiln::nn::Sequential net = make_model();
  kiln::optim::Adam adam({.learning_rate = 0.01});
  kiln::train::FitOptions options{.epochs = 2, .batch_size = 8, .seed = 1, .verbose = 0};
  options.distributed = true;
  const auto weights = dir / "weights.safetensors";

  if (mode == "save") {
    kiln::train::ModelCheckpoint checkpoint(weights.string());
    kiln::train::CSVLogger log(dir / "log.csv");
    options.callbacks = {checkpoint, log};
    kiln::train::fit(net, adam, kiln::nn::losses::mean_squared_error, x, y, options);
    dist::barrier();
    check(std::filesystem::exists(weights) && std::filesystem::exists(dir / "log.csv"),
          "rank 0 wrote the checkpoint and the log");
    check(rank == 0 ? checkpoint.saved().size() == 2 : checkpoint.saved().empty(),
          "only rank 0 ran ModelCheckpoint");
    kiln::nn::Sequential loaded = make_model();
    loaded(x);
    kiln::load_weights(loaded, weights.string());
    bool same = true;
    const auto a = net.variables(), b = loaded.variables();
    for (std::size_t i = 0; i < a.size(); ++i)
      same = same && kiln::max(kiln::abs(a[i].value() - b[i].value())).item<float>() == 0.0f;
    check(same, "the checkpoint holds the fit's final weights");
  } else {
    net(x);
    for (const kiln::Variable& v : net.variables())  // different everywhere before the load
      v.assign(v.value() + static_cast<double>(rank + 1));
    kiln::load_weights(net, weights.string());
    check(same_everywhere(net.variables()), "every process restored the same weights");
    kiln::train::fit(net, adam, kiln::nn::losses::mean_squared_error, x, y, options);
    check(same_everywhere(net.variables()), "and they stay equal while training goes on");
  }

  return mpi_check::finish("kiln::distributed checkpoint " + mode);
}

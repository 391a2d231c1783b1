// A job whose process fails mid-training must end with a clear message on every other process,
// never hang. Run by scripts/check-distributed-failure.sh under mpirun, which expects the job
// to fail and checks each survivor's message:
//   failure_test kill   the last rank kills itself (SIGKILL) in its 4th step: mpirun stops the
//                       others, which say why;
//   failure_test stall  the last rank stops calling collectives: the others' next step fails
//                       after InitOptions::timeout_seconds (2 s) with kiln's error.
#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace dist = kiln::distributed;
using kiln::Tensor;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "stall") {
    std::fprintf(stderr, "usage: failure_test kill|stall\n");
    return 2;
  }
  dist::init({.timeout_seconds = 2});
  const int rank = dist::rank(), last = dist::size() - 1;
  kiln::nn::Dense layer(4);
  kiln::optim::SGD sgd({.learning_rate = 0.1});
  dist::DistributedOptimizer sync(sgd);
  const Tensor x = kiln::random::normal({8, 5}, 0.0, 1.0, 1);
  auto step = kiln::function([&](const Tensor& in) {
    kiln::GradientTape tape;
    const Tensor loss = kiln::mean(kiln::square(layer(in)));
    sync.apply(tape.gradient(loss, layer.trainable_variables()), layer.trainable_variables());
    return loss;
  });
  try {
    for (int i = 0; i < 50; ++i) {
      if (i == 3 && rank == last) {
        if (mode == "kill") std::raise(SIGKILL);
        sleep(30);  // alive, but no longer calling collectives
        return 0;
      }
      step(x);
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "rank %d failed: %s\n", rank, e.what());
    return 3;
  }
  std::fprintf(stderr, "rank %d: training ended although a process failed\n", rank);
  return 1;
}

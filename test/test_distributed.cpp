// kiln::distributed in one process without mpirun: before init() every call is a clear error
// (the collectives themselves run across processes in test/mpi/distributed_test.cpp, which
// scripts/test.sh starts under mpirun).
#include <catch2/catch.hpp>

#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

#include "ops/collective.hpp"

namespace dist = kiln::distributed;

TEST_CASE("kiln::distributed before init: every call says to call init", "[distributed]") {
  CHECK_FALSE(dist::initialized());
  const kiln::Tensor x = kiln::ones({3});
  if (!dist::available()) {
    CHECK_THROWS_WITH(dist::init(), Catch::Contains("[distributed.init] this kiln was built "
                                                    "without MPI"));
    CHECK_THROWS_WITH(dist::allreduce(x), Catch::Contains("built without MPI"));
    return;
  }
  CHECK_THROWS_WITH(dist::rank(), Catch::Contains("[distributed.rank] MPI is not started: call "
                                                  "kiln::distributed::init() first"));
  CHECK_THROWS_WITH(dist::size(), Catch::Contains("call kiln::distributed::init() first"));
  CHECK_THROWS_WITH(dist::allreduce(x), Catch::Contains("[distributed.allreduce] MPI is not "
                                                        "started"));
  CHECK_THROWS_WITH(dist::broadcast(x), Catch::Contains("[distributed.broadcast]"));
  CHECK_THROWS_WITH(dist::allgather(x), Catch::Contains("[distributed.allgather]"));
  CHECK_THROWS_WITH(dist::barrier(), Catch::Contains("[distributed.barrier]"));
  CHECK_THROWS_WITH(dist::finalize(), Catch::Contains("[distributed.finalize] MPI is not "
                                                      "started"));
}

TEST_CASE("DistributedOptimizer before init: apply says to call init", "[distributed]") {
  kiln::optim::SGD sgd({.learning_rate = 0.1});
  kiln::Variable w(kiln::ones({2}), "dist_w");
  {
    dist::DistributedOptimizer sync(sgd);
    CHECK(sgd.gradient_aggregator() == &sync);
    kiln::optim::SGD other({.learning_rate = 0.1});
    CHECK_THROWS_WITH(dist::DistributedOptimizer(sync.optimizer()),
                      Catch::Contains("already has a gradient aggregator"));
    CHECK_THROWS_WITH(sync.apply({kiln::ones({2})}, {w}),
                      Catch::Contains("[distributed.DistributedOptimizer] kiln::distributed is "
                                      "not started"));
    CHECK(w.value().to_vector<float>() == std::vector<float>{1, 1});  // nothing applied
    CHECK_THROWS_WITH(dist::DistributedOptimizer(other, {.fusion_bytes = -1}),
                      Catch::Contains("fusion_bytes must be >= 0"));
  }
  CHECK(sgd.gradient_aggregator() == nullptr);  // removed with the wrapper
  sgd.apply({kiln::ones({2})}, {w});            // a plain optimizer again
  CHECK(w.value().to_vector<float>()[0] == Approx(0.9));
}

TEST_CASE("collective ops: a bucket is queued right after its input, waited for at its reader",
          "[distributed]") {
  using kiln::detail::CollectiveKind;
  auto f = kiln::function([](const kiln::Tensor& x) {
    const kiln::Tensor ready = x * 2.0;             // a gradient that is ready early
    const kiln::Tensor later = kiln::matmul(x, x);  // backward work still to come
    const kiln::Tensor ticket = kiln::detail::collective_start(CollectiveKind::sum, {&ready, 1});
    const kiln::Tensor sum =
        kiln::detail::collective_wait(ticket, CollectiveKind::sum, kiln::f32, {16}, 0.5);
    return std::vector<kiln::Tensor>{later, kiln::reshape(sum, {4, 4}) + 1.0};
  });
  const kiln::Tensor x = kiln::ones({4, 4});
  const std::string listing = f.get_concrete_function(x).graph().to_string();
  const auto start = listing.find("collective_start"), wait = listing.find("collective_wait");
  const auto matmul = listing.find("matmul");
  REQUIRE(start != std::string::npos);
  CHECK(start < matmul);  // sent while the matmul runs
  CHECK(matmul < wait);   // and waited for only after it
  // Running it needs kiln::distributed: without it, a clear error (eagerly too).
  CHECK_THROWS_WITH(f(x), Catch::Contains("kiln::distributed is not started"));
  CHECK_THROWS_WITH(kiln::detail::collective_start(CollectiveKind::sum, {&x, 1}),
                    Catch::Contains("kiln::distributed is not started"));
  const kiln::Tensor ids = kiln::zeros({3}, kiln::i64);
  CHECK_THROWS_WITH(kiln::detail::collective_start(CollectiveKind::sum, {&ids, 1}),
                    Catch::Contains("sums f32 or f64 tensors"));
}

TEST_CASE("fit with distributed = true before init says to call init", "[distributed]") {
  kiln::nn::Dense layer(1);
  kiln::optim::SGD sgd({.learning_rate = 0.1});
  const kiln::Tensor x = kiln::ones({4, 2}), y = kiln::ones({4, 1});
  kiln::train::FitOptions options{.verbose = 0};
  options.distributed = true;
  CHECK_THROWS_WITH(
      kiln::train::fit(layer, sgd, kiln::nn::losses::mean_squared_error, x, y, options),
      Catch::Contains("[train.fit] distributed = true needs kiln::distributed::init() first"));
  CHECK(sgd.gradient_aggregator() == nullptr);
}

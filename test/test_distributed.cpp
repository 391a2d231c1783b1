// kiln::distributed in one process without mpirun: before init() every call is a clear error
// (the collectives themselves run across processes in test/mpi/distributed_test.cpp, which
// scripts/test.sh starts under mpirun).
#include <catch2/catch.hpp>

#include <kiln/distributed.hpp>
#include <kiln/kiln.hpp>

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

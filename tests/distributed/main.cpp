// Catch2's main for test_distributed: MPI around the whole session. Every rank runs every test
// case in the same order, so their collectives line up; the exit code is the worst over ranks.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdint>

#include "nn/distributed/process_group.hpp"

int main(int argc, char** argv) {
    xgrad::distributed::Environment mpi(argc, argv);
    int failed = Catch::Session().run(argc, argv);
    std::int64_t worst = failed;
    xgrad::distributed::all_reduce(&worst, 1, xgrad::distributed::ReduceOp::max);
    return static_cast<int>(worst);
}

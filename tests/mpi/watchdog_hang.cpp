// A program that hangs on purpose, for the watchdog test. 3 ranks, timeout 2 s.
//   absent:   rank 2 never calls the all-reduce the others wait in.
//   staggered: rank 1 arrives 1.5 s after rank 0, rank 2 never: rank 1 is waiting when rank 0
//             times out, so only rank 2 is named.
//   late:     rank 2 arrives 0.5 s late, within the timeout: no error, the right sum.
//   pending:  as absent, with a second all-reduce in flight behind the first: when the first times
//             out, the second (destroyed unwaited as the error unwinds) gives up at once instead of
//             waiting out a timeout of its own.
// Expected for absent: the waiting ranks fail with an error naming rank 2, and the job ends.
#include <ATen/ops/ones.h>
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/error.h"
#include "runtime/dist/mpi_communicator.h"
#include "runtime/dist/mpi_runtime.h"

using namespace shardtune;

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  const std::string scenario = argc > 1 ? argv[1] : "absent";
  try {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    dist::MpiCommunicator world(dup, "world", 2.0);
    common::set_process_identity({"", world.rank(), world.size(), 0, world.rank()});
    at::Tensor x = at::ones({16}, at::kFloat);
    if (world.rank() == 1 && scenario == "staggered") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (world.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(scenario == "late" ? 500 : 60000));
      if (scenario != "late") return 0;
    }
    if (scenario == "pending") {
      at::Tensor y = at::ones({16}, at::kFloat);
      dist::WorkHandle first = world.start_all_reduce(x, dist::ReduceOp::kSum);
      dist::WorkHandle second = world.start_all_reduce(y, dist::ReduceOp::kSum);
      first->wait();
      second->wait();
    } else {
      world.all_reduce(x, dist::ReduceOp::kSum);
    }
    const bool right = x[0].item<float>() == 3.0f;
    fmt::print(stderr, "rank {}: the collective finished with {} sum\n", world.rank(), right ? "the right" : "a wrong");
    return right ? 0 : 4;
  } catch (const std::exception& e) {
    fmt::print(stderr, "CAUGHT {}\n", e.what());
    dist::MpiRuntime::abort(3);
  }
}

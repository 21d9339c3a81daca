// main() for GoogleTest programs run under mpirun: rank 0 prints the full report, other ranks only
// their failures, and every rank exits with the same code (failures are all-reduced), so no rank
// reports success while another failed.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <cstdio>

#include "common/error.h"
#include "runtime/dist/cpu_threads.h"
#include "runtime/dist/mpi_runtime.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, shardtune::dist::MpiRuntime::thread_level(), &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  shardtune::common::set_process_identity({host.data(), rank, size, 0, rank});
  // Each rank computes with its share of the node's cores, as jobs' ranks do (rank/rank_start.cpp).
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  shardtune::dist::use_threads(shardtune::dist::choose_threads(shardtune::dist::thread_inputs(0, local_size)).threads);

  testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("%s at world size %d\n", any_failed ? "FAILED on at least one rank" : "passed on every rank", size);
  MPI_Finalize();
  return any_failed;
}

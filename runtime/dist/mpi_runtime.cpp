// MPI lifetime.
#include "runtime/dist/mpi_runtime.h"

#include <cstdlib>

#include "common/error.h"
#include "runtime/dist/device.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  ST_MPI_CHECK(MPI_Init_thread(argc, argv, thread_level(), &provided));
  ST_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  // On a GPU, backward runs on LibTorch's device thread and collectives are waited on from there
  // and from the NCCL monitors: an MPI that gives less than asked would fail in ways that are
  // hard to trace.
  ST_CHECK(provided >= thread_level(), common::ErrorKind::kMpi,
           "MPI_Init_thread gave thread level {} where {} is needed. HINT: use an MPI built with "
           "thread support (Open MPI: --enable-mpi-thread-multiple, the default since 3.0)",
           provided, thread_level());
}

int MpiRuntime::thread_level() { return cuda_build() ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED; }

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiRuntime::abort(int code) noexcept {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace shardtune::dist

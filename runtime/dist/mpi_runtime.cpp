// MPI lifetime.
#include "runtime/dist/mpi_runtime.h"

#include <cstdlib>

#include "runtime/dist/device.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  ST_MPI_CHECK(MPI_Init_thread(argc, argv, thread_level(), &provided));
  ST_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
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

// MPI for the life of a rank: initialised once, finalized at exit, aborted on a fatal error so
// no peer waits forever on a rank that has left.
#pragma once

namespace shardtune::dist {

class MpiRuntime {
 public:
  // MPI_Init_thread at thread_level(). Errors on MPI_COMM_WORLD are returned (and thrown by
  // ST_MPI_CHECK) rather than aborting inside MPI.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // The thread support a rank asks MPI for: MPI_THREAD_MULTIPLE in a CUDA build (on a GPU,
  // backward runs on LibTorch's device thread, whose collectives may go over MPI, and each NCCL
  // group's watchdog thread answers the census over MPI); MPI_THREAD_FUNNELED otherwise, where
  // only the main thread calls MPI.
  static int thread_level();

  // Ends every rank of the job with `code`.
  [[noreturn]] static void abort(int code) noexcept;
};

}  // namespace shardtune::dist

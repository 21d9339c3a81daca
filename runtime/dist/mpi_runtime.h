// MPI for the life of a rank: initialised once, finalized at exit, aborted on a fatal error so
// no peer waits forever on a rank that has left.
#pragma once

namespace shardtune::dist {

class MpiRuntime {
 public:
  // MPI_Init_thread asking for MPI_THREAD_MULTIPLE: on a GPU, backward runs on LibTorch's device
  // thread (its collectives may go over MPI) and each NCCL group's watchdog thread answers the
  // census over MPI. Errors on MPI_COMM_WORLD are returned (and thrown by ST_MPI_CHECK) rather
  // than aborting inside MPI.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // Ends every rank of the job with `code`.
  [[noreturn]] static void abort(int code) noexcept;
};

}  // namespace shardtune::dist

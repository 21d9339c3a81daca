// An NCCL communicator on raw device pointers and CUDA streams, free of LibTorch. It is created
// non-blocking, so no call can hang forever: init, enqueue and completion are polled with a
// timeout, and a communicator that fails or times out is aborted.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>

#include "runtime/dist/dist_types.h"

namespace shardtune::dist {

// Throws common::Error(kNccl) unless rc is ncclSuccess. The message carries the call, NCCL's error
// string, NCCL's last-error text (for `comm`, which may be null) and the NCCL library version.
// Calls on a non-blocking communicator may return ncclInProgress: NcclComm handles those itself.
void check_nccl(ncclResult_t rc, ncclComm_t comm, const char* expr, const std::source_location& loc);

ncclDataType_t to_nccl(common::Dtype t);
ncclRedOp_t to_nccl(ReduceOp op);

class NcclComm {
 public:
  // Collective over every rank of `mpi_comm`: rank 0 makes the unique id and broadcasts it over
  // MPI, then each rank binds `device` (cudaSetDevice, left set on return) and joins. Throws
  // kTimeout when the communicator is not up within `timeout_s`, which also bounds every later
  // enqueue and synchronize on it.
  static NcclComm create(MPI_Comm mpi_comm, int device, double timeout_s);

  // An empty communicator (valid() is false), to be move-assigned later.
  NcclComm() = default;
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;

  bool valid() const noexcept { return comm_ != nullptr; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  double timeout_s() const noexcept { return timeout_s_; }
  // For grouped calls (ncclGroupStart/End) that this class does not wrap.
  ncclComm_t handle() const noexcept { return comm_; }

  // The collectives only enqueue on `stream`; the host does not wait for them (see synchronize).
  // Counts are in elements of `dtype`. Buffers are device pointers on device().

  // recv = concat over ranks of send; recv holds size() * send_count elements.
  void all_gather(const void* send, void* recv, size_t send_count, common::Dtype dtype, cudaStream_t stream);
  // recv = this rank's slot of reduce(send); send holds size() * recv_count elements.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, common::Dtype dtype, ReduceOp op,
                      cudaStream_t stream);
  // send == recv is allowed (in place).
  void all_reduce(const void* send, void* recv, size_t count, common::Dtype dtype, ReduceOp op, cudaStream_t stream);
  // recv = root's send; `send` is read on the root only.
  void broadcast(const void* send, void* recv, size_t count, common::Dtype dtype, int root, cudaStream_t stream);
  // On `root`, recv = concat over ranks of send (size() * count elements); elsewhere recv is not
  // used and may be null. Point-to-point sends and receives in one NCCL group.
  void gather(const void* send, void* recv, size_t count, common::Dtype dtype, int root, cudaStream_t stream);

  // NCCL's asynchronous error on this communicator, as text (empty: none, or still in progress).
  // Safe to call from another thread than the one enqueueing.
  std::string async_error() const;

  // Waits until everything enqueued on `stream` so far has finished, watching for NCCL's async
  // errors. An error aborts the communicator and throws kNccl; passing timeout_s() aborts it and
  // throws kTimeout naming `what`.
  void synchronize(cudaStream_t stream, std::string_view what);

  // Every rank has reached this point (a one-element all-reduce, then synchronize).
  void barrier(cudaStream_t stream);

  // Ends the communicator at once, without waiting for peers: in-flight collectives are cancelled.
  // The object is empty afterwards.
  void abort() noexcept;

 private:
  NcclComm(ncclComm_t comm, int rank, int size, int device, double timeout_s);

  void require_live(std::string_view op) const;
  // A non-blocking communicator may answer ncclInProgress before a call is enqueued: wait for it.
  void await_enqueued(ncclResult_t rc, std::string_view call);
  // Formats the error while the communicator still exists, aborts it, then throws kNccl.
  [[noreturn]] void fail(ncclResult_t rc, std::string_view call);
  [[noreturn]] void fail_timeout(std::string_view what);
  void release() noexcept;

  ncclComm_t comm_ = nullptr;
  int rank_ = -1;
  int size_ = 0;
  int device_ = -1;
  double timeout_s_ = 0.0;
  bool aborted_ = false;
  int32_t* barrier_buf_ = nullptr;    // (1,) on device_, allocated by the first barrier()
  cudaEvent_t done_event_ = nullptr;  // recorded by synchronize(), created on first use
};

}  // namespace shardtune::dist

#define ST_NCCL_CHECK(expr) \
  ::shardtune::dist::check_nccl((expr), nullptr, #expr, std::source_location::current())
// As ST_NCCL_CHECK, and the message includes ncclGetLastError(comm).
#define ST_NCCL_CHECK_COMM(comm, expr) \
  ::shardtune::dist::check_nccl((expr), (comm), #expr, std::source_location::current())

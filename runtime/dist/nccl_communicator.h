// Communicator over NCCL for CUDA tensors (compiled only when LibTorch has CUDA). Each group has a
// stream of its own: a collective waits there for what the caller's current stream has queued so
// far (an event), runs, and records a "done" event that Work::wait() makes the caller's stream
// wait for. Nothing in a step blocks the host. A monitor thread watches every collective in
// flight with the group's Watchdog: one that does not finish within the timeout is reported
// with the ranks that never arrived (the census over MPI), the NCCL communicator is aborted so
// no kernel waits forever, and every later call on this group throws that error.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "runtime/dist/communicator.h"
#include "runtime/dist/mpi_communicator.h"
#include "runtime/dist/nccl_comm.h"
#include "runtime/dist/watchdog.h"

namespace shardtune::dist {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over the ranks of `host` (which it does not own, and which must outlive it): rank
  // 0's unique id is broadcast over MPI, each rank joins on `device`. Needs MPI initialised with
  // MPI_THREAD_MULTIPLE (the monitor thread runs the census).
  NcclCommunicator(const MpiCommunicator& host, int device, double timeout_s);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }

  WorkHandle start_all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle start_all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void gather(const at::Tensor& input, at::Tensor& output, int root) override;
  void barrier() override;

 protected:
  // The monitor's recorded failure, else NCCL's asynchronous error on the communicator.
  std::string backend_failure() const override;

 private:
  class NcclWork;
  struct InFlight;

  // Orders the group's stream after the caller's, runs `enqueue` on it under the lock, and
  // returns the Work that orders the caller's stream after it. `keep`: tensors that must live
  // until then.
  template <class Enqueue>
  WorkHandle launch(std::string_view op, std::vector<at::Tensor> keep, Enqueue&& enqueue);
  void throw_if_failed() const;
  void monitor();

  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  std::vector<int> world_ranks_;
  NcclComm comm_;
  std::unique_ptr<Watchdog> watchdog_;  // used by the monitor thread only
  struct StreamHolder;
  std::unique_ptr<StreamHolder> stream_;
  uint64_t seq_ = 0;

  mutable std::mutex mutex_;  // guards comm_ against the monitor's abort, and the fields below
  std::condition_variable wake_;
  std::deque<std::shared_ptr<InFlight>> in_flight_;
  std::string failure_;  // set once, by the monitor, when a collective failed or timed out
  common::ErrorKind failure_kind_ = common::ErrorKind::kTimeout;
  bool stopping_ = false;
  std::thread monitor_;
};

}  // namespace shardtune::dist

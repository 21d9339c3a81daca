// Communicator over MPI for CPU tensors: non-blocking MPI collectives waited on by the watchdog.
#pragma once

#include <mpi.h>

#include <memory>

#include "runtime/dist/communicator.h"
#include "runtime/dist/watchdog.h"

namespace shardtune::dist {

// The MPI_COMM_WORLD rank of each member of `comm`, in `comm`'s rank order.
std::vector<int> world_ranks_of(MPI_Comm comm);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction). Collective over `comm`.
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }
  double timeout_s() const { return watchdog_->timeout_s(); }
  // Collectives started on this communicator so far.
  uint64_t collectives_started() const { return seq_; }

  WorkHandle start_all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle start_all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void gather(const at::Tensor& input, at::Tensor& output, int root) override;
  void barrier() override;

  // Raw bytes to, or from, one member of the group, waited for under the watchdog (whose census
  // then asks only that member). Messages between two members arrive in the order sent; they
  // never match a collective's traffic.
  void send(const void* data, int64_t bytes, int to);
  void receive(void* data, int64_t bytes, int from);

 private:
  class MpiWork;
  // Waits for `request` under the watchdog; `op` names the collective in a timeout; `peer`: a
  // message's other end.
  void wait(MPI_Request& request, std::string_view op, uint64_t seq, int peer = -1);

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  std::vector<int> world_ranks_;
  std::unique_ptr<Watchdog> watchdog_;
  uint64_t seq_ = 0;
  uint64_t messages_ = 0;  // sends and receives, counted apart from the collectives
};

}  // namespace shardtune::dist

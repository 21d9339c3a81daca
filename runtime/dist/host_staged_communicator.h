// Collectives on device tensors staged through host memory over MPI: each collective copies its
// input to the host, runs there and copies the result back. Slow, but it lets several ranks share
// one GPU, which NCCL refuses ("Duplicate GPU detected"), so the multi-rank device code runs on a
// single-GPU machine. Collectives run eagerly: the returned Work is already complete.
#pragma once

#include "runtime/dist/mpi_communicator.h"

namespace shardtune::dist {

class HostStagedCommunicator final : public Communicator {
 public:
  // `host` carries the data; it must outlive this communicator.
  explicit HostStagedCommunicator(MpiCommunicator& host) : host_(host) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const std::vector<int>& world_ranks() const override { return host_.world_ranks(); }
  const std::string& name() const override { return host_.name(); }

  WorkHandle start_all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle start_all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void gather(const at::Tensor& input, at::Tensor& output, int root) override;
  void barrier() override { host_.barrier(); }

 private:
  MpiCommunicator& host_;
};

}  // namespace shardtune::dist

// Communicator over NCCL for CUDA tensors: the bridge from LibTorch to NcclComm. Compiled only
// when LibTorch has CUDA. Collectives run on the tensor's current CUDA stream and do not block
// the host; barrier() waits, under the communicator's timeout.
#pragma once

#include <mpi.h>

#include "runtime/dist/communicator.h"
#include "runtime/dist/nccl_comm.h"

namespace shardtune::dist {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `mpi_comm` (not owned): one NCCL communicator on `device` for its ranks.
  NcclCommunicator(MPI_Comm mpi_comm, std::string name, int device, double timeout_s);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }
  NcclComm& raw() { return comm_; }

  void all_gather(const at::Tensor& input, at::Tensor& output) override;
  void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  void all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void barrier() override;

 private:
  NcclComm comm_;
  std::string name_;
  std::vector<int> world_ranks_;
};

}  // namespace shardtune::dist

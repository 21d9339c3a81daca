// One group's communicator for every device: collectives on CPU tensors go over MPI, those on
// device tensors over the group's device backend (NCCL, or MPI staged through host memory). So
// the code above it never branches on the device: the backend follows the tensors.
#pragma once

#include <memory>

#include "runtime/dist/mpi_communicator.h"

namespace shardtune::dist {

class DeviceCommunicator final : public Communicator {
 public:
  // `device_backend` may be null (a CPU job): a device tensor is then an internal error.
  DeviceCommunicator(std::unique_ptr<MpiCommunicator> host, std::unique_ptr<Communicator> device_backend);
  ~DeviceCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }
  const std::string& name() const override { return host_->name(); }
  MpiCommunicator& host() { return *host_; }
  bool has_device_backend() const { return device_ != nullptr; }

  WorkHandle start_all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle start_all_reduce(at::Tensor& tensor, ReduceOp op) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void gather(const at::Tensor& input, at::Tensor& output, int root) override;
  // Over MPI: the host waits for every rank.
  void barrier() override { host_->barrier(); }

 protected:
  std::string backend_failure() const override;

 private:
  Communicator& for_tensor(const at::Tensor& t, std::string_view op);

  std::unique_ptr<MpiCommunicator> host_;
  std::unique_ptr<Communicator> device_;  // declared after host_: destroyed first, it may use it
};

}  // namespace shardtune::dist

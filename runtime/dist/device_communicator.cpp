// Dispatch by device.
#include "runtime/dist/device_communicator.h"

#include "common/error.h"

namespace shardtune::dist {

DeviceCommunicator::DeviceCommunicator(std::unique_ptr<MpiCommunicator> host, std::unique_ptr<Communicator> device_backend)
    : host_(std::move(host)), device_(std::move(device_backend)) {}

DeviceCommunicator::~DeviceCommunicator() { device_.reset(); }

std::string DeviceCommunicator::backend_failure() const {
  std::string why = host_->failure();
  if (why.empty() && device_ != nullptr) why = device_->failure();
  return why;
}

Communicator& DeviceCommunicator::for_tensor(const at::Tensor& t, std::string_view op) {
  ST_CHECK(t.defined(), common::ErrorKind::kInternal, "{} on '{}': undefined tensor", op, name());
  if (t.device().is_cpu()) return *host_;
  ST_CHECK(device_ != nullptr, common::ErrorKind::kInternal,
           "{} on '{}': a tensor on {} but this group has no device backend (a CPU job)", op, name(), t.device().str());
  return *device_;
}

WorkHandle DeviceCommunicator::start_all_gather(const at::Tensor& input, at::Tensor& output) {
  return for_tensor(input, "all_gather").start_all_gather(input, output);
}

WorkHandle DeviceCommunicator::start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  return for_tensor(input, "reduce_scatter").start_reduce_scatter(input, output, op);
}

WorkHandle DeviceCommunicator::start_all_reduce(at::Tensor& tensor, ReduceOp op) {
  return for_tensor(tensor, "all_reduce").start_all_reduce(tensor, op);
}

void DeviceCommunicator::broadcast(at::Tensor& tensor, int root) { for_tensor(tensor, "broadcast").broadcast(tensor, root); }

void DeviceCommunicator::gather(const at::Tensor& input, at::Tensor& output, int root) {
  for_tensor(input, "gather").gather(input, output, root);
}

}  // namespace shardtune::dist

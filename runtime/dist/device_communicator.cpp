// Dispatch by device.
#include "runtime/dist/device_communicator.h"

#include "common/error.h"

namespace shardtune::dist {
namespace {

// A group of one rank: every collective is its own input, so none goes to a backend (no NCCL
// launch, no MPI call). What is left is a copy where the output is not the input's own storage,
// on the caller's stream on a GPU, so the result is ordered as a collective's would be.
void copy_unless_same(const at::Tensor& input, at::Tensor& output) {
  if (input.data_ptr() != output.data_ptr()) output.copy_(input.reshape(output.sizes()));
}

}  // namespace

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
  Communicator& backend = for_tensor(input, "all_gather");
  if (size() > 1) return backend.start_all_gather(input, output);
  check_all_gather_sizes(*this, input, output);
  copy_unless_same(input, output);
  return std::make_unique<DoneWork>();
}

WorkHandle DeviceCommunicator::start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  Communicator& backend = for_tensor(input, "reduce_scatter");
  if (size() > 1) return backend.start_reduce_scatter(input, output, op);
  check_reduce_scatter_sizes(*this, input, output);
  copy_unless_same(input, output);  // the sum, mean, maximum or minimum of one
  return std::make_unique<DoneWork>();
}

WorkHandle DeviceCommunicator::start_all_reduce(at::Tensor& tensor, ReduceOp op) {
  Communicator& backend = for_tensor(tensor, "all_reduce");
  if (size() > 1) return backend.start_all_reduce(tensor, op);
  return std::make_unique<DoneWork>();
}

void DeviceCommunicator::broadcast(at::Tensor& tensor, int root) {
  Communicator& backend = for_tensor(tensor, "broadcast");
  if (size() > 1) return backend.broadcast(tensor, root);
  check_root(*this, root, "broadcast");
}

void DeviceCommunicator::gather(const at::Tensor& input, at::Tensor& output, int root) {
  Communicator& backend = for_tensor(input, "gather");
  if (size() > 1) return backend.gather(input, output, root);
  check_gather_sizes(*this, input, output, root);
  copy_unless_same(input, output);
}

}  // namespace shardtune::dist

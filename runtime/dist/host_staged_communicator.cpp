// Device tensors through host buffers. Copies to the host wait for the tensor's stream (a
// blocking copy), so the staged data is what the device computed before the call.
#include "runtime/dist/host_staged_communicator.h"

#include <ATen/ops/empty.h>

namespace shardtune::dist {
namespace {

// A contiguous host copy of `t` (a fresh buffer even when `t` is on the CPU, so the staging is
// the same code on every device).
at::Tensor to_host(const at::Tensor& t) {
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
  host.copy_(t);
  return host;
}

at::Tensor host_like(const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(at::kCPU)); }

}  // namespace

WorkHandle HostStagedCommunicator::start_all_gather(const at::Tensor& input, at::Tensor& output) {
  check_all_gather_sizes(*this, input, output);
  const at::Tensor in = to_host(input);
  at::Tensor out = host_like(output);
  host_.all_gather(in, out);
  output.copy_(out);
  return std::make_unique<DoneWork>();
}

WorkHandle HostStagedCommunicator::start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_reduce_scatter_sizes(*this, input, output);
  const at::Tensor in = to_host(input);
  at::Tensor out = host_like(output);
  host_.reduce_scatter(in, out, op);
  output.copy_(out);
  return std::make_unique<DoneWork>();
}

WorkHandle HostStagedCommunicator::start_all_reduce(at::Tensor& tensor, ReduceOp op) {
  at::Tensor host = to_host(tensor);
  host_.all_reduce(host, op);
  tensor.copy_(host);
  return std::make_unique<DoneWork>();
}

void HostStagedCommunicator::broadcast(at::Tensor& tensor, int root) {
  at::Tensor host = to_host(tensor);
  host_.broadcast(host, root);
  tensor.copy_(host);
}

void HostStagedCommunicator::gather(const at::Tensor& input, at::Tensor& output, int root) {
  check_gather_sizes(*this, input, output, root);
  const at::Tensor in = to_host(input);
  at::Tensor out = rank() == root ? host_like(output) : at::Tensor();
  host_.gather(in, out, root);
  if (rank() == root) output.copy_(out);
}

}  // namespace shardtune::dist

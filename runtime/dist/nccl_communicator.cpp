// NCCL collectives on CUDA tensors, on the current stream of the communicator's device.
#include "runtime/dist/nccl_communicator.h"

#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include "common/error.h"
#include "runtime/dist/mpi_communicator.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;

void check_cuda_tensor(const at::Tensor& t, int device, std::string_view op) {
  ST_CHECK(t.defined() && t.is_cuda() && t.is_contiguous() && t.get_device() == device, ErrorKind::kInternal,
           "{}: expected a contiguous CUDA tensor on device {}", op, device);
}

cudaStream_t current_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm mpi_comm, std::string name, int device, double timeout_s)
    : comm_(NcclComm::create(mpi_comm, device, timeout_s)), name_(std::move(name)), world_ranks_(world_ranks_of(mpi_comm)) {}

void NcclCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_cuda_tensor(input, comm_.device(), "all_gather");
  check_cuda_tensor(output, comm_.device(), "all_gather");
  ST_CHECK(input.scalar_type() == output.scalar_type() && output.numel() == input.numel() * size(),
           ErrorKind::kInternal, "all_gather on '{}': output of {} elements for {} ranks x {}", name_,
           output.numel(), size(), input.numel());
  comm_.all_gather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()), dtype_of(input),
                   current_stream(comm_.device()));
}

void NcclCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_cuda_tensor(input, comm_.device(), "reduce_scatter");
  check_cuda_tensor(output, comm_.device(), "reduce_scatter");
  ST_CHECK(input.scalar_type() == output.scalar_type() && input.numel() == output.numel() * size(),
           ErrorKind::kInternal, "reduce_scatter on '{}': input of {} elements for {} ranks x {}", name_,
           input.numel(), size(), output.numel());
  comm_.reduce_scatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), dtype_of(input), op,
                       current_stream(comm_.device()));
}

void NcclCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cuda_tensor(tensor, comm_.device(), "all_reduce");
  comm_.all_reduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), dtype_of(tensor), op,
                   current_stream(comm_.device()));
}

void NcclCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cuda_tensor(tensor, comm_.device(), "broadcast");
  comm_.broadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), dtype_of(tensor), root,
                  current_stream(comm_.device()));
}

void NcclCommunicator::barrier() { comm_.barrier(current_stream(comm_.device())); }

}  // namespace shardtune::dist

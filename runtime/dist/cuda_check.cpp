// CUDA runtime error reporting, and the GPU count that decides whether the NCCL layer can run.
#include "runtime/dist/cuda_check.h"

#include <fmt/format.h>

#include "common/error.h"

namespace shardtune::dist {

void check_cuda(cudaError_t rc, const char* expr, const std::source_location& loc) {
  if (rc == cudaSuccess) return;
  // Reset the runtime's last-error slot so a later cudaGetLastError (after a kernel launch) does
  // not report this failure a second time. Sticky errors survive this; they are fatal anyway.
  (void)cudaGetLastError();
  std::string message = fmt::format("{} failed: {} ({})", expr, cudaGetErrorName(rc), cudaGetErrorString(rc));
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver || rc == cudaErrorInvalidDevice) {
    message += ". HINT: check that this node has a GPU for every local rank (nvidia-smi), "
               "CUDA_VISIBLE_DEVICES, and that the driver is at least as new as the CUDA runtime";
  }
  common::raise(common::ErrorKind::kCuda, message, loc);
}

int visible_gpu_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver or no device: not an error here, but the runtime keeps it as its last error.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace shardtune::dist

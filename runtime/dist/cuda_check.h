// Every CUDA runtime call goes through ST_CUDA_CHECK: a failure throws common::Error(kCuda) with the
// call, CUDA's error name and text, host, rank and file:line.
#pragma once

// The runtime API header only: this is included by code that never launches kernels.
#include <cuda_runtime_api.h>

#include <source_location>

namespace shardtune::dist {

void check_cuda(cudaError_t rc, const char* expr, const std::source_location& loc);

// How many GPUs this process can use; 0 when there is no driver or no device (a CPU-only machine),
// so callers and tests can decide to skip instead of failing.
int visible_gpu_count() noexcept;

}  // namespace shardtune::dist

#define ST_CUDA_CHECK(expr) ::shardtune::dist::check_cuda((expr), #expr, std::source_location::current())

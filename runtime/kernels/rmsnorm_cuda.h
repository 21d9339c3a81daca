// RMSNorm's CUDA kernels (rmsnorm.cu, built where nvcc is): fp32 or bf16 arrays on a device,
// asynchronous on `stream`, with the arithmetic of rmsnorm_math.h that the host reference
// (rmsnorm_reference.h) shares. No ATen, no CUDA header: callers pass raw pointers and a
// cudaStream_t as void*.
#pragma once

#include <cstdint>

#include "runtime/kernels/dtype.h"

namespace shardtune::kernels {

// Device arrays of `dtype` (x, w, y, dy, dx), fp32 inv; `stream` a cudaStream_t. The forward takes
// as its input x + res where `res` is not null: each sum rounded to `dtype`, written to `sum` (the
// residual stream's next value), and normalised. The backward adds `dres`, where it is not null (the
// gradient that reached the norm's input by the residual stream), to the input gradient before its
// one rounding to `dtype`. Its dw (fp32, n) is summed over rows in a fixed order (deterministic),
// through `workspace`, fp32 of rmsnorm_backward_workspace(rows, n) elements.
void rmsnorm_forward_cuda(Dtype dtype, const void* x, const void* res, void* sum, const void* w, void* y, float* inv,
                          int64_t rows, int64_t n, float eps, void* stream);
int64_t rmsnorm_backward_workspace(int64_t rows, int64_t n);
void rmsnorm_backward_cuda(Dtype dtype, const void* x, const void* w, const float* inv, const void* dy,
                           const void* dres, void* dx, float* dw, float* workspace, int64_t rows, int64_t n,
                           void* stream);

}  // namespace shardtune::kernels

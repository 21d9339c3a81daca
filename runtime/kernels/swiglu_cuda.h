// SwiGLU's CUDA kernels (swiglu.cu, built where nvcc is): silu(g) * u over `count` elements of fp32
// or bf16 device arrays, asynchronous on `stream` (a cudaStream_t), with the arithmetic of
// swiglu_math.h that the host reference (swiglu_reference.h) shares. The backward recomputes the
// sigmoid from g instead of reading a stored one. No ATen, no CUDA header.
#pragma once

#include <cstdint>

#include "runtime/kernels/dtype.h"

namespace shardtune::kernels {

void swiglu_forward_cuda(Dtype dtype, const void* g, const void* u, void* h, int64_t count, void* stream);
void swiglu_backward_cuda(Dtype dtype, const void* g, const void* u, const void* dh, void* dg, void* du, int64_t count,
                          void* stream);

}  // namespace shardtune::kernels

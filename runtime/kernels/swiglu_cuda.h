// SwiGLU's CUDA kernels (swiglu.cu, built where nvcc is): silu(g) * u over the elements of fp32 or
// bf16 device arrays laid out as SwigluLayout says, asynchronous on `stream` (a cudaStream_t), with
// the arithmetic of swiglu_math.h that the host reference (swiglu_reference.h) shares. The
// backward recomputes the sigmoid from g instead of reading a stored one. No ATen, no CUDA header.
#pragma once

#include <cstdint>

#include "runtime/kernels/dtype.h"
#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {

void swiglu_forward_cuda(Dtype dtype, const SwigluLayout& layout, const void* g, const void* u, void* h, void* stream);
void swiglu_backward_cuda(Dtype dtype, const SwigluLayout& layout, const void* g, const void* u, const void* dh,
                          void* dg, void* du, void* stream);

}  // namespace shardtune::kernels

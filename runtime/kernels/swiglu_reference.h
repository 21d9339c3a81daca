// SwiGLU, silu(g) * u elementwise, forward and backward, on the host in fp32: the reference of the
// CUDA kernels (swiglu_cuda.h), with their arithmetic (swiglu_math.h). No ATen.
#pragma once

#include <cstdint>

#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {

void swiglu_forward_reference(const SwigluLayout& layout, const float* g, const float* u, float* h);
void swiglu_backward_reference(const SwigluLayout& layout, const float* g, const float* u, const float* dh, float* dg,
                               float* du);

}  // namespace shardtune::kernels

// RMSNorm over the last dimension of a (rows, n) row-major array, forward and backward, on the
// host in fp32: the reference of the CUDA kernels (rmsnorm_cuda.h), with their arithmetic
// (rmsnorm_math.h). No ATen: callers pass raw pointers.
#pragma once

#include <cstdint>

namespace shardtune::kernels {

// y (rows x n) and inv (rows): the inverse RMS of each row, kept for the backward.
void rmsnorm_forward_reference(const float* x, const float* w, float* y, float* inv, int64_t rows, int64_t n,
                               float eps);
// dx (rows x n) and dw (n), from the forward's x, w and inv.
void rmsnorm_backward_reference(const float* x, const float* w, const float* inv, const float* dy, float* dx,
                                float* dw, int64_t rows, int64_t n);

}  // namespace shardtune::kernels

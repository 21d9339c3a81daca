// RMSNorm over the last dimension of a (rows, n) row-major array, forward and backward, on the
// host in fp32: the reference of the CUDA kernels (rmsnorm_cuda.h), with their arithmetic
// (rmsnorm_math.h). No ATen: callers pass raw pointers.
#pragma once

#include <cstdint>

namespace shardtune::kernels {

// y (rows x n) and inv (rows): the inverse RMS of each row, kept for the backward. Where `res` is
// not null the input is x + res, each sum written to `sum`.
void rmsnorm_forward_reference(const float* x, const float* res, float* sum, const float* w, float* y, float* inv,
                               int64_t rows, int64_t n, float eps);
// dx (rows x n) and dw (n), from the forward's input (x, or its sum), w and inv; `dres`, where it is
// not null, added to dx.
void rmsnorm_backward_reference(const float* x, const float* w, const float* inv, const float* dy, const float* dres,
                                float* dx, float* dw, int64_t rows, int64_t n);

}  // namespace shardtune::kernels

// AdamW's CUDA kernel (adamw.cu, built where nvcc is): adamw_math.h's element update over n
// elements of fp32 device arrays (parameter, gradient, both moments), asynchronous on `stream` (a
// cudaStream_t), the same bits as the host loop (adamw_reference.h). One pass: 28 bytes an
// element. No ATen.
#pragma once

#include <cstdint>

#include "runtime/kernels/adamw_math.h"

namespace shardtune::kernels {

void adamw_cuda(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s, void* stream);

}  // namespace shardtune::kernels

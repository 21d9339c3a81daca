// Cross-entropy's CUDA kernel (cross_entropy.cu, built where nvcc is): each row of logits (fp32
// or bf16 on the device) against its label, the row's loss (fp32) out and the gradient of the
// logits (softmax - onehot, in the logits' dtype) written over the logits, in two reads and one
// write of the row. Rows whose label is `ignore_index` get 0, rows whose label is out of range NaN.
// Asynchronous on `stream` (a cudaStream_t); the arithmetic of cross_entropy_math.h, shared with
// cross_entropy_reference.h. No ATen.
#pragma once

#include <cstdint>

#include "runtime/kernels/dtype.h"

namespace shardtune::kernels {

void cross_entropy_cuda(Dtype dtype, void* logits, const int64_t* labels, float* loss, int64_t rows, int64_t vocab,
                        int64_t ignore_index, void* stream);

}  // namespace shardtune::kernels

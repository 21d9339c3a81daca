// Rotary position embedding's CUDA kernel (rope.cu, built where nvcc is), forward and backward in
// one: x (positions x heads x head_dim, fp32 or bf16 on the device; positions x_stride elements
// apart, heads side by side) rotated by each position's cos and sin rows (positions x head_dim,
// same dtype) into out (positions out_stride apart), which may be x (in place, equal strides);
// `backward` applies the transposed rotation (to the output's gradient). Asynchronous on `stream`
// (a cudaStream_t); the arithmetic of rope_math.h, shared with rope_reference.h. No ATen.
#pragma once

#include <cstdint>

#include "runtime/kernels/dtype.h"

namespace shardtune::kernels {

void rope_cuda(Dtype dtype, const void* x, const void* cos, const void* sin, void* out, int64_t positions,
               int64_t heads, int64_t head_dim, int64_t x_stride, int64_t out_stride, bool backward, void* stream);

}  // namespace shardtune::kernels

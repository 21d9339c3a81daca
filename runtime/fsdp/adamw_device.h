// AdamW's CUDA kernel of our own (runtime/kernels/adamw_cuda.h) on fp32 CUDA tensors, queued on
// the parameter's current stream: in a build with a CUDA LibTorch and the kernels
// (adamw_device_cuda.cpp); elsewhere built() is false and update throws (adamw_device_none.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/kernels/adamw_math.h"

namespace shardtune::fsdp::adamw_device {

bool built();
// p, g, m, v: contiguous fp32 tensors of one CUDA device, of as many elements.
void update(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v,
            const kernels::AdamWScalars& s);

}  // namespace shardtune::fsdp::adamw_device

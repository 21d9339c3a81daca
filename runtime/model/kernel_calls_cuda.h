// The CUDA half of kernel_calls.cpp (kernel_calls_cuda.cpp in a build with a CUDA LibTorch and
// nvcc; kernel_calls_no_cuda.cpp elsewhere, whose functions say the build has none).
#pragma once

#include "runtime/model/kernel_calls.h"

namespace shardtune::model::kernel_calls::cuda {

bool built();
RmsNormForward rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& residual);
RmsNormBackward rmsnorm_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& inv, const at::Tensor& dy,
                                 const at::Tensor& dres);
void rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& out, bool backward);
at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u);
SwigluBackward swiglu_backward(const at::Tensor& g, const at::Tensor& u, const at::Tensor& dh);
at::Tensor swiglu_joined_forward(const at::Tensor& gu);
at::Tensor swiglu_joined_backward(const at::Tensor& gu, const at::Tensor& dh);
at::Tensor cross_entropy_in_place(at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index);

}  // namespace shardtune::model::kernel_calls::cuda

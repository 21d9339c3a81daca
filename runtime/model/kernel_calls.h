// The kernels of runtime/kernels called on ATen tensors: the CUDA kernel for tensors on a CUDA
// device (a build with a CUDA LibTorch and nvcc), the host reference for fp32 CPU tensors. Each
// call takes contiguous tensors of one dtype (fp32, or bf16 on a GPU) and queues its work on the
// tensors' current stream; outputs are allocated here. The autograd functions of fused_ops.h are
// their only callers.
#pragma once

#include <ATen/core/Tensor.h>

namespace shardtune::model::kernel_calls {

// Whether this build can run the kernels on CUDA tensors.
bool cuda_kernels_built();

// Whether `x`'s device and dtype have a kernel here: a CUDA tensor of fp32 or bf16 in a build with
// CUDA kernels, or an fp32 CPU tensor (the host reference).
bool supported(const at::Tensor& x);

struct RmsNormForward {
  at::Tensor y;    // (rows, n), x's dtype
  at::Tensor inv;  // (rows,), fp32: each row's inverse RMS, for the backward
  at::Tensor sum;  // (rows, n): x + residual, the norm's input, where a residual was given
};
// x (rows, n), w (n); the input x + residual (each sum rounded to x's dtype) where `residual` is
// defined (rows, n).
RmsNormForward rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& residual = {});
struct RmsNormBackward {
  at::Tensor dx;  // (rows, n), x's dtype: plus `dres` where it is defined, rounded once
  at::Tensor dw;  // (n,), fp32, summed over rows in a fixed order
};
RmsNormBackward rmsnorm_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& inv, const at::Tensor& dy,
                                 const at::Tensor& dres = {});

// x (positions, heads, head_dim) rotated by cos/sin (positions, head_dim); `backward` rotates the
// other way (the gradient). rope_into writes into `out`: x and out may each be a view whose
// positions lie further apart than their heads (columns of wider rows: stride(1) = head_dim,
// stride(2) = 1), and out may be x.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward);
void rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& out, bool backward);

at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u);
struct SwigluBackward {
  at::Tensor dg, du;
};
SwigluBackward swiglu_backward(const at::Tensor& g, const at::Tensor& u, const at::Tensor& dh);
// Gate and up side by side in one product gu (rows, 2 cols): silu(gu[:, :cols]) * gu[:, cols:],
// (rows, cols); the backward gives the gradient of gu, both halves in one (rows, 2 cols) tensor.
at::Tensor swiglu_joined_forward(const at::Tensor& gu);
at::Tensor swiglu_joined_backward(const at::Tensor& gu, const at::Tensor& dh);

// Each row of `logits` (rows, vocab) against its label (rows, int64): the rows' losses (fp32) out,
// and softmax - onehot written over the logits (0 on rows labelled `ignore_index`).
at::Tensor cross_entropy_in_place(at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index);

}  // namespace shardtune::model::kernel_calls

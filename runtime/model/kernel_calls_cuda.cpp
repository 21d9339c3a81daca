// The kernels of runtime/kernels on CUDA tensors, queued on each tensor's current stream.
#include "runtime/model/kernel_calls_cuda.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/kernels/cross_entropy_cuda.h"
#include "runtime/kernels/rmsnorm_cuda.h"
#include "runtime/kernels/rope_cuda.h"
#include "runtime/kernels/swiglu_cuda.h"

namespace shardtune::model::kernel_calls::cuda {
namespace {

kernels::Dtype dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? kernels::Dtype::kBFloat16 : kernels::Dtype::kFloat;
}

void* stream_of(const at::Tensor& t) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}

}  // namespace

bool built() { return true; }

RmsNormForward rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& residual) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0), n = x.size(1);
  RmsNormForward out{at::empty_like(x), at::empty({rows}, x.options().dtype(at::kFloat)), at::Tensor()};
  if (residual.defined()) out.sum = at::empty_like(x);
  kernels::rmsnorm_forward_cuda(dtype_of(x), x.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr,
                                out.sum.defined() ? out.sum.data_ptr() : nullptr, w.data_ptr(), out.y.data_ptr(),
                                out.inv.data_ptr<float>(), rows, n, static_cast<float>(eps), stream_of(x));
  return out;
}

RmsNormBackward rmsnorm_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& inv, const at::Tensor& dy,
                                 const at::Tensor& dres) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0), n = x.size(1);
  RmsNormBackward out{at::empty_like(x), at::empty({n}, x.options().dtype(at::kFloat))};
  at::Tensor workspace = at::empty({kernels::rmsnorm_backward_workspace(rows, n)}, x.options().dtype(at::kFloat));
  kernels::rmsnorm_backward_cuda(dtype_of(x), x.data_ptr(), w.data_ptr(), inv.data_ptr<float>(), dy.data_ptr(),
                                 dres.defined() ? dres.data_ptr() : nullptr, out.dx.data_ptr(),
                                 out.dw.data_ptr<float>(), workspace.data_ptr<float>(), rows, n, stream_of(x));
  return out;
}

void rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& out, bool backward) {
  const c10::cuda::CUDAGuard guard(x.device());
  kernels::rope_cuda(dtype_of(x), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(), x.size(0), x.size(1),
                     x.size(2), x.stride(0), out.stride(0), backward, stream_of(x));
}

at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u) {
  const c10::cuda::CUDAGuard guard(g.device());
  at::Tensor h = at::empty_like(g);
  kernels::swiglu_forward_cuda(dtype_of(g), kernels::SwigluLayout::contiguous(g.numel()), g.data_ptr(), u.data_ptr(),
                               h.data_ptr(), stream_of(g));
  return h;
}

SwigluBackward swiglu_backward(const at::Tensor& g, const at::Tensor& u, const at::Tensor& dh) {
  const c10::cuda::CUDAGuard guard(g.device());
  SwigluBackward out{at::empty_like(g), at::empty_like(u)};
  kernels::swiglu_backward_cuda(dtype_of(g), kernels::SwigluLayout::contiguous(g.numel()), g.data_ptr(), u.data_ptr(),
                                dh.data_ptr(), out.dg.data_ptr(), out.du.data_ptr(), stream_of(g));
  return out;
}

at::Tensor swiglu_joined_forward(const at::Tensor& gu) {
  const c10::cuda::CUDAGuard guard(gu.device());
  const int64_t rows = gu.size(0), cols = gu.size(1) / 2;
  at::Tensor h = at::empty({rows, cols}, gu.options());
  const auto* base = static_cast<const char*>(gu.data_ptr());
  kernels::swiglu_forward_cuda(dtype_of(gu), kernels::SwigluLayout::joined(rows, cols), base,
                               base + cols * gu.element_size(), h.data_ptr(), stream_of(gu));
  return h;
}

at::Tensor swiglu_joined_backward(const at::Tensor& gu, const at::Tensor& dh) {
  const c10::cuda::CUDAGuard guard(gu.device());
  const int64_t rows = gu.size(0), cols = gu.size(1) / 2;
  at::Tensor dgu = at::empty_like(gu);
  const auto* base = static_cast<const char*>(gu.data_ptr());
  auto* out = static_cast<char*>(dgu.data_ptr());
  const int64_t half = cols * gu.element_size();
  kernels::swiglu_backward_cuda(dtype_of(gu), kernels::SwigluLayout::joined(rows, cols), base, base + half,
                                dh.data_ptr(), out, out + half, stream_of(gu));
  return dgu;
}

at::Tensor cross_entropy_in_place(at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index) {
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
  kernels::cross_entropy_cuda(dtype_of(logits), logits.data_ptr(), labels.data_ptr<int64_t>(), loss.data_ptr<float>(),
                              logits.size(0), logits.size(1), ignore_index, stream_of(logits));
  return loss;
}

}  // namespace shardtune::model::kernel_calls::cuda

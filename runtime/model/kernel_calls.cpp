// Tensor-level calls of the kernels: CUDA tensors to kernel_calls_cuda, fp32 CPU tensors to the
// host references.
#include "runtime/model/kernel_calls.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include "common/error.h"
#include "runtime/kernels/cross_entropy_reference.h"
#include "runtime/kernels/rmsnorm_reference.h"
#include "runtime/kernels/rope_reference.h"
#include "runtime/kernels/swiglu_reference.h"
#include "runtime/model/kernel_calls_cuda.h"

namespace shardtune::model::kernel_calls {
namespace {

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ST_CHECK(a.is_contiguous() && b.is_contiguous() && a.scalar_type() == b.scalar_type() && a.device() == b.device(),
           common::ErrorKind::kInternal, "{}: the kernels take contiguous tensors of one dtype on one device", what);
}

// check_same, and of one shape.
void check_like(const at::Tensor& a, const at::Tensor& b, const char* what) {
  check_same(a, b, what);
  ST_CHECK(a.sizes() == b.sizes(), common::ErrorKind::kInternal, "{}: tensors of one shape", what);
}

// RMSNorm's (rows, n) rows: the weight one row of n, the inverse RMS (from the forward) one fp32 a row.
void check_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& inv) {
  check_same(x, w, "rmsnorm");
  ST_CHECK(x.dim() == 2 && w.numel() == x.size(1) && (!inv.defined() || (inv.scalar_type() == at::kFloat &&
                                                                          inv.is_contiguous() && inv.numel() == x.size(0))),
           common::ErrorKind::kInternal, "rmsnorm: (rows, n) rows, a weight of n and an fp32 inverse RMS a row");
}

const float* f32(const at::Tensor& t) { return t.data_ptr<float>(); }
float* f32_out(at::Tensor& t) { return t.data_ptr<float>(); }

}  // namespace

bool cuda_kernels_built() { return cuda::built(); }

bool supported(const at::Tensor& x) {
  if (x.is_cuda()) return cuda::built() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
  return x.is_cpu() && x.scalar_type() == at::kFloat;
}

RmsNormForward rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& residual) {
  check_norm(x, w, at::Tensor());
  if (residual.defined()) check_like(x, residual, "rmsnorm's residual");
  if (x.is_cuda()) return cuda::rmsnorm_forward(x, w, eps, residual);
  const int64_t rows = x.size(0), n = x.size(1);
  RmsNormForward out{at::empty_like(x), at::empty({rows}, x.options().dtype(at::kFloat)), at::Tensor()};
  if (residual.defined()) out.sum = at::empty_like(x);
  kernels::rmsnorm_forward_reference(f32(x), residual.defined() ? f32(residual) : nullptr,
                                     residual.defined() ? f32_out(out.sum) : nullptr, f32(w), f32_out(out.y),
                                     f32_out(out.inv), rows, n, static_cast<float>(eps));
  return out;
}

RmsNormBackward rmsnorm_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& inv, const at::Tensor& dy,
                                 const at::Tensor& dres) {
  check_norm(x, w, inv);
  check_like(x, dy, "rmsnorm backward");
  if (dres.defined()) check_like(x, dres, "rmsnorm backward's residual gradient");
  if (x.is_cuda()) return cuda::rmsnorm_backward(x, w, inv, dy, dres);
  const int64_t rows = x.size(0), n = x.size(1);
  RmsNormBackward out{at::empty_like(x), at::empty({n}, x.options().dtype(at::kFloat))};
  kernels::rmsnorm_backward_reference(f32(x), f32(w), f32(inv), f32(dy), dres.defined() ? f32(dres) : nullptr,
                                      f32_out(out.dx), f32_out(out.dw), rows, n);
  return out;
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  at::Tensor out = at::empty_like(x);
  rope_into(x, cos, sin, out, backward);
  return out;
}

void rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& out, bool backward) {
  check_same(cos, sin, "rope");
  ST_CHECK(cos.sizes() == sin.sizes(), common::ErrorKind::kInternal, "rope: cos and sin tables of one shape");
  auto rows_of_heads = [&](const at::Tensor& t) {
    return t.dim() == 3 && t.sizes() == x.sizes() && t.stride(2) == 1 && t.stride(1) == t.size(2) &&
           t.stride(0) >= t.size(1) * t.size(2) && t.scalar_type() == cos.scalar_type() && t.device() == cos.device();
  };
  ST_CHECK(rows_of_heads(x) && rows_of_heads(out) && cos.size(0) == x.size(0) && cos.size(1) == x.size(2),
           common::ErrorKind::kInternal, "rope: (positions, heads, head_dim) views with whole heads side by side");
  if (x.is_cuda()) return cuda::rope_into(x, cos, sin, out, backward);
  kernels::rope_reference(f32(x), f32(cos), f32(sin), out.data_ptr<float>(), x.size(0), x.size(1), x.size(2),
                          x.stride(0), out.stride(0), backward);
}

at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u) {
  check_like(g, u, "swiglu");
  if (g.is_cuda()) return cuda::swiglu_forward(g, u);
  at::Tensor h = at::empty_like(g);
  kernels::swiglu_forward_reference(kernels::SwigluLayout::contiguous(g.numel()), f32(g), f32(u), f32_out(h));
  return h;
}

SwigluBackward swiglu_backward(const at::Tensor& g, const at::Tensor& u, const at::Tensor& dh) {
  check_like(g, u, "swiglu backward");
  check_like(g, dh, "swiglu backward");
  if (g.is_cuda()) return cuda::swiglu_backward(g, u, dh);
  SwigluBackward out{at::empty_like(g), at::empty_like(u)};
  kernels::swiglu_backward_reference(kernels::SwigluLayout::contiguous(g.numel()), f32(g), f32(u), f32(dh),
                                     f32_out(out.dg), f32_out(out.du));
  return out;
}

namespace {

void check_joined(const at::Tensor& gu, const at::Tensor& dh) {
  ST_CHECK(gu.is_contiguous() && gu.dim() == 2 && gu.size(1) % 2 == 0, common::ErrorKind::kInternal,
           "swiglu (joined): a contiguous (rows, 2 cols) product of gate and up");
  if (dh.defined())
    ST_CHECK(dh.is_contiguous() && dh.dim() == 2 && dh.size(0) == gu.size(0) && dh.size(1) * 2 == gu.size(1) &&
                 dh.scalar_type() == gu.scalar_type() && dh.device() == gu.device(),
             common::ErrorKind::kInternal, "swiglu backward (joined): a contiguous (rows, cols) gradient like gu's");
}

}  // namespace

at::Tensor swiglu_joined_forward(const at::Tensor& gu) {
  check_joined(gu, at::Tensor());
  if (gu.is_cuda()) return cuda::swiglu_joined_forward(gu);
  const int64_t rows = gu.size(0), cols = gu.size(1) / 2;
  at::Tensor h = at::empty({rows, cols}, gu.options());
  kernels::swiglu_forward_reference(kernels::SwigluLayout::joined(rows, cols), f32(gu), f32(gu) + cols, f32_out(h));
  return h;
}

at::Tensor swiglu_joined_backward(const at::Tensor& gu, const at::Tensor& dh) {
  check_joined(gu, dh);
  if (gu.is_cuda()) return cuda::swiglu_joined_backward(gu, dh);
  const int64_t rows = gu.size(0), cols = gu.size(1) / 2;
  at::Tensor dgu = at::empty_like(gu);
  kernels::swiglu_backward_reference(kernels::SwigluLayout::joined(rows, cols), f32(gu), f32(gu) + cols, f32(dh),
                                     f32_out(dgu), f32_out(dgu) + cols);
  return dgu;
}

at::Tensor cross_entropy_in_place(at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index) {
  ST_CHECK(logits.is_contiguous() && logits.dim() == 2 && labels.is_contiguous() &&
               labels.scalar_type() == at::kLong && labels.numel() == logits.size(0) &&
               labels.device() == logits.device(),
           common::ErrorKind::kInternal, "cross entropy: contiguous (rows, vocab) logits and (rows) int64 labels");
  if (logits.is_cuda()) return cuda::cross_entropy_in_place(logits, labels, ignore_index);
  at::Tensor loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
  kernels::cross_entropy_reference(f32(logits), labels.data_ptr<int64_t>(), f32_out(loss), f32_out(logits),
                                   logits.size(0), logits.size(1), ignore_index);
  return loss;
}

}  // namespace shardtune::model::kernel_calls

// Autograd functions over kernel_calls, and the ATen spelling of each operation beside them.
#include "runtime/model/fused_ops.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/record_function.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/silu.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "runtime/model/kernel_calls.h"
#include "runtime/model/loss.h"

namespace shardtune::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Fusions g_fusions;

// Whether the kernels take these tensors: all on one device, of one dtype the kernels serve there
// (CPU tensors only when a test asks for the host references).
bool kernels_take(std::initializer_list<at::Tensor> tensors) {
  const at::Tensor& first = *tensors.begin();
  if (first.is_cpu() && !g_fusions.host_reference) return false;
  if (!kernel_calls::supported(first)) return false;
  for (const at::Tensor& t : tensors)
    if (t.device() != first.device() || t.scalar_type() != first.scalar_type()) return false;
  return true;
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps) {
    const at::Tensor rows = x.contiguous().view({-1, x.size(-1)});
    const at::Tensor weight = w.contiguous();
    kernel_calls::RmsNormForward out = kernel_calls::rmsnorm_forward(rows, weight, eps);
    ctx->save_for_backward({rows, weight, out.inv});
    return out.y.view(x.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grad[0].contiguous().view(saved[0].sizes());
    kernel_calls::RmsNormBackward out = kernel_calls::rmsnorm_backward(saved[0], saved[1], saved[2], dy);
    return {out.dx.view(grad[0].sizes()), out.dw.to(saved[1].scalar_type()), at::Tensor()};
  }
};

// (sum, normed) of x + delta, or of x alone where `add` is false (delta then x detached, unused: an
// autograd function's inputs are defined tensors); `sum` is then x itself, as autograd's view of it.
struct ResidualNormFunction : public torch::autograd::Function<ResidualNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w,
                               double eps, bool add) {
    ctx->set_materialize_grads(false);
    const int64_t n = x.size(-1);
    const at::Tensor rows = x.contiguous().view({-1, n});
    const at::Tensor weight = w.contiguous();
    kernel_calls::RmsNormForward out =
        kernel_calls::rmsnorm_forward(rows, weight, eps, add ? delta.contiguous().view({-1, n}) : at::Tensor());
    const at::Tensor input = add ? out.sum : rows;
    ctx->save_for_backward({input, weight, out.inv});
    ctx->saved_data["add"] = add;
    return {add ? out.sum.view(x.sizes()) : x, out.y.view(x.sizes())};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const bool add = ctx->saved_data["add"].toBool();
    if (!grad[1].defined()) return {grad[0], add ? grad[0] : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const at::Tensor dsum = grad[0].defined() ? grad[0].contiguous().view(input.sizes()) : at::Tensor();
    const at::Tensor dy = grad[1].contiguous().view(input.sizes());
    kernel_calls::RmsNormBackward out = kernel_calls::rmsnorm_backward(input, saved[1], saved[2], dy, dsum);
    const at::Tensor dx = out.dx.view(grad[1].sizes());
    return {dx, add ? dx : at::Tensor(), out.dw.to(saved[1].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t d = x.size(3);
    const at::Tensor c = cos.contiguous().view({-1, d}), s = sin.contiguous().view({-1, d});
    ctx->save_for_backward({c, s});
    return kernel_calls::rope(x.contiguous().view({-1, x.size(2), d}), c, s, /*backward=*/false).view(x.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& dy = grad[0];
    const at::Tensor dx =
        kernel_calls::rope(dy.contiguous().view({-1, dy.size(2), dy.size(3)}), saved[0], saved[1], /*backward=*/true);
    return {dx.view(dy.sizes()), at::Tensor(), at::Tensor()};
  }
};

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& g, const at::Tensor& u) {
    const at::Tensor gc = g.contiguous(), uc = u.contiguous();
    ctx->save_for_backward({gc, uc});
    return kernel_calls::swiglu_forward(gc, uc);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    kernel_calls::SwigluBackward out = kernel_calls::swiglu_backward(saved[0], saved[1], grad[0].contiguous());
    return {out.dg, out.du};
  }
};

// gu (rows, 2 cols): the kernel reads gate and up where the product put them, and its backward
// writes their gradients side by side, the gradient of the product itself.
struct SwigluJoinedFunction : public torch::autograd::Function<SwigluJoinedFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gu) {
    const at::Tensor rows = gu.contiguous().view({-1, gu.size(-1)});
    ctx->save_for_backward({rows});
    std::vector<int64_t> shape = gu.sizes().vec();
    shape.back() /= 2;
    return kernel_calls::swiglu_joined_forward(rows).view(shape);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const at::Tensor rows = ctx->get_saved_variables()[0];
    const at::Tensor dh = grad[0].contiguous().view({rows.size(0), rows.size(1) / 2});
    std::vector<int64_t> shape = grad[0].sizes().vec();
    shape.back() *= 2;
    return {kernel_calls::swiglu_joined_backward(rows, dh).view(shape)};
  }
};

// Two or three adjacent weights (no c for two) as one, sharing their storage; the gradient split
// back into row views.
struct JoinedRowsFunction : public torch::autograd::Function<JoinedRowsFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const c10::optional<at::Tensor>& c) {
    ctx->saved_data["a"] = a.size(0);
    ctx->saved_data["b"] = b.size(0);
    const int64_t rows = a.size(0) + b.size(0) + (c.has_value() ? c->size(0) : 0);
    at::Tensor joined = at::empty({0}, a.options());
    joined.set_(a.storage(), a.storage_offset(), {rows, a.size(1)}, {a.size(1), 1});
    return joined;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const int64_t a = ctx->saved_data["a"].toInt(), b = ctx->saved_data["b"].toInt();
    const at::Tensor& g = grad[0];
    const int64_t rest = g.size(0) - a - b;
    return {g.narrow(0, 0, a), g.narrow(0, a, b), rest > 0 ? g.narrow(0, a + b, rest) : at::Tensor()};
  }
};

// Whether the weights lie one after the other in one storage, as rows of one matrix.
bool adjacent_rows(std::initializer_list<at::Tensor> parts) {
  const at::Tensor& first = *parts.begin();
  int64_t next = first.storage_offset();
  for (const at::Tensor& p : parts) {
    if (!(p.dim() == 2 && p.size(1) == first.size(1) && p.is_contiguous() && p.scalar_type() == first.scalar_type() &&
          p.device() == first.device() && p.has_storage() && p.storage().is_alias_of(first.storage()) &&
          p.storage_offset() == next))
      return false;
    next += p.numel();
  }
  return true;
}

// qkv (B, T, (heads + 2 kv_heads) head_dim), the product of the joined weights: q's and k's columns
// rotated into tensors of their own, (B, T, heads, head_dim) and (B, T, kv_heads, head_dim), v's
// copied out. The backward writes the three gradients side by side into one tensor shaped like
// qkv, the product's gradient: q's and k's rotated back into their columns, v's copied.
struct QkvRopeFunction : public torch::autograd::Function<QkvRopeFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& qkv, const at::Tensor& cos,
                               const at::Tensor& sin, int64_t heads, int64_t kv_heads) {
    const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / (heads + 2 * kv_heads);
    const at::Tensor rows = qkv.contiguous().view({b * t, qkv.size(2)});
    const at::Tensor c = cos.contiguous().view({-1, d}), s = sin.contiguous().view({-1, d});
    ctx->save_for_backward({c, s});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    auto columns = [&](int64_t first, int64_t n) { return rows.narrow(1, first * d, n * d).view({b * t, n, d}); };
    at::Tensor q = at::empty({b, t, heads, d}, qkv.options()), k = at::empty({b, t, kv_heads, d}, qkv.options());
    kernel_calls::rope_into(columns(0, heads), c, s, q.view({b * t, heads, d}), /*backward=*/false);
    kernel_calls::rope_into(columns(heads, kv_heads), c, s, k.view({b * t, kv_heads, d}), /*backward=*/false);
    at::Tensor v = columns(heads + kv_heads, kv_heads).view({b, t, kv_heads, d}).clone(at::MemoryFormat::Contiguous);
    return {q, k, v};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &c = saved[0], &s = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt(), kv_heads = ctx->saved_data["kv_heads"].toInt();
    const at::Tensor& any = grad[0].defined() ? grad[0] : grad[1].defined() ? grad[1] : grad[2];
    const int64_t b = any.size(0), t = any.size(1), d = c.size(1);
    at::Tensor dqkv = at::empty({b, t, (heads + 2 * kv_heads) * d}, c.options());
    const at::Tensor rows = dqkv.view({b * t, -1});
    auto columns = [&](int64_t first, int64_t n) { return rows.narrow(1, first * d, n * d).view({b * t, n, d}); };
    const int64_t first[] = {0, heads, heads + kv_heads}, count[] = {heads, kv_heads, kv_heads};
    for (int i = 0; i < 3; ++i) {
      const at::Tensor out = columns(first[i], count[i]);
      if (!grad[i].defined()) {
        out.zero_();
      } else if (i < 2) {
        kernel_calls::rope_into(grad[i].contiguous().view({b * t, count[i], d}), c, s, out, /*backward=*/true);
      } else {
        out.view({b, t, kv_heads, d}).copy_(grad[i]);
      }
    }
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Rows of the head per chunk: as many as loss_chunk_logits allows, at least one.
int64_t chunk_rows(int64_t n, int64_t vocab) {
  return std::max<int64_t>(1, std::min(n, g_fusions.loss_chunk_logits / std::max<int64_t>(vocab, 1)));
}

// The head's rows in chunks: hidden (N, H) · weight (V, H)ᵀ against labels (N), each row's loss
// (fp32), and where asked the gradients of the summed loss: with respect to the hidden rows (N, H)
// and to the weight (V, H), in the compute dtype, the weight's added up over the chunks. With
// `row_scale` (N), the gradients of the rows' losses weighted by it instead.
struct ChunkedHead {
  at::Tensor rows, dhidden, dweight;
};
ChunkedHead chunked_head(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                         bool want_dhidden, bool want_dweight, const at::Tensor& row_scale = {}) {
  const int64_t n = hidden.size(0);
  const int64_t chunk = chunk_rows(n, weight.size(0));
  ChunkedHead out;
  out.rows = at::empty({n}, hidden.options().dtype(at::kFloat));
  if (want_dhidden) out.dhidden = at::empty({n, hidden.size(1)}, hidden.options());
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    const at::Tensor h = hidden.narrow(0, start, len);
    at::Tensor logits = at::mm(h, weight.t());
    out.rows.narrow(0, start, len).copy_(kernel_calls::cross_entropy_in_place(logits, labels.narrow(0, start, len),
                                                                              kIgnoreIndex));
    if (row_scale.defined()) logits.mul_(row_scale.narrow(0, start, len).unsqueeze(1));
    if (want_dhidden) {
      at::Tensor rows_out = out.dhidden.narrow(0, start, len);
      at::mm_out(rows_out, logits, weight);
    }
    if (want_dweight) {  // the sum over chunks in the product's own accumulation
      if (start == 0) {
        out.dweight = at::mm(logits.t(), h);
      } else {
        out.dweight.addmm_(logits.t(), h);
      }
    }
  }
  return out;
}

// hidden (N, H) · weight (V, H)ᵀ against labels (N): the forward computes, chunk by chunk, the
// gradients of the summed loss; the backward scales them by the incoming gradient over the count
// of labelled tokens.
struct LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, bool want_dhidden, bool want_dweight) {
    ChunkedHead head = chunked_head(hidden, weight, labels, want_dhidden, want_dweight);
    const at::Tensor count = labels.ne(kIgnoreIndex).sum().to(at::kFloat);
    ctx->save_for_backward({head.dhidden, head.dweight, count});
    return head.rows.sum() / count;  // NaN with no labelled token, as the mean cross-entropy
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor scale = grad[0] / saved[2];  // a 0-dim tensor: the products keep their dtype
    at::Tensor dhidden = saved[0].defined() && ctx->needs_input_grad(0) ? saved[0] * scale : at::Tensor();
    // In place: the weight's gradient is as large as the weight, and the graph is not kept for a
    // second backward (FSDP's units and the training step free it).
    at::Tensor dweight = saved[1].defined() && ctx->needs_input_grad(1) ? saved[1].mul_(scale) : at::Tensor();
    return {dhidden, dweight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// linear_token_losses with a frozen weight, or no gradient at all: the chunks' gradient with
// respect to the hidden rows, kept unscaled; the backward scales each row by its incoming gradient.
struct ChunkedTokenLossesFunction : public torch::autograd::Function<ChunkedTokenLossesFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, bool want_dhidden) {
    ChunkedHead head = chunked_head(hidden, weight, labels, want_dhidden, false);
    ctx->save_for_backward({head.dhidden});
    return head.rows;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const at::Tensor dhidden = ctx->get_saved_variables()[0];
    const at::Tensor g = grad[0].to(dhidden.scalar_type()).unsqueeze(1);  // (N, 1)
    return {ctx->needs_input_grad(0) ? dhidden * g : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// linear_token_losses: the rows' losses themselves. d(loss_n)/d(logits_n) is the kernel's row n,
// so the gradient with respect to the logits is diag(g) · dlogits for incoming g (N). Rows that fit
// one chunk keep that gradient for the backward, which applies diag(g) to the hidden rows (dweight)
// or to the product's rows (dhidden). More rows keep no logits: the backward computes them again
// chunk by chunk, scales each chunk's gradient by its rows' g and takes both products from it
// (one more product of the head, for a chunk's logits rather than all of them).
struct LinearTokenLossesFunction : public torch::autograd::Function<LinearTokenLossesFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels) {
    const bool one_chunk = chunk_rows(hidden.size(0), weight.size(0)) == hidden.size(0);
    ctx->saved_data["one_chunk"] = one_chunk;
    if (!one_chunk) {
      ctx->save_for_backward({hidden, weight, labels});
      return chunked_head(hidden, weight, labels, false, false).rows;
    }
    at::Tensor logits = at::mm(hidden, weight.t());
    const at::Tensor rows = kernel_calls::cross_entropy_in_place(logits, labels, kIgnoreIndex);
    ctx->save_for_backward({logits, hidden, weight});
    return rows;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    if (!ctx->saved_data["one_chunk"].toBool()) {
      const at::Tensor g = grad[0].to(saved[0].scalar_type());
      ChunkedHead head = chunked_head(saved[0], saved[1], saved[2], ctx->needs_input_grad(0),
                                      ctx->needs_input_grad(1), g);
      return {head.dhidden, head.dweight, at::Tensor()};
    }
    const at::Tensor& dlogits = saved[0];
    const at::Tensor g = grad[0].to(dlogits.scalar_type()).unsqueeze(1);  // (N, 1)
    const at::Tensor dhidden = ctx->needs_input_grad(0) ? at::mm(dlogits, saved[2]) * g : at::Tensor();
    const at::Tensor dweight = ctx->needs_input_grad(1) ? at::mm(dlogits.t(), saved[1] * g) : at::Tensor();
    return {dhidden, dweight, at::Tensor()};
  }
};

// Each position's label, flattened: position t's is token t + 1; the last position has none.
at::Tensor shifted_labels(const at::Tensor& labels) {
  const int64_t b = labels.size(0), t = labels.size(1);
  return at::cat({labels.narrow(1, 1, t - 1), at::full({b, 1}, kIgnoreIndex, labels.options())}, 1)
      .reshape({-1})
      .to(at::kLong)
      .contiguous();
}

// transformers computes norms in fp32; fp64 (gradient checks) stays fp64.
at::ScalarType at_least_fp32(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

}  // namespace

void set_fusions(const Fusions& fusions) { g_fusions = fusions; }
const Fusions& fusions() { return g_fusions; }

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  if (g_fusions.rmsnorm && kernels_take({x, w}) && w.dim() == 1 && w.size(0) == x.size(-1))
    return RmsNormFunction::apply(x, w, eps);
  at::Tensor h = x.to(at_least_fp32(x.scalar_type()));
  h = h * at::rsqrt(h.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return w * h.to(x.scalar_type());
}

ResidualNorm residual_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w, double eps) {
  const bool shapes = w.dim() == 1 && w.size(0) == x.size(-1) && (!delta.defined() || delta.sizes() == x.sizes());
  if (g_fusions.rmsnorm && g_fusions.residual_norm && shapes &&
      (delta.defined() ? kernels_take({x, delta, w}) : kernels_take({x, w}))) {
    const variable_list out =
        ResidualNormFunction::apply(x, delta.defined() ? delta : x.detach(), w, eps, delta.defined());
    return {out[0], out[1]};
  }
  const at::Tensor sum = delta.defined() ? x + delta : x;
  return {sum, rms_norm(sum, w, eps)};
}

at::Tensor rotary(const at::Tensor& x, const RopeTables& rope) {
  if (g_fusions.rope && kernels_take({x, rope.cos, rope.sin}) && x.dim() == 4 && rope.cos.dim() == 3 &&
      rope.cos.size(0) == x.size(0) && rope.cos.size(1) == x.size(1) && rope.cos.size(2) == x.size(3))
    return RopeFunction::apply(x, rope.cos, rope.sin);
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  // cos/sin (B, T, D) broadcast over heads: (B, T, 1, D).
  return x * rope.cos.unsqueeze(2) + rotated * rope.sin.unsqueeze(2);
}

at::Tensor swiglu(const at::Tensor& g, const at::Tensor& u) {
  if (g_fusions.swiglu && kernels_take({g, u}) && g.sizes() == u.sizes()) return SwigluFunction::apply(g, u);
  return at::silu(g) * u;
}

at::Tensor swiglu_joined(const at::Tensor& gu) {
  const int64_t cols = gu.size(-1) / 2;
  if (g_fusions.swiglu && kernels_take({gu}) && gu.size(-1) % 2 == 0) return SwigluJoinedFunction::apply(gu);
  return at::silu(gu.narrow(-1, 0, cols)) * gu.narrow(-1, cols, cols);
}

at::Tensor joined_rows(const at::Tensor& a, const at::Tensor& b) {
  const bool adjacent = g_fusions.joined_gate_up && g_fusions.swiglu && kernels_take({a, b}) &&
                        a.sizes() == b.sizes() && adjacent_rows({a, b});
  if (!adjacent) return at::Tensor();
  return JoinedRowsFunction::apply(a, b, c10::nullopt);
}

Qkv joined_qkv(const at::Tensor& x, const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& wv,
               const RopeTables& rope, int64_t heads, int64_t kv_heads) {
  const bool takes = g_fusions.joined_qkv && g_fusions.rope && kernels_take({x, wq, wk, wv, rope.cos, rope.sin}) &&
                     x.dim() == 3 && heads > 0 && kv_heads > 0 && wq.dim() == 2 && wq.size(0) % heads == 0 &&
                     wk.size(0) * heads == wq.size(0) * kv_heads && wv.sizes() == wk.sizes() &&
                     adjacent_rows({wq, wk, wv}) && rope.cos.dim() == 3 && rope.cos.size(0) == x.size(0) &&
                     rope.cos.size(1) == x.size(1) && rope.cos.size(2) == wq.size(0) / heads;
  if (!takes) return {};
  const at::Tensor qkv = at::linear(x, JoinedRowsFunction::apply(wq, wk, c10::optional<at::Tensor>(wv)));
  const variable_list out = QkvRopeFunction::apply(qkv, rope.cos, rope.sin, heads, kv_heads);
  return {out[0], out[1], out[2]};
}

at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels) {
  RECORD_USER_SCOPE("train.loss");
  if (!(g_fusions.cross_entropy && kernels_take({hidden, weight}) && hidden.dim() == 3 && labels.dim() == 2 &&
        labels.device() == hidden.device()))
    return causal_lm_loss(at::linear(hidden, weight), labels);
  const bool grads = at::GradMode::is_enabled();
  return LinearCrossEntropyFunction::apply(hidden.contiguous().view({-1, hidden.size(-1)}), weight.contiguous(),
                                           shifted_labels(labels), grads && hidden.requires_grad(),
                                           grads && weight.requires_grad());
}

at::Tensor linear_token_losses(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels) {
  RECORD_USER_SCOPE("train.loss");
  if (!(g_fusions.cross_entropy && kernels_take({hidden, weight}) && hidden.dim() == 3 && labels.dim() == 2 &&
        labels.device() == hidden.device()))
    return causal_lm_token_losses(at::linear(hidden, weight), labels);
  const at::Tensor rows = hidden.contiguous().view({-1, hidden.size(-1)});
  const bool grads = at::GradMode::is_enabled();
  if (grads && weight.requires_grad())
    return LinearTokenLossesFunction::apply(rows, weight.contiguous(), shifted_labels(labels)).view(labels.sizes());
  return ChunkedTokenLossesFunction::apply(rows, weight.contiguous(), shifted_labels(labels), grads && hidden.requires_grad())
      .view(labels.sizes());
}

}  // namespace shardtune::model

// The Llama layers' elementwise and row-wise operations, each one kernel of runtime/kernels where
// it can run (a CUDA tensor of fp32 or bf16 in a build with CUDA kernels), ATen's operations as
// transformers spells them everywhere else. The CPU training path is ATen's unless a test asks
// for the host references (Fusions::host_reference), which run the same autograd functions the
// GPU runs, on fp32 CPU tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/model/loss_chunk.h"
#include "runtime/model/rope.h"

namespace shardtune::model {

// Which kernel causal attention takes on a GPU (runtime/model/attention_choice.h): PyTorch's choice
// with cuDNN's attention left out (flash attention for bf16 and fp16) or allowed, per shape.
enum class AttentionKernels {
  kMeasured,  // per shape, the faster of the two, timed the first time the shape is met
  kNoCudnn,   // cuDNN's left out everywhere
  kCudnn,     // cuDNN's allowed everywhere (PyTorch's own choice)
};

// Which fusions run (all, by default): the benchmark turns each off in turn to price it.
struct Fusions {
  bool rmsnorm = true;
  bool rope = true;
  bool swiglu = true;
  bool cross_entropy = true;  // the head's logits, loss and their gradient in place (linear_cross_entropy)
  bool gqa_attention = true;  // key/value heads shared inside the attention call (LibTorch 2.5 on), not repeated
  bool joined_gate_up = true;  // gate and up as one matrix product where their weights lie side by side
  bool joined_qkv = true;      // q, k and v likewise (with the RoPE kernel)
  bool residual_norm = true;   // the residual stream's additions inside the norms' kernels (residual_rms_norm)
  AttentionKernels attention = AttentionKernels::kMeasured;
  bool host_reference = false;  // fp32 CPU tensors through the kernels' host references (tests)
  // The fused head takes its rows in chunks of at most this many logits, so that the logits of a
  // whole micro-batch never exist at once (at least one row a chunk).
  int64_t loss_chunk_logits = kLossChunkLogits;
};
void set_fusions(const Fusions& fusions);  // process-wide; set before the first forward
const Fusions& fusions();

// RMSNorm of x over its last dimension, times w (Llama's: the normalised x rounded to x's dtype).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);

// The residual stream at a norm: `sum` = x + delta (each sum rounded to their dtype; x itself where
// delta is undefined) and `normed` = rms_norm(sum, w, eps). Fused (Fusions::residual_norm, with
// Fusions::rmsnorm), one kernel each way: the forward writes both, and the backward adds the
// gradient that reached `sum` to the norm's input gradient inside the norm's kernel, so the
// residual stream's gradient is never summed by an addition of its own. Where x is used only here,
// its whole gradient (and delta's, the same) is that one kernel's output.
struct ResidualNorm {
  at::Tensor sum, normed;
};
ResidualNorm residual_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w, double eps);

// x * cos + rotate_half(x) * sin for x of (B, T, heads, head_dim), the tables' rows shared by the
// heads of a position.
at::Tensor rotary(const at::Tensor& x, const RopeTables& rope);

// silu(g) * u; the backward recomputes silu from g.
at::Tensor swiglu(const at::Tensor& g, const at::Tensor& u);

// The same of gate and up side by side in one product gu (..., 2 cols): silu(gate) * up, (..., cols).
// Fused, one kernel reads both halves in place, and the backward writes both halves' gradient into
// one tensor shaped like gu, which is the gradient of the one product; no half is ever copied out.
at::Tensor swiglu_joined(const at::Tensor& gu);

// Gate's and up's weights, each (rows, in), that lie one after the other in one storage (FSDP's
// leaves of a flat parameter, in the model's order) seen as one (2 rows, in) weight, without a
// copy: differentiable, the gradient handed back to each as a view of its rows. An undefined
// tensor where they do not lie so (other shapes, dtypes or devices, a gap, not contiguous), where Fusions::joined_gate_up is off, or where the fused SwiGLU would not take the
// product (ATen's would copy both halves' gradients out at full width: the CPU path keeps two
// products).
at::Tensor joined_rows(const at::Tensor& a, const at::Tensor& b);

// The attention's q, k and v of x (B, T, hidden) through weights wq, wk and wv that lie one after
// the other in one storage (FSDP's leaves of a flat parameter, in the model's order), as one matrix
// product whose output q's and k's RoPE kernels read in place (rotating them into tensors of their
// own) and whose gradient their backward writes side by side: one product for the input's
// gradient where there were three and two sums, one for the weights'. Each (B, T, its heads,
// head_dim), q and k rotated, the values of rotary(linear(x, wq)...), linear(x, wk) rotated and
// linear(x, wv). Undefined where the weights do not lie so, where Fusions::joined_qkv or
// Fusions::rope is off, or where the kernels do not take the tensors (the CPU path keeps three
// products).
struct Qkv {
  at::Tensor q, k, v;
};
Qkv joined_qkv(const at::Tensor& x, const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& wv,
               const RopeTables& rope, int64_t heads, int64_t kv_heads);

// The causal language-model loss of logits hidden · weightᵀ against labels (B, T): token t predicts
// token t + 1, labels of -100 count for nothing, the mean over the tokens that count; the value
// of causal_lm_loss(at::linear(hidden, weight), labels). Fused, the labels are shifted instead of
// the logits narrowed, and the rows go in chunks (Fusions::loss_chunk_logits): a chunk's logits,
// then one kernel that gives each row's loss and writes the gradient of its logits over them (in
// the compute dtype, never an fp32 copy), then, where gradients are wanted, that gradient's
// products with the weight and the hidden rows, added up over the chunks. The chunk's logits are
// then dropped: the forward keeps the two gradients, of the summed loss, and the backward only
// scales them. Without gradients (evaluation, a frozen weight) the products not wanted are skipped.
at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels);

// The same tokens' losses one by one: (B, T) fp32 (fp64 for fp64 inputs), position t's the loss of
// predicting label t + 1, 0 where that label is -100 and at the last position; the value of
// causal_lm_token_losses(at::linear(hidden, weight), labels). Fused as linear_cross_entropy is: the
// backward scales each row of the logits' gradient by its token's incoming gradient inside the two
// matrix products (on the hidden rows and the output rows), never in a copy of the logits. The
// weight's gradient needs the incoming gradient inside its sum over rows: a trainable weight whose
// rows fit one chunk keeps that chunk's logits' gradient until the backward; with more rows the
// forward keeps no logits and the backward computes each chunk's again (one more product of the
// head), scaled by its rows' incoming gradients. A frozen weight (a LoRA run) or no gradient at
// all (a reference pass) takes the rows in chunks as linear_cross_entropy does.
at::Tensor linear_token_losses(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels);

}  // namespace shardtune::model

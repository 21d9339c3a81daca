// The Llama causal language model (Hugging Face's LlamaForCausalLM) on ATen tensors. Parameters
// carry Hugging Face's names and shapes. The model knows nothing about sharding: it exposes its
// pieces (embedding, blocks, final norm and head) so that FSDP can wrap each from outside.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/model/llama_config.h"
#include "runtime/model/rope.h"

namespace shardtune::model {

// A parameter slot: FSDP may point it at a view of a flat buffer.
struct NamedParam {
  std::string name;   // "model.layers.0.self_attn.q_proj.weight"
  at::Tensor* tensor;
};

// The randomness of one forward pass. When `enabled` (training), LoRA dropout draws each module's
// mask from mix_seed(seed, module id): a pass recomputed for activation checkpointing, a rerun and
// a resumed run draw the same masks. Evaluation passes leave it disabled.
struct DropoutSeed {
  bool enabled = false;
  uint64_t seed = 0;
};

// A LoRA adapter of one Linear (runtime/model/lora.h): adds scale · B·A·dropout(x) to its output.
struct LoraAdapter {
  int64_t r = 0;     // 0: no adapter
  at::Tensor A;      // lora_A.weight (r, in)
  at::Tensor B;      // lora_B.weight (out, r)
  double scale = 0;  // alpha / r
  double dropout = 0;
  uint64_t id = 0;   // the module's index in the model, which picks its dropout mask
  // y + scale · B·A·dropout(x); y itself without an adapter.
  at::Tensor add_to(const at::Tensor& y, const at::Tensor& x, const DropoutSeed& dropout_seed) const;
};

struct Linear {
  at::Tensor weight;  // (out, in)
  at::Tensor bias;    // (out,) or undefined
  LoraAdapter lora;
  at::Tensor forward(const at::Tensor& x, const DropoutSeed& dropout = {}) const;
};

struct RMSNorm {
  at::Tensor weight;  // (hidden,)
  double eps = 1e-6;
  at::Tensor forward(const at::Tensor& x) const;
};

// Which query positions may attend to which keys: each token attends to itself and the earlier
// tokens of its own document. Packed rows hold several documents; attention runs on each
// document's tokens alone, so no dense T x T mask is ever built and the fused causal kernels
// apply. Empty `rows`: every row is one document (plain causal attention over the batch).
struct AttentionMask {
  struct Segment {
    int64_t begin = 0, end = 0;  // a document's tokens [begin, end) within its row
  };
  std::vector<std::vector<Segment>> rows;  // per row, its documents in order, covering the row
};

// Causal softmax(q kᵀ · scale) v over (B, H, T, D), k and v of H or (where SDPA takes groups,
// Fusions::gqa_attention) H / g heads, as every block runs it. LibTorch 2.x:
// scaled_dot_product_attention with is_causal, so the flash and memory-efficient kernels apply on
// a GPU, and from 2.5 on cuDNN's where it was the faster for the call's shape (Fusions::attention,
// runtime/model/attention_choice.h); 1.13: the same arithmetic spelled out (fp32 softmax), as
// transformers' eager attention.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

struct Attention {
  Linear q_proj, k_proj, v_proj, o_proj;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  at::Tensor forward(const at::Tensor& x, const RopeTables& rope, const AttentionMask& mask,
                     const DropoutSeed& dropout = {}) const;
};

struct Mlp {
  Linear gate_proj, up_proj, down_proj;
  at::Tensor forward(const at::Tensor& x, const DropoutSeed& dropout = {}) const;
};

struct DecoderLayer {
  RMSNorm input_layernorm, post_attention_layernorm;
  Attention self_attn;
  Mlp mlp;
  at::Tensor forward(const at::Tensor& hidden, const RopeTables& rope, const AttentionMask& mask,
                     const DropoutSeed& dropout = {}) const;
  // Each Linear's weight, bias and adapter (lora_A, lora_B) in turn, then the norms.
  void named_parameters(const std::string& prefix, std::vector<NamedParam>& out);
};

class LlamaForCausalLM {
 public:
  // Parameters are allocated with `options`; a meta device allocates nothing, so a loader can
  // later fill only what a rank owns.
  LlamaForCausalLM(const LlamaConfig& config, const at::TensorOptions& options);

  const LlamaConfig& config() const { return config_; }
  // The dtype and device of the parameters (the embedding's).
  at::TensorOptions options() const { return embed_tokens_.options(); }

  // Every parameter under its Hugging Face name, in Hugging Face's order, each LoRA adapter after
  // its Linear's weight. With tied embeddings the head has no weight of its own ("lm_head.weight"
  // is absent, as in HF files).
  std::vector<NamedParam> named_parameters();

  // The pieces FSDP wraps, in forward order.
  at::Tensor embed(const at::Tensor& input_ids) const;             // (B, T) -> (B, T, H)
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  DecoderLayer& layer(int64_t i) { return layers_.at(static_cast<size_t>(i)); }
  const DecoderLayer& layer(int64_t i) const { return layers_.at(static_cast<size_t>(i)); }
  at::Tensor head(const at::Tensor& hidden, const DropoutSeed& dropout = {}) const;  // final norm + lm_head
  // The final norm, the head and the loss against labels (B, T): causal_lm_loss of head()'s
  // logits, through linear_cross_entropy (fused where the kernels serve) unless the head has LoRA.
  at::Tensor head_loss(const at::Tensor& hidden, const at::Tensor& labels, const DropoutSeed& dropout = {}) const;
  // Each token's loss against labels (B, T): causal_lm_token_losses of head()'s logits, through
  // linear_token_losses unless the head has LoRA.
  at::Tensor head_token_losses(const at::Tensor& hidden, const at::Tensor& labels, const DropoutSeed& dropout = {}) const;
  LoraAdapter& head_adapter() { return head_lora_; }

  // Positions and mask for a batch: position_ids (B, T) restart at 0 for each packed document;
  // undefined means 0..T-1. Documents are the runs of consecutive positions.
  RopeTables rope(const at::Tensor& position_ids, at::ScalarType dtype) const;

  // The whole forward: logits (B, T, vocab).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {},
                     const DropoutSeed& dropout = {}) const;

 private:
  LlamaConfig config_;
  at::Tensor embed_tokens_;  // (vocab, hidden)
  std::vector<DecoderLayer> layers_;
  RMSNorm norm_;
  at::Tensor lm_head_;       // (vocab, hidden); undefined when tied to embed_tokens_
  LoraAdapter head_lora_;
  at::Tensor inv_freq_;      // (head_dim / 2,) fp32, a buffer, not a parameter
};

// 0..T-1 for every row when `position_ids` is undefined.
at::Tensor default_position_ids(const at::Tensor& input_ids);

// The documents of packed rows: a new document starts wherever the position does not continue
// the previous one (typically a restart at 0). Empty rows when every row is one document. Reads
// the positions on the host (pass them before they are moved to a GPU, to avoid a copy back).
AttentionMask packed_document_mask(const at::Tensor& position_ids);

}  // namespace shardtune::model

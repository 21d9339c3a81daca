// Llama forward, operation by operation as transformers' modeling_llama computes it.
#include "runtime/model/llama.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <fmt/format.h>
#include <torch/version.h>

#include "common/error.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/lora.h"
#include "runtime/model/loss.h"
#include "runtime/model/sdpa_version.h"

namespace shardtune::model {
namespace {

Linear make_linear(int64_t in, int64_t out, bool bias, const at::TensorOptions& options) {
  Linear l;
  l.weight = at::empty({out, in}, options);
  if (bias) l.bias = at::empty({out}, options);
  return l;
}

// (B, kv_heads, T, D) -> (B, kv_heads * groups, T, D): each key/value head serves `groups`
// query heads (grouped-query attention), as transformers' repeat_kv.
at::Tensor repeat_kv(const at::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  const int64_t b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, h, groups, t, d}).reshape({b, h * groups, t, d});
}

// Whether k and v may have fewer heads than q (grouped-query attention inside the attention call).
bool attention_takes_groups() {
#if ST_SDPA_GQA
  return fusions().gqa_attention;
#else
  return false;
#endif
}

// Causal attention within each document: one call per row that holds several, one for the whole
// batch when every row is a single document.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask) {
  if (mask.rows.empty()) return causal_attention(q, k, v);
  std::vector<at::Tensor> rows;
  for (size_t b = 0; b < mask.rows.size(); ++b) {
    const int64_t row = static_cast<int64_t>(b);
    std::vector<at::Tensor> docs;
    for (const AttentionMask::Segment& s : mask.rows[b]) {
      const int64_t n = s.end - s.begin;
      docs.push_back(causal_attention(q.narrow(0, row, 1).narrow(2, s.begin, n), k.narrow(0, row, 1).narrow(2, s.begin, n),
                                      v.narrow(0, row, 1).narrow(2, s.begin, n)));
    }
    rows.push_back(docs.size() == 1 ? docs.front() : at::cat(docs, 2));
  }
  return at::cat(rows, 0);
}

}  // namespace

at::Tensor LoraAdapter::add_to(const at::Tensor& y, const at::Tensor& x, const DropoutSeed& dropout_seed) const {
  if (r == 0 || AdaptersOff::active()) return y;
  const at::Tensor in =
      dropout_seed.enabled && dropout > 0 ? seeded_dropout(x, dropout, mix_seed(dropout_seed.seed, id)) : x;
  // PEFT's order: result + lora_B(lora_A(dropout(x))) * scaling.
  return y + at::linear(at::linear(in, A), B) * scale;
}

at::Tensor Linear::forward(const at::Tensor& x, const DropoutSeed& dropout) const {
  return lora.add_to(at::linear(x, weight, bias), x, dropout);
}

at::Tensor RMSNorm::forward(const at::Tensor& x) const { return rms_norm(x, weight, eps); }

at::Tensor Attention::forward(const at::Tensor& x, const RopeTables& rope, const AttentionMask& mask,
                              const DropoutSeed& dropout) const {
  const int64_t b = x.size(0), t = x.size(1);
  // (B, T, heads, head_dim), rotated, then seen as (B, heads, T, head_dim). One product for the
  // three where their weights lie side by side, as for gate and up below.
  const bool plain = !q_proj.bias.defined() && !k_proj.bias.defined() && !v_proj.bias.defined() &&
                     ((q_proj.lora.r == 0 && k_proj.lora.r == 0 && v_proj.lora.r == 0) || AdaptersOff::active());
  Qkv p;
  if (plain) p = joined_qkv(x, q_proj.weight, k_proj.weight, v_proj.weight, rope, num_heads, num_kv_heads);
  if (!p.q.defined()) {
    p.q = rotary(q_proj.forward(x, dropout).view({b, t, num_heads, head_dim}), rope);
    p.k = rotary(k_proj.forward(x, dropout).view({b, t, num_kv_heads, head_dim}), rope);
    p.v = v_proj.forward(x, dropout).view({b, t, num_kv_heads, head_dim});
  }
  const at::Tensor q = p.q.transpose(1, 2), k = p.k.transpose(1, 2), v = p.v.transpose(1, 2);
  const int64_t groups = attention_takes_groups() ? 1 : num_heads / num_kv_heads;
  at::Tensor out = attend(q, repeat_kv(k, groups), repeat_kv(v, groups), mask);
  return o_proj.forward(out.transpose(1, 2).reshape({b, t, num_heads * head_dim}), dropout);
}

at::Tensor Mlp::forward(const at::Tensor& x, const DropoutSeed& dropout) const {
  // Gate and up as one product where their weights lie side by side (FSDP's flat parameter keeps
  // them so) and neither has a bias or an active adapter: one matrix product each way, and the
  // fused SwiGLU reads and writes the joined halves in place.
  const bool plain = !gate_proj.bias.defined() && !up_proj.bias.defined() &&
                     ((gate_proj.lora.r == 0 && up_proj.lora.r == 0) || AdaptersOff::active());
  if (plain) {
    const at::Tensor joined = joined_rows(gate_proj.weight, up_proj.weight);
    if (joined.defined()) return down_proj.forward(swiglu_joined(at::linear(x, joined)), dropout);
  }
  return down_proj.forward(swiglu(gate_proj.forward(x, dropout), up_proj.forward(x, dropout)), dropout);
}

at::Tensor DecoderLayer::forward(const at::Tensor& hidden, const RopeTables& rope, const AttentionMask& mask,
                                 const DropoutSeed& dropout) const {
  // hidden + attention(norm(hidden)), then that + mlp(norm(that)); each norm takes the residual
  // stream's addition before it and its gradient's addition after it into its own kernel.
  const ResidualNorm in = residual_rms_norm(hidden, at::Tensor(), input_layernorm.weight, input_layernorm.eps);
  const ResidualNorm mid = residual_rms_norm(in.sum, self_attn.forward(in.normed, rope, mask, dropout),
                                             post_attention_layernorm.weight, post_attention_layernorm.eps);
  return mid.sum + mlp.forward(mid.normed, dropout);
}

void DecoderLayer::named_parameters(const std::string& prefix, std::vector<NamedParam>& out) {
  auto linear = [&](const std::string& name, Linear& l) {
    out.push_back({prefix + name + ".weight", &l.weight});
    if (l.bias.defined()) out.push_back({prefix + name + ".bias", &l.bias});
    if (l.lora.r > 0) {
      out.push_back({prefix + name + ".lora_A.weight", &l.lora.A});
      out.push_back({prefix + name + ".lora_B.weight", &l.lora.B});
    }
  };
  // transformers' registration order: self_attn (q, k, v, o), mlp (gate, up, down), norms.
  linear("self_attn.q_proj", self_attn.q_proj);
  linear("self_attn.k_proj", self_attn.k_proj);
  linear("self_attn.v_proj", self_attn.v_proj);
  linear("self_attn.o_proj", self_attn.o_proj);
  linear("mlp.gate_proj", mlp.gate_proj);
  linear("mlp.up_proj", mlp.up_proj);
  linear("mlp.down_proj", mlp.down_proj);
  out.push_back({prefix + "input_layernorm.weight", &input_layernorm.weight});
  out.push_back({prefix + "post_attention_layernorm.weight", &post_attention_layernorm.weight});
}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& config, const at::TensorOptions& options) : config_(config) {
  const LlamaConfig& c = config_;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  embed_tokens_ = at::empty({c.vocab_size, c.hidden_size}, options);
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (DecoderLayer& layer : layers_) {
    layer.self_attn.q_proj = make_linear(c.hidden_size, q, c.attention_bias, options);
    layer.self_attn.k_proj = make_linear(c.hidden_size, kv, c.attention_bias, options);
    layer.self_attn.v_proj = make_linear(c.hidden_size, kv, c.attention_bias, options);
    layer.self_attn.o_proj = make_linear(q, c.hidden_size, c.attention_bias, options);
    layer.self_attn.num_heads = c.num_attention_heads;
    layer.self_attn.num_kv_heads = c.num_key_value_heads;
    layer.self_attn.head_dim = c.head_dim;
    layer.mlp.gate_proj = make_linear(c.hidden_size, c.intermediate_size, c.mlp_bias, options);
    layer.mlp.up_proj = make_linear(c.hidden_size, c.intermediate_size, c.mlp_bias, options);
    layer.mlp.down_proj = make_linear(c.intermediate_size, c.hidden_size, c.mlp_bias, options);
    layer.input_layernorm = {at::empty({c.hidden_size}, options), c.rms_norm_eps};
    layer.post_attention_layernorm = {at::empty({c.hidden_size}, options), c.rms_norm_eps};
  }
  norm_ = {at::empty({c.hidden_size}, options), c.rms_norm_eps};
  if (!c.tie_word_embeddings) lm_head_ = at::empty({c.vocab_size, c.hidden_size}, options);
  inv_freq_ = rope_inv_freq(c);
}

std::vector<NamedParam> LlamaForCausalLM::named_parameters() {
  std::vector<NamedParam> out;
  out.push_back({"model.embed_tokens.weight", &embed_tokens_});
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i].named_parameters(fmt::format("model.layers.{}.", i), out);
  out.push_back({"model.norm.weight", &norm_.weight});
  if (lm_head_.defined()) out.push_back({"lm_head.weight", &lm_head_});
  if (head_lora_.r > 0) {
    out.push_back({"lm_head.lora_A.weight", &head_lora_.A});
    out.push_back({"lm_head.lora_B.weight", &head_lora_.B});
  }
  return out;
}

at::Tensor LlamaForCausalLM::embed(const at::Tensor& input_ids) const { return at::embedding(embed_tokens_, input_ids); }

at::Tensor LlamaForCausalLM::head(const at::Tensor& hidden, const DropoutSeed& dropout) const {
  const at::Tensor h = norm_.forward(hidden);
  return head_lora_.add_to(at::linear(h, lm_head_.defined() ? lm_head_ : embed_tokens_), h, dropout);
}

at::Tensor LlamaForCausalLM::head_loss(const at::Tensor& hidden, const at::Tensor& labels,
                                       const DropoutSeed& dropout) const {
  if (head_lora_.r > 0 && !AdaptersOff::active()) return causal_lm_loss(head(hidden, dropout), labels);
  return linear_cross_entropy(norm_.forward(hidden), lm_head_.defined() ? lm_head_ : embed_tokens_, labels);
}

at::Tensor LlamaForCausalLM::head_token_losses(const at::Tensor& hidden, const at::Tensor& labels,
                                               const DropoutSeed& dropout) const {
  if (head_lora_.r > 0 && !AdaptersOff::active()) return causal_lm_token_losses(head(hidden, dropout), labels);
  return linear_token_losses(norm_.forward(hidden), lm_head_.defined() ? lm_head_ : embed_tokens_, labels);
}

RopeTables LlamaForCausalLM::rope(const at::Tensor& position_ids, at::ScalarType dtype) const {
  return rope_tables(inv_freq_, position_ids, dtype);
}

at::Tensor LlamaForCausalLM::forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                     const DropoutSeed& dropout) const {
  ST_CHECK(input_ids.dim() == 2, common::ErrorKind::kInternal, "input_ids must be (batch, tokens), got {} dims",
           input_ids.dim());
  const at::Tensor positions = position_ids.defined() ? position_ids : default_position_ids(input_ids);
  at::Tensor h = embed(input_ids);
  const RopeTables rope_tables = rope(positions, h.scalar_type());
  const AttentionMask mask = packed_document_mask(positions);
  for (const DecoderLayer& layer : layers_) h = layer.forward(h, rope_tables, mask, dropout);
  return head(h, dropout);
}

at::Tensor default_position_ids(const at::Tensor& input_ids) {
  const int64_t t = input_ids.size(1);
  return at::arange(t, at::TensorOptions().dtype(at::kLong).device(input_ids.device()))
      .unsqueeze(0)
      .expand({input_ids.size(0), t});
}

AttentionMask packed_document_mask(const at::Tensor& position_ids) {
  const int64_t b = position_ids.size(0), t = position_ids.size(1);
  const at::Tensor positions = position_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = positions.data_ptr<int64_t>();
  AttentionMask mask;
  bool packed = false;
  for (int64_t r = 0; r < b; ++r) {
    std::vector<AttentionMask::Segment> docs{{0, t}};
    // A document continues while each position is the previous one plus one.
    for (int64_t i = 1; i < t; ++i) {
      if (p[r * t + i] == p[r * t + i - 1] + 1) continue;
      docs.back().end = i;
      docs.push_back({i, t});
    }
    packed = packed || docs.size() > 1;
    mask.rows.push_back(std::move(docs));
  }
  if (!packed) mask.rows.clear();
  return mask;
}

}  // namespace shardtune::model

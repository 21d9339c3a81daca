#include "runtime/model/kv_cache.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "common/error.h"

namespace shardtune::model {
namespace {

// Attention of t new queries over the first n = past + t cached keys: query i (at position past + i)
// sees keys 0 .. past + i. q (B, H, t, D); k, v (B, KV, n, D).
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t past) {
  const int64_t b = k.size(0), kv = k.size(1), n = k.size(2), d = k.size(3), heads = q.size(1), t = q.size(2);
  const int64_t groups = heads / kv;
  // Each key/value head serves `groups` consecutive query heads (transformers' repeat_kv).
  const at::Tensor keys = k.unsqueeze(2).expand({b, kv, groups, n, d}).reshape({b, heads, n, d});
  const at::Tensor vals = v.unsqueeze(2).expand({b, kv, groups, n, d}).reshape({b, heads, n, d});
  at::Tensor scores = at::matmul(q, keys.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  scores = scores.to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  if (t > 1) {
    const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor allowed = at::arange(n, longs).unsqueeze(0) <= (at::arange(t, longs) + past).unsqueeze(1);
    scores = scores.masked_fill(allowed.logical_not().view({1, 1, t, n}), std::numeric_limits<float>::lowest());
  }
  return at::matmul(at::softmax(scores, -1).to(q.scalar_type()), vals);
}

}  // namespace

KvCache::KvCache(const LlamaConfig& config, int64_t batch, int64_t capacity, const at::TensorOptions& options)
    : capacity_(capacity) {
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
    values_.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
  }
}

at::Tensor KvCache::forward(const LlamaForCausalLM& model, const at::Tensor& ids) {
  const int64_t b = ids.size(0), t = ids.size(1), past = length_;
  ST_CHECK(past + t <= capacity_, common::ErrorKind::kUsage, "{} tokens do not fit the {} the cache holds", past + t,
           capacity_);
  at::Tensor h = model.embed(ids);
  const at::Tensor positions =
      (at::arange(t, at::TensorOptions().dtype(at::kLong).device(ids.device())) + past).unsqueeze(0).expand({b, t});
  const RopeTables rope = model.rope(positions, h.scalar_type());
  for (int64_t l = 0; l < model.num_layers(); ++l) {
    const DecoderLayer& layer = model.layer(l);
    const Attention& a = layer.self_attn;
    const at::Tensor x = layer.input_layernorm.forward(h);
    const at::Tensor q = apply_rope(a.q_proj.forward(x).view({b, t, a.num_heads, a.head_dim}).transpose(1, 2), rope);
    const at::Tensor k = apply_rope(a.k_proj.forward(x).view({b, t, a.num_kv_heads, a.head_dim}).transpose(1, 2), rope);
    const at::Tensor v = a.v_proj.forward(x).view({b, t, a.num_kv_heads, a.head_dim}).transpose(1, 2);
    at::Tensor& keys = keys_[static_cast<size_t>(l)];
    at::Tensor& values = values_[static_cast<size_t>(l)];
    keys.narrow(2, past, t).copy_(k);
    values.narrow(2, past, t).copy_(v);
    const at::Tensor out = cached_attention(q, keys.narrow(2, 0, past + t), values.narrow(2, 0, past + t), past);
    h = h + a.o_proj.forward(out.transpose(1, 2).reshape({b, t, a.num_heads * a.head_dim}));
    h = h + layer.mlp.forward(layer.post_attention_layernorm.forward(h));
  }
  length_ = past + t;
  return model.head(h);
}

}  // namespace shardtune::model

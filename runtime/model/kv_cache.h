// Incremental decoding: each block's keys and values of the tokens already seen, so that a new
// token costs one position's work instead of the whole sequence's. The arithmetic is the model's
// own (LlamaForCausalLM::forward): the same projections, rotary embeddings at the tokens' absolute
// positions, grouped-query attention with an fp32 softmax, on the model's device and dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/model/llama.h"

namespace shardtune::model {

class KvCache {
 public:
  // Room for `capacity` tokens of each of `batch` sequences, in the model's dtype and device.
  KvCache(const LlamaConfig& config, int64_t batch, int64_t capacity, const at::TensorOptions& options);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }

  // Logits (B, t, vocab) of `ids` (B, t), the tokens that follow the cached ones (at positions
  // length() ..); their keys and values are cached. Throws common::Error(kUsage) past capacity().
  at::Tensor forward(const LlamaForCausalLM& model, const at::Tensor& ids);

 private:
  std::vector<at::Tensor> keys_, values_;  // per block: (B, kv_heads, capacity, head_dim)
  int64_t length_ = 0, capacity_ = 0;
};

}  // namespace shardtune::model

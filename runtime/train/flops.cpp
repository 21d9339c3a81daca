// FLOP estimates.
#include "runtime/train/flops.h"

namespace shardtune::train {
namespace {

double attention_flops(const model::LlamaConfig& c, int64_t seq_len) {
  return 12.0 * static_cast<double>(c.num_hidden_layers) * static_cast<double>(c.num_attention_heads) *
         static_cast<double>(c.head_dim) * static_cast<double>(seq_len);
}

}  // namespace

double training_flops_per_token(const model::LlamaConfig& c, int64_t seq_len) {
  const int64_t embedding = c.vocab_size * c.hidden_size;
  // num_parameters() holds a tied head once, as the embedding: put the head's product back.
  const double n = static_cast<double>(c.num_parameters() - embedding + (c.tie_word_embeddings ? embedding : 0));
  return 6.0 * n + attention_flops(c, seq_len);
}

double torchtitan_flops_per_token(const model::LlamaConfig& c, int64_t seq_len) {
  const double n = static_cast<double>(c.num_parameters() - c.vocab_size * c.hidden_size);
  return 6.0 * n + attention_flops(c, seq_len);
}

}  // namespace shardtune::train

// torchtitan's FLOP estimate.
#include "runtime/train/flops.h"

namespace shardtune::train {

double training_flops_per_token(const model::LlamaConfig& c, int64_t seq_len) {
  const double n = static_cast<double>(c.num_parameters() - c.vocab_size * c.hidden_size);
  const double attention = 12.0 * static_cast<double>(c.num_hidden_layers) * static_cast<double>(c.num_attention_heads) *
                           static_cast<double>(c.head_dim) * static_cast<double>(seq_len);
  return 6.0 * n + attention;
}

}  // namespace shardtune::train

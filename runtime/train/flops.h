// Training FLOPs per token: 6·N + 12·L·H·Q·T, with N the parameters every token multiplies by
// (every parameter but the token embedding, which is a lookup; the head counted once, also when it
// is the embedding's tied weight), L the layers, H the attention heads, Q the head dimension and
// T the sequence length. 6·N counts the forward and backward matrix products; the second term the
// attention scores and values, which grow with the context. torchtitan's estimate
// (torchtitan/models/utils.py, get_num_flop_per_token) is the same but for a tied head, which it
// leaves out with the embedding (torchtitan_flops_per_token). MFU is achieved FLOP/s over the
// device's peak.
#pragma once

#include <cstdint>

#include "runtime/model/llama_config.h"

namespace shardtune::train {

double training_flops_per_token(const model::LlamaConfig& config, int64_t seq_len);
double torchtitan_flops_per_token(const model::LlamaConfig& config, int64_t seq_len);

}  // namespace shardtune::train

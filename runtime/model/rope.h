// Rotary position embeddings as Hugging Face computes them (fp32), including Llama 3.1's
// "llama3" frequency scaling and "linear" scaling.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/model/llama_config.h"

namespace shardtune::model {

// Inverse frequencies (head_dim / 2,), fp32, after scaling.
at::Tensor rope_inv_freq(const LlamaConfig& config);

struct RopeTables {
  at::Tensor cos;  // (B, T, head_dim), in the compute dtype
  at::Tensor sin;  // (B, T, head_dim)
};

// cos/sin for integer positions (B, T); computed in fp32, cast to `dtype`.
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids, at::ScalarType dtype);

// x * cos + rotate_half(x) * sin for x of (B, heads, T, head_dim).
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope);

}  // namespace shardtune::model

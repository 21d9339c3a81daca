// Text generation with a KV cache: the prompt in one pass, then a token at a time, each chosen
// greedily or drawn (temperature, top-k, top-p) from a seeded generator, until a stop token or
// max_new_tokens.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "runtime/model/llama.h"

namespace shardtune::model {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (the largest logit; the lowest id of equal ones)
  int64_t top_k = 0;         // > 0: draw among the k most likely tokens only
  double top_p = 1.0;        // < 1: draw among the fewest most likely tokens whose probabilities sum to top_p
  uint64_t seed = 0;
};

// The next token from the logits (vocab,) of one position, as transformers' sampling warpers apply
// the options (temperature, then top-k, then top-p). Draws are reproducible for a seed: the
// probabilities are computed in float64 on the host and drawn with a 64-bit Mersenne Twister.
class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& options);
  int32_t next(const at::Tensor& logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  std::vector<int32_t> stop_ids;  // end of sequence / end of turn: generation ends after one
  SamplingOptions sampling;
  std::function<void(const at::Tensor&)> on_logits;  // may be empty: sees each step's logits (vocab,)
};

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens, a stop token included
  bool stopped = false;         // at a stop token (else at max_new_tokens)
  double prefill_seconds = 0, decode_seconds = 0;
};

// `prompt` must not be empty. on_token (may be empty) sees each new token as it is chosen.
Generation generate(const LlamaForCausalLM& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                    const std::function<void(int32_t)>& on_token = {});

}  // namespace shardtune::model

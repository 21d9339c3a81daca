// The causal language-model loss: token t predicts token t+1; labels of -100 (prompt tokens,
// padding) are ignored; the mean is over the tokens that count.
#pragma once

#include <ATen/core/Tensor.h>

namespace shardtune::model {

constexpr int64_t kIgnoreIndex = -100;

// logits (B, T, V) in any float dtype (computed in fp32, or fp64 for fp64 logits), labels (B, T) int64.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);

// The same losses summed instead of averaged: sums over several batches divided by their learned
// tokens give the mean over all of them, whatever the batches' sizes (and 0, not NaN, for a batch
// without a learned token).
at::Tensor causal_lm_loss_sum(const at::Tensor& logits, const at::Tensor& labels);

// Each token's loss (B, T): position t's the loss of predicting label t + 1, 0 where that label is
// -100 and at the last position; fp32 (fp64 for fp64 logits). Minus a row's sum is the
// log-probability of its labelled tokens.
at::Tensor causal_lm_token_losses(const at::Tensor& logits, const at::Tensor& labels);

}  // namespace shardtune::model

// Shifted cross entropy with ignore index, as transformers' ForCausalLMLoss.
#include "runtime/model/loss.h"

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/core/Reduction.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

namespace shardtune::model {

namespace {

at::Tensor shifted_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, at::Reduction::Reduction reduction) {
  const int64_t t = logits.size(1), v = logits.size(2);
  // Half-precision logits are upcast (as transformers does); fp64 stays fp64 for gradient checks.
  const at::ScalarType dtype = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor shifted_logits = logits.narrow(1, 0, t - 1).to(dtype).reshape({-1, v});
  at::Tensor shifted_labels = labels.narrow(1, 1, t - 1).reshape({-1});
  return at::cross_entropy_loss(shifted_logits, shifted_labels, {}, reduction, kIgnoreIndex);
}

}  // namespace

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  return shifted_cross_entropy(logits, labels, at::Reduction::Mean);
}

at::Tensor causal_lm_loss_sum(const at::Tensor& logits, const at::Tensor& labels) {
  return shifted_cross_entropy(logits, labels, at::Reduction::Sum);
}

at::Tensor causal_lm_token_losses(const at::Tensor& logits, const at::Tensor& labels) {
  const int64_t b = logits.size(0), t = logits.size(1);
  const at::Tensor losses = shifted_cross_entropy(logits, labels, at::Reduction::None).view({b, t - 1});
  return at::cat({losses, at::zeros({b, 1}, losses.options())}, 1);
}

}  // namespace shardtune::model

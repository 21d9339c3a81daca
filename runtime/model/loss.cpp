// Shifted cross entropy with ignore index, as transformers' ForCausalLMLoss.
#include "runtime/model/loss.h"

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/core/Reduction.h>

namespace shardtune::model {

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  const int64_t t = logits.size(1), v = logits.size(2);
  // Half-precision logits are upcast (as transformers does); fp64 stays fp64 for gradient checks.
  const at::ScalarType dtype = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor shifted_logits = logits.narrow(1, 0, t - 1).to(dtype).reshape({-1, v});
  at::Tensor shifted_labels = labels.narrow(1, 1, t - 1).reshape({-1});
  return at::cross_entropy_loss(shifted_logits, shifted_labels, {}, at::Reduction::Mean, kIgnoreIndex);
}

}  // namespace shardtune::model

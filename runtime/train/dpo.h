// Direct preference optimisation (Rafailov et al., 2023) and the variants TRL's DPOTrainer offers
// beside it, with its formulas: for a pair, the policy's log-probabilities of the chosen and the
// rejected answer (summed over the answer's tokens; for IPO averaged) and the reference's give the
// margin Δ = (chosen − rejected) − (ref_chosen − ref_rejected), and
//   sigmoid:  −(1 − ε) log σ(β Δ) − ε log σ(−β Δ)   (ε: label_smoothing, the conservative DPO)
//   ipo:      (Δ − 1 / (2 β))²
//   hinge:    max(0, 1 − β Δ)
// averaged over the pairs; the rewards are β (policy − reference) of each answer, without gradient.
// A batch of pairs goes through the model in one pass, every chosen sequence then every rejected
// one (Batch::pairs).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

#include "common/job/job.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/train/batch.h"
#include "runtime/train/preference_metrics.h"

namespace shardtune::train {

struct DpoOptions {
  job::DpoLossType loss = job::DpoLossType::kSigmoid;
  double beta = 0.1;
  double label_smoothing = 0.0;
  // IPO compares log-probabilities averaged over each answer's tokens (TRL's), the others sums.
  bool averages() const { return loss == job::DpoLossType::kIpo; }
};

DpoOptions dpo_options(const job::DpoSection& dpo);

// Per pair (pairs,): the losses (with gradient through the policy's log-probabilities) and the
// rewards (without). Any float dtype; computed in that of `chosen`.
struct DpoTerms {
  at::Tensor losses, chosen_rewards, rejected_rewards;
};
DpoTerms dpo_terms(const at::Tensor& chosen, const at::Tensor& rejected, const at::Tensor& ref_chosen,
                   const at::Tensor& ref_rejected, const DpoOptions& options);

// The answers' log-probabilities (2P,) fp64 of a batch of pairs from its token losses and labels
// (2P, T) (FsdpLlama::forward_token_losses): minus each row's sum over its labelled tokens, or with
// `average` minus their mean.
at::Tensor answer_logps(const at::Tensor& token_losses, const at::Tensor& labels, bool average);

// A batch's reference log-probabilities (2P,) fp64, summed over each answer, without gradient.
using ReferenceLogps = std::function<at::Tensor(const Batch&)>;

// The policy model itself with its adapters switched off (reference = "base").
ReferenceLogps reference_without_adapters(fsdp::FsdpLlama& model);
// A frozen sharded model (reference = "model"); collective over its groups, as a forward is.
ReferenceLogps reference_model(fsdp::FsdpLlama& frozen);

struct PreferenceObjective {
  DpoOptions dpo;
  ReferenceLogps reference;  // empty: the batch's precomputed ones (Batch::reference_logps)
};

// Sums over pairs of what PreferenceMetrics reports, in its order, then the pairs: a (kDpoSums,)
// fp64 tensor that micro-batches add to and ranks reduce.
constexpr int64_t kDpoSums = 7;
PreferenceMetrics preference_metrics(const double* sums);

// A micro-batch of pairs: its mean DPO loss over its pairs, with gradient through `model`, the
// reference's log-probabilities taken first; its pairs' sums added to `sums` (on the model's
// device) unless it is null.
at::Tensor dpo_batch_loss(fsdp::FsdpLlama& model, const Batch& b, const model::DropoutSeed& dropout,
                          const PreferenceObjective& objective, at::Tensor* sums);

}  // namespace shardtune::train

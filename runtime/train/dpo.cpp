// DPO's losses, rewards and metrics.
#include "runtime/train/dpo.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/log_sigmoid.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/stack.h>
#include <ATen/record_function.h>

#include <optional>

#include "common/error.h"
#include "runtime/model/loss.h"
#include "runtime/model/lora.h"

namespace shardtune::train {

DpoOptions dpo_options(const job::DpoSection& dpo) { return {dpo.loss_type, dpo.beta, dpo.label_smoothing}; }

DpoTerms dpo_terms(const at::Tensor& chosen, const at::Tensor& rejected, const at::Tensor& ref_chosen,
                   const at::Tensor& ref_rejected, const DpoOptions& o) {
  const at::ScalarType dtype = chosen.scalar_type();
  const at::Tensor rc = ref_chosen.to(chosen.device(), dtype), rr = ref_rejected.to(chosen.device(), dtype);
  const at::Tensor margin = (chosen - rejected) - (rc - rr);
  at::Tensor losses;
  switch (o.loss) {
    case job::DpoLossType::kSigmoid:
      losses = -at::log_sigmoid(margin * o.beta) * (1.0 - o.label_smoothing);
      if (o.label_smoothing > 0) losses = losses - at::log_sigmoid(margin * -o.beta) * o.label_smoothing;
      break;
    case job::DpoLossType::kIpo: losses = (margin - 1.0 / (2.0 * o.beta)).square(); break;
    case job::DpoLossType::kHinge: losses = at::relu(1.0 - margin * o.beta); break;
  }
  return {losses, ((chosen - rc) * o.beta).detach(), ((rejected - rr) * o.beta).detach()};
}

namespace {

// Each row's labelled tokens (its answer's length), fp64 on `device`.
at::Tensor answer_lengths(const at::Tensor& labels, const at::Device& device) {
  return labels.narrow(1, 1, labels.size(1) - 1).ne(model::kIgnoreIndex).sum(1).to(device, at::kDouble);
}

// A reference's pass through `model`, without gradient; with `adapters_off`, its base alone.
ReferenceLogps reference_pass(fsdp::FsdpLlama& model, bool adapters_off) {
  return [&model, adapters_off](const Batch& b) {
    RECORD_USER_SCOPE("dpo.reference");
    at::NoGradGuard no_grad;
    std::optional<model::AdaptersOff> off;
    if (adapters_off) off.emplace();
    return answer_logps(model.forward_token_losses(b.input_ids, b.position_ids, b.labels), b.labels, false);
  };
}

}  // namespace

at::Tensor answer_logps(const at::Tensor& token_losses, const at::Tensor& labels, bool average) {
  const at::Tensor sums = -token_losses.to(at::kDouble).sum(1);
  return average ? sums / answer_lengths(labels, token_losses.device()) : sums;
}

ReferenceLogps reference_without_adapters(fsdp::FsdpLlama& model) { return reference_pass(model, true); }

ReferenceLogps reference_model(fsdp::FsdpLlama& frozen) { return reference_pass(frozen, false); }

PreferenceMetrics preference_metrics(const double* s) {
  PreferenceMetrics m;
  m.pairs = static_cast<int64_t>(s[6]);
  if (m.pairs == 0) return m;
  const double n = s[6];
  m.rewards_chosen = s[0] / n;
  m.rewards_rejected = s[1] / n;
  m.rewards_accuracies = s[2] / n;
  m.rewards_margins = s[3] / n;
  m.logps_chosen = s[4] / n;
  m.logps_rejected = s[5] / n;
  return m;
}

at::Tensor dpo_batch_loss(fsdp::FsdpLlama& model, const Batch& b, const model::DropoutSeed& dropout,
                          const PreferenceObjective& objective, at::Tensor* sums) {
  ST_CHECK(b.pairs > 0 && b.input_ids.size(0) == 2 * b.pairs, common::ErrorKind::kInternal,
           "a DPO micro-batch of {} rows for {} pairs", b.input_ids.size(0), b.pairs);
  const int64_t p = b.pairs;
  const at::Device device = model.device();
  // The reference first: its pass keeps nothing, so the policy's activations never share memory with it.
  at::Tensor ref;
  if (objective.reference) {
    ref = objective.reference(b);
  } else {
    ST_CHECK(b.reference_logps.defined(), common::ErrorKind::kInternal,
             "a DPO micro-batch without reference log-probabilities");
    ref = at::cat({b.reference_logps.select(1, 0), b.reference_logps.select(1, 1)}).to(device);
  }
  const bool average = objective.dpo.averages();
  if (average) ref = ref / answer_lengths(b.labels, device);
  const at::Tensor policy =
      answer_logps(model.forward_token_losses(b.input_ids, b.position_ids, b.labels, dropout), b.labels, average);
  const DpoTerms terms =
      dpo_terms(policy.narrow(0, 0, p), policy.narrow(0, p, p), ref.narrow(0, 0, p), ref.narrow(0, p, p), objective.dpo);
  if (sums != nullptr) {
    const at::Tensor c = terms.chosen_rewards, r = terms.rejected_rewards;
    const at::Tensor pd = policy.detach();
    *sums += at::stack({c.sum(), r.sum(), c.gt(r).sum().to(at::kDouble), (c - r).sum(), pd.narrow(0, 0, p).sum(),
                        pd.narrow(0, p, p).sum(), at::full({}, static_cast<double>(p), pd.options())});
  }
  return terms.losses.mean();
}

}  // namespace shardtune::train

// Validation over every row, at any world size.
#include "runtime/train/evaluate.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "common/error.h"
#include "runtime/model/loss.h"
#include "runtime/train/collate.h"

namespace shardtune::train {

int64_t eval_batches(int64_t rows, int64_t per_rank, int ranks) {
  const int64_t global = per_rank * ranks;
  return (rows + global - 1) / global;
}

std::vector<int64_t> eval_rows(int64_t rows, int64_t per_rank, int64_t batch, int rank, int ranks) {
  const int64_t global = per_rank * ranks;
  const int64_t first = batch * global;
  const int64_t count = std::clamp<int64_t>(rows - first, 0, global);
  std::vector<int64_t> out;
  for (int64_t i = first + rank * count / ranks; i < first + (rank + 1) * count / ranks; ++i) out.push_back(i);
  return out;
}

namespace {

// Pairs: the sum of their DPO losses, then the metric sums; every rank's summed.
Evaluation evaluate_pairs(fsdp::FsdpLlama& model, const data::Dataset& data, int64_t per_rank, int64_t batches,
                          dist::Communicator& world, const PreferenceObjective& objective) {
  const int ranks = world.size(), rank = world.rank();
  at::Tensor sums = at::zeros({2 + kDpoSums}, at::TensorOptions().dtype(at::kDouble).device(model.device()));
  at::Tensor metric_sums = sums.narrow(0, 2, kDpoSums);
  for (int64_t b = 0; b < batches; ++b) {
    const std::vector<int64_t> mine = eval_rows(data.size(), per_rank, b, rank, ranks);
    const Batch batch = collate(data, mine.empty() ? std::vector<int64_t>{b * per_rank * ranks} : mine);
    const at::Tensor loss = dpo_batch_loss(model, batch, {}, objective, mine.empty() ? nullptr : &metric_sums);
    if (mine.empty()) continue;  // a placeholder: its rank took part in the collectives, nothing more
    sums.narrow(0, 0, 1) += loss.detach().to(at::kDouble) * static_cast<double>(batch.pairs);
    const at::Tensor labels = batch.labels.narrow(1, 1, batch.labels.size(1) - 1);
    sums.narrow(0, 1, 1) += labels.ne(model::kIgnoreIndex).sum().to(sums.device(), at::kDouble);
  }
  at::Tensor totals = sums.cpu();
  world.all_reduce(totals, dist::ReduceOp::kSum);
  const double* t = totals.data_ptr<double>();
  const PreferenceMetrics m = preference_metrics(t + 2);
  ST_CHECK(m.pairs > 0, common::ErrorKind::kInternal, "validation evaluated no pair");
  return {t[0] / static_cast<double>(m.pairs), batches, m.pairs, static_cast<int64_t>(t[1]), m};
}

}  // namespace

Evaluation evaluate(fsdp::FsdpLlama& model, const data::Dataset& data, int64_t per_rank, int64_t max_batches,
                    dist::Communicator& world, const PreferenceObjective* preference) {
  at::NoGradGuard no_grad;
  const int ranks = world.size(), rank = world.rank();
  int64_t batches = eval_batches(data.size(), per_rank, ranks);
  if (max_batches > 0) batches = std::min(batches, max_batches);
  if (preference != nullptr) return evaluate_pairs(model, data, per_rank, batches, world, *preference);
  // On the device until the end: one host synchronisation per evaluation, not per batch.
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model.device()));
  double tokens = 0, rows = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const std::vector<int64_t> mine = eval_rows(data.size(), per_rank, b, rank, ranks);
    const Batch batch = collate(data, mine.empty() ? std::vector<int64_t>{b * per_rank * ranks} : mine);
    const at::Tensor logits = model.forward(batch.input_ids, batch.position_ids);
    if (mine.empty()) continue;  // a placeholder: its rank took part in the collectives, nothing more
    const at::Tensor labels = batch.labels.narrow(1, 1, batch.labels.size(1) - 1);
    tokens += static_cast<double>(labels.ne(model::kIgnoreIndex).sum().item<int64_t>());
    rows += static_cast<double>(mine.size());
    loss_sum += model::causal_lm_loss_sum(logits, batch.labels.to(model.device())).to(at::kDouble);
  }
  at::Tensor totals = at::tensor({loss_sum.item<double>(), tokens, rows}, at::kDouble);
  world.all_reduce(totals, dist::ReduceOp::kSum);
  const double* t = totals.data_ptr<double>();
  ST_CHECK(t[1] > 0, common::ErrorKind::kInternal, "validation evaluated {} rows without a learned token", t[2]);
  return {t[0] / t[1], batches, static_cast<int64_t>(t[2]), static_cast<int64_t>(t[1])};
}

Evaluation combine(const std::vector<Evaluation>& parts) {
  Evaluation out;
  double weighted = 0;
  for (const Evaluation& e : parts) {
    out.batches += e.batches;
    out.rows += e.rows;
    out.tokens += e.tokens;
  }
  const bool pairs = !parts.empty() && parts.front().preference.has_value();
  if (pairs) out.preference = PreferenceMetrics{};
  for (const Evaluation& e : parts) {
    const double weight = pairs ? static_cast<double>(e.rows) : static_cast<double>(e.tokens);
    weighted += weight;
    out.loss += e.loss * weight;
    if (!pairs) continue;
    PreferenceMetrics& m = *out.preference;
    const PreferenceMetrics& p = *e.preference;
    m.rewards_chosen += p.rewards_chosen * weight;
    m.rewards_rejected += p.rewards_rejected * weight;
    m.rewards_accuracies += p.rewards_accuracies * weight;
    m.rewards_margins += p.rewards_margins * weight;
    m.logps_chosen += p.logps_chosen * weight;
    m.logps_rejected += p.logps_rejected * weight;
    m.pairs += p.pairs;
  }
  if (weighted <= 0) return out;
  out.loss /= weighted;
  if (pairs)
    for (double* v : {&out.preference->rewards_chosen, &out.preference->rewards_rejected,
                      &out.preference->rewards_accuracies, &out.preference->rewards_margins,
                      &out.preference->logps_chosen, &out.preference->logps_rejected})
      *v /= weighted;
  return out;
}

}  // namespace shardtune::train

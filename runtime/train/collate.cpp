// Collating samples into micro-batches.
#include "runtime/train/collate.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>

#include "common/error.h"
#include "runtime/model/loss.h"

namespace shardtune::train {

namespace {

// Pairs as rows: every chosen sequence, then every rejected one; their reference log-probabilities.
Batch collate_pairs(const data::Dataset& dataset, std::vector<data::Sample> samples) {
  const int64_t pairs = static_cast<int64_t>(samples.size());
  std::vector<data::Sample> rows(2 * samples.size());
  const bool reference = !samples[0].reference_logps.empty();
  at::Tensor logps = reference ? at::empty({pairs, 2}, at::kDouble) : at::Tensor();
  for (size_t i = 0; i < samples.size(); ++i) {
    data::Sample& s = samples[i];
    ST_CHECK(s.is_pair() && s.reference_logps.size() == (reference ? 2u : 0u), common::ErrorKind::kInternal,
             "a micro-batch mixes preference pairs with other samples");
    rows[i].input_ids = std::move(s.input_ids);
    rows[i].labels = std::move(s.labels);
    rows[samples.size() + i].input_ids = std::move(s.rejected_input_ids);
    rows[samples.size() + i].labels = std::move(s.rejected_labels);
    if (reference) std::copy(s.reference_logps.begin(), s.reference_logps.end(), logps.data_ptr<double>() + 2 * i);
  }
  Batch batch = collate_samples(dataset, rows, {});
  batch.pairs = pairs;
  batch.reference_logps = logps;
  return batch;
}

}  // namespace

Batch collate(const data::Dataset& dataset, const std::vector<int64_t>& indices) {
  std::vector<data::Sample> samples;
  for (const int64_t index : indices) samples.push_back(dataset.get(index));
  if (samples[0].is_pair()) return collate_pairs(dataset, std::move(samples));
  return collate_samples(dataset, samples, indices);
}

Batch collate_samples(const data::Dataset& dataset, const std::vector<data::Sample>& samples,
                      const std::vector<int64_t>& indices) {
  const int64_t b = static_cast<int64_t>(samples.size());
  int64_t t = 0;
  for (const data::Sample& s : samples) t = std::max(t, static_cast<int64_t>(s.input_ids.size()));
  Batch batch{at::full({b, t}, dataset.pad_id(), at::kLong), at::full({b, t}, model::kIgnoreIndex, at::kLong), {}, 1.0, {}};
  if (!samples[0].position_ids.empty()) batch.position_ids = at::empty({b, t}, at::kLong);
  for (int64_t i = 0; i < b; ++i) {
    const data::Sample& s = samples[static_cast<size_t>(i)];
    ST_CHECK(s.labels.size() == s.input_ids.size() && (!batch.position_ids.defined() || static_cast<int64_t>(s.input_ids.size()) == t),
             common::ErrorKind::kInternal, "sample {} has {} tokens and {} labels; the batch {} tokens",
             indices.empty() ? i : indices[static_cast<size_t>(i)], s.input_ids.size(), s.labels.size(), t);
    std::copy(s.input_ids.begin(), s.input_ids.end(), batch.input_ids.data_ptr<int64_t>() + i * t);
    std::copy(s.labels.begin(), s.labels.end(), batch.labels.data_ptr<int64_t>() + i * t);
    if (batch.position_ids.defined()) {
      ST_CHECK(static_cast<int64_t>(s.position_ids.size()) == t, common::ErrorKind::kInternal,
               "sample {} has {} positions for {} tokens", indices.empty() ? i : indices[static_cast<size_t>(i)],
               s.position_ids.size(), t);
      std::copy(s.position_ids.begin(), s.position_ids.end(), batch.position_ids.data_ptr<int64_t>() + i * t);
    }
  }
  return batch;
}

std::vector<Batch> step_batches(const data::Dataset& dataset, const DataOrder& order, const std::vector<int64_t>& permutation,
                                const StepSpan& span, int accumulation, int rank, int ranks) {
  const int64_t slots = static_cast<int64_t>(accumulation) * ranks;
  std::vector<Batch> micro;
  for (int m = 0; m < accumulation; ++m) {
    const std::vector<int64_t> mine = order.samples(permutation, span.begin, span.size(), m, accumulation, rank, ranks);
    if (mine.empty()) {
      micro.push_back(collate(dataset, {permutation[static_cast<size_t>(span.begin)]}));
      micro.back().weight = 0.0;
      continue;
    }
    micro.push_back(collate(dataset, mine));
    const int64_t share = static_cast<int64_t>(mine.size()) * slots;  // exact: a full step's slots weigh 1
    if (share != span.size())
      micro.back().weight = static_cast<double>(share) / static_cast<double>(span.size());
    micro.back().sample_ids = mine;
  }
  return micro;
}

void pin_for(std::vector<Batch>& batches, const c10::Device& device) {
  if (!device.is_cuda()) return;
  for (Batch& b : batches)
    for (at::Tensor* t : {&b.input_ids, &b.labels, &b.position_ids})
      if (t->defined()) *t = t->pin_memory();
}

}  // namespace shardtune::train

// Validation: every row of the validation set evaluated once, whatever the number of ranks, and
// the loss averaged over every learned token of every row, so that any world size reports the same
// value (up to the order of the sums). Rows are taken in global batches of val_batch_size rows per
// rank; a batch with fewer rows than ranks leaves some ranks a placeholder row that counts for
// nothing (FSDP's forward is collective: every rank runs as many as the others).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/data/dataset.h"
#include "runtime/train/dpo.h"

namespace shardtune::train {

// Global batches of `per_rank` rows per rank that cover `rows` rows: ceil(rows / (per_rank x ranks)).
int64_t eval_batches(int64_t rows, int64_t per_rank, int ranks);

// The rows rank `rank` evaluates in global batch `batch`: the batch covers rows [batch x G,
// min(rows, (batch + 1) x G)) with G = per_rank x ranks, split over the ranks as evenly as they go.
// Empty for a rank the batch leaves without a row. Pure.
std::vector<int64_t> eval_rows(int64_t rows, int64_t per_rank, int64_t batch, int rank, int ranks);

struct Evaluation {
  double loss = 0;      // summed token losses / learned tokens, over every rank
  int64_t batches = 0;  // global batches evaluated
  int64_t rows = 0;     // rows evaluated, over every rank
  int64_t tokens = 0;   // learned tokens in them
  // Preference pairs: `loss` is the mean DPO loss over the pairs (rows counts pairs, tokens the
  // answers' tokens), and these its metrics.
  std::optional<PreferenceMetrics> preference;
};

// The evaluation of several sets together from each one's: sums of rows, tokens and batches, the
// loss over all their learned tokens (their pairs, for DPO, as are the preference metrics).
Evaluation combine(const std::vector<Evaluation>& parts);

// Evaluates `data` (every row holds a learned token) in batches of `per_rank` rows per rank, at most
// `max_batches` of them (0: all). Collective over `world`.
// Preference pairs are evaluated on `preference`'s DPO loss.
Evaluation evaluate(fsdp::FsdpLlama& model, const data::Dataset& data, int64_t per_rank, int64_t max_batches,
                    dist::Communicator& world, const PreferenceObjective* preference = nullptr);

}  // namespace shardtune::train

// A micro-batch as the model consumes it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardtune::train {

struct Batch {
  at::Tensor input_ids;     // (B, T) int64
  at::Tensor labels;        // (B, T) int64, -100 where no loss is taken
  at::Tensor position_ids;  // (B, T) int64, restarting per packed document; or undefined
  // The micro-batch's loss weight: its share of the step's samples times the step's micro-batch
  // slots (micro-batches x ranks). 1 in a full step; in an epoch's short last step, the slots hold
  // floor or ceiling shares, and a slot left without samples gets a placeholder of weight 0 (its
  // rank still takes part in every collective of the step).
  double weight = 1.0;
  std::vector<int64_t> sample_ids;  // the dataset indices of its samples; empty for a placeholder
  // Preference pairs: rows [0, pairs) hold the chosen answers' sequences and rows [pairs, 2 pairs)
  // the rejected ones', in the same order; 0 for other batches.
  int64_t pairs = 0;
  at::Tensor reference_logps;  // (pairs, 2) fp64, chosen then rejected, when precomputed; else undefined
};

}  // namespace shardtune::train

// Which samples each rank trains on: a seeded order of the dataset per epoch (its permutation, or
// the interleave of a mixture's sources: runtime/data/mixture.h), cut into
// steps by the run's schedule (run_schedule.h); each step's samples are split as evenly as they go
// over its micro-batches and ranks. The order depends only on the seed (and the samples' lengths),
// never on the global batch or on how a step is split among ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/mixture.h"

namespace shardtune::train {

class DataOrder {
 public:
  // With `lengths` (one per sample), each epoch's shuffled order is sorted by length, longest
  // first, within consecutive windows of kLengthWindow samples, so that a global batch holds
  // samples of similar length (little padding). The window does not depend on the batch size, so
  // the order is the same at every world size.
  DataOrder(int64_t dataset_size, uint64_t seed, std::vector<int64_t> lengths = {});
  // Epochs of `mixture.epoch_samples()` samples drawn from its sources (`lengths`: one per sample
  // of the mixed dataset).
  DataOrder(data::Mixture mixture, uint64_t seed, std::vector<int64_t> lengths = {});
  static constexpr int64_t kLengthWindow = 1024;

  // The order of epoch `epoch`: epoch_size() dataset indices.
  std::vector<int64_t> permutation(int64_t epoch) const;
  // Sample indices of micro-batch `micro` (of `accumulation`) for `rank` of `ranks` data-parallel
  // ranks, of the step that trains positions [first, first + count) of the epoch's permutation.
  // Slot s = micro * ranks + rank takes positions [first + s*count/slots, first + (s+1)*count/slots):
  // a full step gives every slot count/slots samples; a short one (an epoch's last) gives each
  // slot its floor or ceiling share, and none to some slots when count < slots.
  std::vector<int64_t> samples(const std::vector<int64_t>& permutation, int64_t first, int64_t count, int micro,
                               int accumulation, int rank, int ranks) const;
  int64_t epoch_size() const { return mixture_.epoch_samples(); }
  const data::Mixture& mixture() const { return mixture_; }

 private:
  data::Mixture mixture_;
  uint64_t seed_;
  std::vector<int64_t> lengths_;
};

}  // namespace shardtune::train

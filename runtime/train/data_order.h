// Which samples each rank trains on: a seeded permutation of the dataset per epoch, cut into
// global batches; rank r takes its slice of each micro-batch. The order depends only on the
// seed and the global batch size, never on how the batch is split among ranks.
#pragma once

#include <cstdint>
#include <vector>

namespace shardtune::train {

class DataOrder {
 public:
  // With `lengths` (one per sample), each epoch's shuffled order is sorted by length, longest
  // first, within consecutive windows of kLengthWindow samples, so that a global batch holds
  // samples of similar length (little padding). The window does not depend on the batch size, so
  // the order is the same at every world size.
  DataOrder(int64_t dataset_size, int64_t global_batch, uint64_t seed, std::vector<int64_t> lengths = {});
  static constexpr int64_t kLengthWindow = 1024;

  int64_t steps_per_epoch() const { return dataset_size_ / global_batch_; }
  // The permutation of epoch `epoch`.
  std::vector<int64_t> permutation(int64_t epoch) const;
  // Sample indices of micro-batch `micro` (of `accumulation`) of the step whose global batch
  // starts at position `first` of the epoch's permutation, for `rank` of `ranks` data-parallel
  // ranks. Positions, not step numbers, so another global batch size continues the same order.
  std::vector<int64_t> samples(const std::vector<int64_t>& permutation, int64_t first, int micro, int accumulation,
                               int rank, int ranks) const;
  int64_t global_batch() const { return global_batch_; }
  int64_t dataset_size() const { return dataset_size_; }

 private:
  int64_t dataset_size_;
  int64_t global_batch_;
  uint64_t seed_;
  std::vector<int64_t> lengths_;
};

}  // namespace shardtune::train

// Seeded global data order.
#include "runtime/train/data_order.h"

#include <algorithm>

#include "common/error.h"

namespace shardtune::train {

DataOrder::DataOrder(int64_t dataset_size, uint64_t seed, std::vector<int64_t> lengths)
    : DataOrder(data::Mixture::single(dataset_size), seed, std::move(lengths)) {}

DataOrder::DataOrder(data::Mixture mixture, uint64_t seed, std::vector<int64_t> lengths)
    : mixture_(std::move(mixture)), seed_(seed), lengths_(std::move(lengths)) {
  ST_CHECK(lengths_.empty() || static_cast<int64_t>(lengths_.size()) == mixture_.dataset_size(),
           common::ErrorKind::kInternal, "{} lengths for {} samples", lengths_.size(), mixture_.dataset_size());
}

std::vector<int64_t> DataOrder::permutation(int64_t epoch) const {
  std::vector<int64_t> p = mixture_.order(epoch, seed_);
  if (!lengths_.empty()) {
    for (size_t w = 0; w < p.size(); w += kLengthWindow) {
      const auto end = p.begin() + static_cast<std::ptrdiff_t>(std::min(p.size(), w + kLengthWindow));
      std::stable_sort(p.begin() + static_cast<std::ptrdiff_t>(w), end, [&](int64_t a, int64_t b) {
        return lengths_[static_cast<size_t>(a)] > lengths_[static_cast<size_t>(b)];
      });
    }
  }
  return p;
}

std::vector<int64_t> DataOrder::samples(const std::vector<int64_t>& permutation, int64_t first, int64_t count,
                                        int micro, int accumulation, int rank, int ranks) const {
  const int64_t slots = static_cast<int64_t>(accumulation) * ranks;
  const int64_t slot = static_cast<int64_t>(micro) * ranks + rank;
  const int64_t begin = first + slot * count / slots, end = first + (slot + 1) * count / slots;
  ST_CHECK(first >= 0 && first + count <= epoch_size() && slot < slots, common::ErrorKind::kInternal,
           "samples {}..{} are outside the epoch of {}", first, first + count, epoch_size());
  return std::vector<int64_t>(permutation.begin() + begin, permutation.begin() + end);
}

}  // namespace shardtune::train

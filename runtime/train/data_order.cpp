// Seeded global data order.
#include "runtime/train/data_order.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"

namespace shardtune::train {

DataOrder::DataOrder(int64_t dataset_size, int64_t global_batch, uint64_t seed, std::vector<int64_t> lengths)
    : dataset_size_(dataset_size), global_batch_(global_batch), seed_(seed), lengths_(std::move(lengths)) {
  ST_CHECK(lengths_.empty() || static_cast<int64_t>(lengths_.size()) == dataset_size, common::ErrorKind::kInternal,
           "{} lengths for {} samples", lengths_.size(), dataset_size);
  ST_CHECK(global_batch > 0 && dataset_size >= global_batch, common::ErrorKind::kConfig,
           "the training data has {} samples, fewer than one global batch of {}", dataset_size, global_batch);
}

std::vector<int64_t> DataOrder::permutation(int64_t epoch) const {
  std::vector<int64_t> p(static_cast<size_t>(dataset_size_));
  std::iota(p.begin(), p.end(), 0);
  // Fisher-Yates with a 64-bit Mersenne Twister: its output sequence is fixed by the standard.
  std::mt19937_64 rng(seed_ * 1000003ull + static_cast<uint64_t>(epoch));
  for (size_t i = p.size() - 1; i > 0; --i) std::swap(p[i], p[rng() % (i + 1)]);
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

std::vector<int64_t> DataOrder::samples(const std::vector<int64_t>& permutation, int64_t first, int micro,
                                        int accumulation, int rank, int ranks) const {
  const int64_t per_rank = global_batch_ / (static_cast<int64_t>(accumulation) * ranks);
  const int64_t start = first + (static_cast<int64_t>(micro) * ranks + rank) * per_rank;
  ST_CHECK(start >= 0 && start + per_rank <= dataset_size_, common::ErrorKind::kInternal,
           "samples {}..{} are outside the epoch of {}", start, start + per_rank, dataset_size_);
  return std::vector<int64_t>(permutation.begin() + start, permutation.begin() + start + per_rank);
}

}  // namespace shardtune::train

// Seeded global data order.
#include "runtime/train/data_order.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"

namespace shardtune::train {

DataOrder::DataOrder(int64_t dataset_size, uint64_t seed, std::vector<int64_t> lengths)
    : dataset_size_(dataset_size), seed_(seed), lengths_(std::move(lengths)) {
  ST_CHECK(lengths_.empty() || static_cast<int64_t>(lengths_.size()) == dataset_size, common::ErrorKind::kInternal,
           "{} lengths for {} samples", lengths_.size(), dataset_size);
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

std::vector<int64_t> DataOrder::samples(const std::vector<int64_t>& permutation, int64_t first, int64_t count,
                                        int micro, int accumulation, int rank, int ranks) const {
  const int64_t slots = static_cast<int64_t>(accumulation) * ranks;
  const int64_t slot = static_cast<int64_t>(micro) * ranks + rank;
  const int64_t begin = first + slot * count / slots, end = first + (slot + 1) * count / slots;
  ST_CHECK(first >= 0 && first + count <= dataset_size_ && slot < slots, common::ErrorKind::kInternal,
           "samples {}..{} are outside the epoch of {}", first, first + count, dataset_size_);
  return std::vector<int64_t>(permutation.begin() + begin, permutation.begin() + end);
}

}  // namespace shardtune::train

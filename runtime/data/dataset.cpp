// The synthetic copy task.
#include "runtime/data/dataset.h"

#include <algorithm>

#include "common/error.h"
#include "runtime/data/sft_examples.h"

namespace shardtune::data {
namespace {

// SplitMix64: a well-mixed value for (seed, index, position), cheap and the same everywhere.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

SyntheticCopyDataset::SyntheticCopyDataset(int64_t num_samples, int64_t context_length, int64_t vocab_size,
                                           uint64_t seed)
    : num_samples_(num_samples), context_length_(context_length), vocab_size_(vocab_size), seed_(seed) {
  ST_CHECK(context_length >= 4 && vocab_size > kFirstToken, common::ErrorKind::kConfig,
           "the synthetic copy task needs context_length >= 4 and a vocabulary of more than {} tokens", kFirstToken);
}

Sample SyntheticCopyDataset::get(int64_t index) const {
  const int64_t k = (context_length_ - 2) / 2;
  // A small alphabet keeps the task learnable by a tiny model in a few hundred steps.
  const int64_t alphabet = std::min<int64_t>(vocab_size_ - kFirstToken, 64);
  Sample s;
  s.input_ids.push_back(kBos);
  std::vector<int64_t> copy;
  for (int64_t i = 0; i < k; ++i)
    copy.push_back(kFirstToken + static_cast<int64_t>(mix(seed_ ^ mix(static_cast<uint64_t>(index) * 1315423911ull + i)) %
                                                      static_cast<uint64_t>(alphabet)));
  s.input_ids.insert(s.input_ids.end(), copy.begin(), copy.end());
  s.input_ids.push_back(kSep);
  s.input_ids.insert(s.input_ids.end(), copy.begin(), copy.end());
  while (static_cast<int64_t>(s.input_ids.size()) < context_length_) s.input_ids.push_back(kSep);
  s.labels.assign(s.input_ids.size(), kIgnoreLabel);
  // Loss on the copy: positions after SEP (their targets are known only from the first half).
  for (int64_t i = k + 2; i < 2 * k + 2; ++i) s.labels[static_cast<size_t>(i)] = s.input_ids[static_cast<size_t>(i)];
  return s;
}

}  // namespace shardtune::data

// Samples with something to learn.
#include "runtime/data/learned_only.h"

#include <algorithm>

#include "common/error.h"
#include "runtime/data/sft_examples.h"

namespace shardtune::data {

LearnedOnly::LearnedOnly(std::unique_ptr<Dataset> all) : all_(std::move(all)) {
  for (int64_t i = 0; i < all_->size(); ++i) {
    const Sample s = all_->get(i);
    // A label at position 0 predicts nothing (the loss is shifted by one).
    if (std::any_of(s.labels.begin() + std::min<size_t>(1, s.labels.size()), s.labels.end(),
                    [](int64_t l) { return l != kIgnoreLabel; }))
      kept_.push_back(i);
  }
}

Sample LearnedOnly::get(int64_t index) const {
  ST_CHECK(index >= 0 && index < size(), common::ErrorKind::kInternal, "sample {} of {}", index, size());
  return all_->get(kept_[static_cast<size_t>(index)]);
}

std::vector<int64_t> LearnedOnly::lengths() const {
  const std::vector<int64_t> all = all_->lengths();
  if (all.empty()) return all;
  std::vector<int64_t> out;
  out.reserve(kept_.size());
  for (const int64_t i : kept_) out.push_back(all[static_cast<size_t>(i)]);
  return out;
}

std::vector<int64_t> LearnedOnly::left_out_indices() const {
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t i = 0; i < all_->size(); ++i) {
    if (k < kept_.size() && kept_[k] == i) ++k;
    else out.push_back(i);
  }
  return out;
}

}  // namespace shardtune::data

#include "runtime/data/padded_dataset.h"

#include "common/error.h"

namespace shardtune::data {

Sample PaddedDataset::get(int64_t index) const {
  ST_CHECK(index >= 0 && index < size(), common::ErrorKind::kInternal, "example {} of {}", index, size());
  const auto begin = static_cast<size_t>(tokens_->offsets()[static_cast<size_t>(index)]);
  const auto end = static_cast<size_t>(tokens_->offsets()[static_cast<size_t>(index) + 1]);
  Sample s;
  s.input_ids.assign(tokens_->ids().begin() + begin, tokens_->ids().begin() + end);
  s.labels.assign(tokens_->labels().begin() + begin, tokens_->labels().begin() + end);
  return s;
}

std::vector<int64_t> PaddedDataset::lengths() const {
  std::vector<int64_t> out;
  const auto offsets = tokens_->offsets();
  for (size_t i = 0; i + 1 < offsets.size(); ++i) out.push_back(offsets[i + 1] - offsets[i]);
  return out;
}

}  // namespace shardtune::data

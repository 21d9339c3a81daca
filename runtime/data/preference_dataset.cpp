// Preference pairs from a token file.
#include "runtime/data/preference_dataset.h"

#include <algorithm>

#include "common/error.h"

namespace shardtune::data {

PreferenceDataset::PreferenceDataset(std::shared_ptr<const TokenFile> tokens, int64_t pad_id)
    : tokens_(std::move(tokens)), pad_id_(pad_id) {
  ST_CHECK(tokens_->num_examples() % 2 == 0, common::ErrorKind::kIo,
           "a token file of preference pairs holds {} examples, not two per pair", tokens_->num_examples());
}

Sample PreferenceDataset::get(int64_t index) const {
  ST_CHECK(index >= 0 && index < size(), common::ErrorKind::kInternal, "pair {} of {}", index, size());
  const auto offsets = tokens_->offsets();
  auto span = [&](int64_t example, std::vector<int64_t>& ids, std::vector<int64_t>& labels) {
    const auto begin = static_cast<size_t>(offsets[static_cast<size_t>(example)]);
    const auto end = static_cast<size_t>(offsets[static_cast<size_t>(example) + 1]);
    ids.assign(tokens_->ids().begin() + begin, tokens_->ids().begin() + end);
    labels.assign(tokens_->labels().begin() + begin, tokens_->labels().begin() + end);
  };
  Sample s;
  span(2 * index, s.input_ids, s.labels);
  span(2 * index + 1, s.rejected_input_ids, s.rejected_labels);
  return s;
}

std::vector<int64_t> PreferenceDataset::lengths() const {
  const auto offsets = tokens_->offsets();
  std::vector<int64_t> out(static_cast<size_t>(size()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = std::max(offsets[2 * i + 1] - offsets[2 * i], offsets[2 * i + 2] - offsets[2 * i + 1]);
  return out;
}

WithReference::WithReference(const Dataset& pairs, std::vector<double> logps) : pairs_(pairs), logps_(std::move(logps)) {
  ST_CHECK(static_cast<int64_t>(logps_.size()) == 2 * pairs_.size(), common::ErrorKind::kInternal,
           "{} reference log-probabilities for {} pairs", logps_.size(), pairs_.size());
}

Sample WithReference::get(int64_t index) const {
  Sample s = pairs_.get(index);
  s.reference_logps = {logps_[static_cast<size_t>(2 * index)], logps_[static_cast<size_t>(2 * index) + 1]};
  return s;
}

}  // namespace shardtune::data

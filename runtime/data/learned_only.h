// The samples of a dataset that have at least one learned token (a label other than -100): a
// sample without one trains nothing, and a micro-batch of only such samples has no loss to average
// (its mean is 0/0). Truncation to context_length leaves such examples behind with padding, and
// long prompts split over packed rows leave such rows.
#pragma once

#include <memory>
#include <vector>

#include "runtime/data/dataset.h"

namespace shardtune::data {

class LearnedOnly : public Dataset {
 public:
  explicit LearnedOnly(std::unique_ptr<Dataset> all);
  int64_t size() const override { return static_cast<int64_t>(kept_.size()); }
  Sample get(int64_t index) const override;
  int64_t pad_id() const override { return all_->pad_id(); }
  std::vector<int64_t> lengths() const override;
  int64_t left_out() const { return all_->size() - size(); }
  // The underlying dataset's indices of the samples left out, in order.
  std::vector<int64_t> left_out_indices() const;

 private:
  std::unique_ptr<Dataset> all_;
  std::vector<int64_t> kept_;  // indices into all_
};

}  // namespace shardtune::data

// Datasets joined end to end (the sources of a mixture) and a view of a range of one (a source's
// part, evaluated on its own).
#pragma once

#include <memory>
#include <vector>

#include "runtime/data/dataset.h"

namespace shardtune::data {

// Index i of part k is index offset(k) + i. The parts share one pad id (the tokenizer's).
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::unique_ptr<Dataset>> parts);
  int64_t size() const override { return offsets_.back(); }
  Sample get(int64_t index) const override;
  int64_t pad_id() const override { return parts_.front()->pad_id(); }
  std::vector<int64_t> lengths() const override;
  int64_t offset(size_t part) const { return offsets_[part]; }
  size_t parts() const { return parts_.size(); }
  const Dataset& part(size_t k) const { return *parts_[k]; }

 private:
  std::vector<std::unique_ptr<Dataset>> parts_;
  std::vector<int64_t> offsets_;  // parts_.size() + 1 entries, from 0
};

// Indices [offset, offset + size) of `data`, which outlives the view.
class DatasetSlice : public Dataset {
 public:
  DatasetSlice(const Dataset& data, int64_t offset, int64_t size);
  int64_t size() const override { return size_; }
  Sample get(int64_t index) const override { return data_.get(offset_ + index); }
  int64_t pad_id() const override { return data_.pad_id(); }
  std::vector<int64_t> lengths() const override;

 private:
  const Dataset& data_;
  int64_t offset_, size_;
};

}  // namespace shardtune::data

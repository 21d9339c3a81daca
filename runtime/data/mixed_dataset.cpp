// Joined datasets and views.
#include "runtime/data/mixed_dataset.h"

#include "common/error.h"

namespace shardtune::data {

ConcatDataset::ConcatDataset(std::vector<std::unique_ptr<Dataset>> parts) : parts_(std::move(parts)), offsets_{0} {
  ST_CHECK(!parts_.empty(), common::ErrorKind::kInternal, "no dataset to join");
  for (const auto& p : parts_) offsets_.push_back(offsets_.back() + p->size());
}

Sample ConcatDataset::get(int64_t index) const {
  ST_CHECK(index >= 0 && index < size(), common::ErrorKind::kInternal, "sample {} of {}", index, size());
  size_t k = 0;
  while (index >= offsets_[k + 1]) ++k;
  return parts_[k]->get(index - offsets_[k]);
}

std::vector<int64_t> ConcatDataset::lengths() const {
  std::vector<int64_t> out;
  for (const auto& p : parts_) {
    std::vector<int64_t> l = p->lengths();
    if (l.empty()) return {};  // samples of one length
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

DatasetSlice::DatasetSlice(const Dataset& data, int64_t offset, int64_t size) : data_(data), offset_(offset), size_(size) {
  ST_CHECK(offset >= 0 && size >= 0 && offset + size <= data.size(), common::ErrorKind::kInternal,
           "samples {}..{} of {}", offset, offset + size, data.size());
}

std::vector<int64_t> DatasetSlice::lengths() const {
  std::vector<int64_t> all = data_.lengths();
  if (all.empty()) return {};
  return std::vector<int64_t>(all.begin() + offset_, all.begin() + offset_ + size_);
}

}  // namespace shardtune::data

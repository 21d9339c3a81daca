#include "runtime/train/packed_dataset.h"

#include "common/error.h"

namespace shardtune::train {

Sample PackedDataset::get(int64_t index) const {
  ST_CHECK(index >= 0 && index < size(), common::ErrorKind::kInternal, "row {} of {}", index, size());
  const auto begin = static_cast<std::ptrdiff_t>(index * rows_.context_length);
  const auto end = begin + static_cast<std::ptrdiff_t>(rows_.context_length);
  Sample s;
  s.input_ids.assign(rows_.ids.begin() + begin, rows_.ids.begin() + end);
  s.labels.assign(rows_.labels.begin() + begin, rows_.labels.begin() + end);
  s.position_ids.assign(rows_.positions.begin() + begin, rows_.positions.begin() + end);
  return s;
}

}  // namespace shardtune::train

#include "runtime/data/packed_dataset.h"

namespace shardtune::data {

Sample PackedDataset::get(int64_t index) const {
  const auto t = static_cast<size_t>(rows_.context_length());
  std::vector<int32_t> ids(t), labels(t), positions(t);
  rows_.row(index, ids.data(), labels.data(), positions.data());
  return Sample{{ids.begin(), ids.end()}, {labels.begin(), labels.end()}, {positions.begin(), positions.end()}};
}

}  // namespace shardtune::data

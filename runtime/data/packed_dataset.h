// Packed rows of tokenized examples (runtime/data/packed_rows.h) as training samples.
#pragma once

#include "runtime/data/packed_rows.h"
#include "runtime/data/dataset.h"

namespace shardtune::data {

class PackedDataset : public Dataset {
 public:
  explicit PackedDataset(data::PackedRowView rows) : rows_(std::move(rows)) {}
  int64_t size() const override { return rows_.rows(); }
  Sample get(int64_t index) const override;

 private:
  data::PackedRowView rows_;
};

}  // namespace shardtune::data

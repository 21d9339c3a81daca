// Tokenized examples one per sample, of their own lengths (batching_strategy = "padding"): the
// data order groups similar lengths and collate pads each micro-batch to its longest.
#pragma once

#include <memory>

#include "runtime/data/token_file.h"
#include "runtime/data/dataset.h"

namespace shardtune::data {

class PaddedDataset : public Dataset {
 public:
  PaddedDataset(std::shared_ptr<const data::TokenFile> tokens, int64_t pad_id)
      : tokens_(std::move(tokens)), pad_id_(pad_id) {}
  int64_t size() const override { return tokens_->num_examples(); }
  Sample get(int64_t index) const override;
  int64_t pad_id() const override { return pad_id_; }
  std::vector<int64_t> lengths() const override;

 private:
  std::shared_ptr<const data::TokenFile> tokens_;
  int64_t pad_id_;
};

}  // namespace shardtune::data

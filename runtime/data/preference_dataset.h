// Preference pairs as samples ([data] format = "preference"): sample i is pair i of the token file,
// whose examples 2i and 2i + 1 are its chosen and rejected sequences; a micro-batch pads all of its
// pairs' sequences to the longest. With precomputed reference log-probabilities, WithReference
// gives each sample its two.
#pragma once

#include <memory>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/token_file.h"

namespace shardtune::data {

class PreferenceDataset : public Dataset {
 public:
  // Throws common::Error(kIo) when the token file does not hold whole pairs.
  PreferenceDataset(std::shared_ptr<const TokenFile> tokens, int64_t pad_id);
  int64_t size() const override { return tokens_->num_examples() / 2; }
  Sample get(int64_t index) const override;
  int64_t pad_id() const override { return pad_id_; }
  // A pair's longer sequence: pairs of similar length share micro-batches.
  std::vector<int64_t> lengths() const override;
  const TokenFile& tokens() const { return *tokens_; }

 private:
  std::shared_ptr<const TokenFile> tokens_;
  int64_t pad_id_;
};

// `pairs` with the reference's log-probabilities of each pair's chosen and rejected answer
// (`logps`: two per pair, in pair order).
class WithReference : public Dataset {
 public:
  WithReference(const Dataset& pairs, std::vector<double> logps);
  int64_t size() const override { return pairs_.size(); }
  Sample get(int64_t index) const override;
  int64_t pad_id() const override { return pairs_.pad_id(); }
  std::vector<int64_t> lengths() const override { return pairs_.lengths(); }

 private:
  const Dataset& pairs_;
  std::vector<double> logps_;
};

}  // namespace shardtune::data

// The seam between data and training: a dataset is an indexable list of tokenized samples. The
// synthetic one here needs no files; file formats and tokenizers plug in behind the same seam.
#pragma once

#include <cstdint>
#include <vector>

namespace shardtune::data {

struct Sample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;        // -100 where no loss is taken
  std::vector<int64_t> position_ids;  // restarting per packed document; empty: 0..T-1
  // A preference pair ([data] format = "preference"): input_ids and labels hold the chosen answer's
  // sequence, these the rejected one's (labels on the answer alone); empty for other samples.
  std::vector<int64_t> rejected_input_ids, rejected_labels;
  // The reference model's log-probabilities of the chosen and the rejected answer, when they were
  // precomputed; empty otherwise.
  std::vector<double> reference_logps;
  bool is_pair() const { return !rejected_input_ids.empty(); }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Sample get(int64_t index) const = 0;
  // Samples of different lengths are padded to the longest of their micro-batch with this id
  // (label -100). Their lengths let the data order group samples of similar length.
  virtual int64_t pad_id() const { return 0; }
  virtual std::vector<int64_t> lengths() const { return {}; }  // empty: every sample has the same length
};

// A learnable task: [BOS, x1..xk, SEP, x1..xk] with the loss on the copy only. Samples depend
// only on (seed, index), so every rank and every world size sees the same data.
class SyntheticCopyDataset : public Dataset {
 public:
  SyntheticCopyDataset(int64_t num_samples, int64_t context_length, int64_t vocab_size, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  Sample get(int64_t index) const override;

  static constexpr int64_t kBos = 1;
  static constexpr int64_t kSep = 2;
  static constexpr int64_t kFirstToken = 3;

 private:
  int64_t num_samples_;
  int64_t context_length_;
  int64_t vocab_size_;
  uint64_t seed_;
};

}  // namespace shardtune::data

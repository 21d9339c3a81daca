// Several data sources mixed by weight into one epoch order. Each source holds a range of the
// mixed dataset's indices and is read as a stream of its own epochs, each a seeded permutation of
// its samples, so that every sample of a source is trained exactly once per pass over it. An epoch
// of the mixture takes the same number of samples of each source every time (per_epoch), in an
// interleave decided per position by weight: position n goes to the source whose count falls
// furthest below its share (weight / sum of weights) x n, the lowest index on a tie. Any prefix of
// n positions then holds each source within 2 samples of its share (checked by the tests; over
// never more than 1). Nothing depends on the world size or the batch.
//
// The epoch's length: samples_per_epoch, or (0) the longest interleave in which no source is used
// more than once, so that the epoch ends where a source would start over. One source of weight 1
// is the plain dataset: its epochs are its permutations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::data {

struct MixtureSource {
  std::string name;
  double weight = 1.0;
  int64_t offset = 0;  // the source's samples are the mixed dataset's [offset, offset + size)
  int64_t size = 0;
};

// The sources of the first `count` positions of the interleave of `weights` (each > 0). With
// `limits` (one per source), it stops early where the next position would take a source past its
// limit.
std::vector<uint16_t> interleave(const std::vector<double>& weights, int64_t count,
                                 const std::vector<int64_t>& limits = {});

class Mixture {
 public:
  Mixture() = default;  // no sources: the trainer mixes its dataset alone
  // `sources` in index order (offsets consecutive from 0), each with samples and a weight > 0.
  Mixture(std::vector<MixtureSource> sources, int64_t samples_per_epoch);
  // One source holding every index of a dataset of `size` samples.
  static Mixture single(int64_t size, int64_t samples_per_epoch = 0);

  bool empty() const { return sources_.empty(); }
  const std::vector<MixtureSource>& sources() const { return sources_; }
  int64_t epoch_samples() const { return static_cast<int64_t>(pattern_.size()); }
  const std::vector<int64_t>& per_epoch() const { return per_epoch_; }  // each source's samples per epoch
  const std::vector<uint16_t>& pattern() const { return pattern_; }      // each position's source
  int64_t dataset_size() const;
  int source_of(int64_t index) const;  // the source holding dataset index `index`

  // Epoch `epoch`'s order as dataset indices, before any grouping by length.
  std::vector<int64_t> order(int64_t epoch, uint64_t seed) const;
  // The seed of source `source`'s own order: the job's seed for the first source, so that one
  // source orders its samples as a plain dataset does.
  static uint64_t source_seed(uint64_t seed, int source);
  // The seeded permutation of `size` samples for (seed, epoch): a Fisher-Yates shuffle driven by a
  // 64-bit Mersenne Twister, whose output the standard fixes.
  static std::vector<int64_t> permutation(int64_t size, uint64_t seed, int64_t epoch);

 private:
  std::vector<MixtureSource> sources_;
  std::vector<uint16_t> pattern_;
  std::vector<int64_t> per_epoch_;
};

}  // namespace shardtune::data

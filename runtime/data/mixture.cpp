// The mixture's interleave and epoch orders.
#include "runtime/data/mixture.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"

namespace shardtune::data {

using common::ErrorKind;

std::vector<uint16_t> interleave(const std::vector<double>& weights, int64_t count, const std::vector<int64_t>& limits) {
  ST_CHECK(!weights.empty() && weights.size() <= 65535, ErrorKind::kInternal, "{} sources", weights.size());
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> share;
  for (const double w : weights) share.push_back(w / total);
  std::vector<int64_t> taken(weights.size(), 0);
  std::vector<uint16_t> out;
  for (int64_t n = 1; n <= count; ++n) {
    size_t best = 0;
    double best_deficit = 0;
    for (size_t s = 0; s < share.size(); ++s) {
      const double deficit = share[s] * static_cast<double>(n) - static_cast<double>(taken[s]);
      if (s == 0 || deficit > best_deficit) best = s, best_deficit = deficit;
    }
    if (!limits.empty() && taken[best] >= limits[best]) break;
    ++taken[best];
    out.push_back(static_cast<uint16_t>(best));
  }
  return out;
}

Mixture::Mixture(std::vector<MixtureSource> sources, int64_t samples_per_epoch) : sources_(std::move(sources)) {
  std::vector<double> weights;
  std::vector<int64_t> sizes;
  int64_t offset = 0;
  for (const MixtureSource& s : sources_) {
    ST_CHECK(s.size > 0 && s.weight > 0 && s.offset == offset, ErrorKind::kInternal,
             "source {}: {} samples at {} with weight {}", s.name, s.size, s.offset, s.weight);
    weights.push_back(s.weight);
    sizes.push_back(s.size);
    offset += s.size;
  }
  pattern_ = samples_per_epoch > 0 ? interleave(weights, samples_per_epoch)
                                   : interleave(weights, offset, sizes);
  per_epoch_.assign(sources_.size(), 0);
  for (const uint16_t s : pattern_) ++per_epoch_[s];
}

Mixture Mixture::single(int64_t size, int64_t samples_per_epoch) {
  return Mixture({MixtureSource{"", 1.0, 0, size}}, samples_per_epoch);
}

int64_t Mixture::dataset_size() const {
  return sources_.empty() ? 0 : sources_.back().offset + sources_.back().size;
}

int Mixture::source_of(int64_t index) const {
  const auto it = std::upper_bound(sources_.begin(), sources_.end(), index,
                                   [](int64_t i, const MixtureSource& s) { return i < s.offset; });
  return static_cast<int>(it - sources_.begin()) - 1;
}

uint64_t Mixture::source_seed(uint64_t seed, int source) {
  return seed + static_cast<uint64_t>(source) * 0x9E3779B97F4A7C15ull;
}

std::vector<int64_t> Mixture::permutation(int64_t size, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(size));
  std::iota(p.begin(), p.end(), 0);
  std::mt19937_64 rng(seed * 1000003ull + static_cast<uint64_t>(epoch));
  for (size_t i = p.size() - 1; i > 0; --i) std::swap(p[i], p[rng() % (i + 1)]);
  return p;
}

std::vector<int64_t> Mixture::order(int64_t epoch, uint64_t seed) const {
  const size_t n = sources_.size();
  std::vector<int64_t> taken(n, 0), pass(n, -1);
  std::vector<std::vector<int64_t>> permutations(n);
  std::vector<int64_t> out;
  out.reserve(pattern_.size());
  for (const uint16_t s : pattern_) {
    const MixtureSource& src = sources_[s];
    // The source's stream position: earlier epochs of the mixture took per_epoch of it each.
    const int64_t position = epoch * per_epoch_[s] + taken[s]++;
    if (position / src.size != pass[s]) {
      pass[s] = position / src.size;
      permutations[s] = permutation(src.size, source_seed(seed, s), pass[s]);
    }
    out.push_back(src.offset + permutations[s][static_cast<size_t>(position % src.size)]);
  }
  return out;
}

}  // namespace shardtune::data

// The mixture of data sources (runtime/data/mixture.h) as properties over random sources and
// weights: each source's share of every prefix of the interleave, each source's samples trained
// exactly once per pass over it across epochs, the epoch rule, and one source equal to the plain
// permutation of before (an independent Fisher-Yates here). Also the TensorBoard event encoding
// against the CRC-32C check value and the tag mapping of metrics.jsonl records.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "runtime/data/mixture.h"
#include "runtime/train/data_order.h"
#include "runtime/train/tensorboard_log.h"
#include "runtime/train/tfevents.h"

namespace shardtune {
namespace {

using data::Mixture;
using data::MixtureSource;

std::vector<MixtureSource> random_sources(std::mt19937_64& rng, int count) {
  std::vector<MixtureSource> out;
  int64_t offset = 0;
  for (int s = 0; s < count; ++s) {
    const int64_t size = 1 + static_cast<int64_t>(rng() % 60);
    const double weight = std::pow(std::uniform_real_distribution<double>(0.05, 1.0)(rng), 3) * 10;
    out.push_back({"s" + std::to_string(s), weight, offset, size});
    offset += size;
  }
  return out;
}

TEST(Mixture, EveryPrefixHoldsEachSourceWithinTwoSamplesOfItsShare) {
  std::mt19937_64 rng(11);
  double over = 0, under = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 16);
    std::vector<double> weights;
    for (int s = 0; s < n; ++s) weights.push_back(std::uniform_real_distribution<double>(0.01, 5.0)(rng));
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    const std::vector<uint16_t> pattern = data::interleave(weights, 2000);
    ASSERT_EQ(pattern.size(), 2000u);
    std::vector<int64_t> taken(weights.size(), 0);
    for (size_t i = 0; i < pattern.size(); ++i) {
      ++taken[pattern[i]];
      for (size_t s = 0; s < weights.size(); ++s) {
        const double error = static_cast<double>(taken[s]) - weights[s] / total * static_cast<double>(i + 1);
        over = std::max(over, error);
        under = std::max(under, -error);
      }
    }
  }
  EXPECT_LT(over, 1.0);
  EXPECT_LT(under, 2.0);
}

// Sources whose samples trained over `epochs` epochs come in passes: each pass over a source
// trains each of its samples once, and the last pass may be partial (no sample twice in it).
void expect_exactly_once_per_pass(const Mixture& m, uint64_t seed, int epochs) {
  std::vector<std::vector<int64_t>> stream(m.sources().size());
  for (int e = 0; e < epochs; ++e) {
    const std::vector<int64_t> order = m.order(e, seed);
    ASSERT_EQ(static_cast<int64_t>(order.size()), m.epoch_samples());
    std::vector<int64_t> per(m.sources().size(), 0);
    for (const int64_t i : order) {
      const int s = m.source_of(i);
      stream[s].push_back(i);
      ++per[s];
    }
    EXPECT_EQ(per, m.per_epoch()) << "epoch " << e;
  }
  for (size_t s = 0; s < stream.size(); ++s) {
    const MixtureSource& src = m.sources()[s];
    for (size_t pass = 0; pass * src.size < stream[s].size(); ++pass) {
      const auto begin = stream[s].begin() + static_cast<std::ptrdiff_t>(pass * src.size);
      const auto end = stream[s].begin() + static_cast<std::ptrdiff_t>(std::min(stream[s].size(), (pass + 1) * src.size));
      std::vector<int64_t> ids(begin, end);
      std::sort(ids.begin(), ids.end());
      EXPECT_TRUE(std::adjacent_find(ids.begin(), ids.end()) == ids.end()) << src.name << " pass " << pass;
      EXPECT_GE(ids.front(), src.offset);
      EXPECT_LT(ids.back(), src.offset + src.size);
    }
  }
}

TEST(Mixture, EachSourceIsTrainedExactlyOncePerPassAcrossEpochs) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<MixtureSource> sources = random_sources(rng, 1 + static_cast<int>(rng() % 5));
    const int64_t total = sources.back().offset + sources.back().size;
    for (const int64_t samples_per_epoch : {int64_t{0}, 1 + static_cast<int64_t>(rng() % (3 * total))}) {
      const Mixture m(sources, samples_per_epoch);
      if (samples_per_epoch > 0) EXPECT_EQ(m.epoch_samples(), samples_per_epoch);
      expect_exactly_once_per_pass(m, rng(), 6);
    }
  }
}

TEST(Mixture, TheDefaultEpochEndsWhereASourceWouldStartOver) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<MixtureSource> sources = random_sources(rng, 1 + static_cast<int>(rng() % 6));
    const Mixture m(sources, 0);
    std::vector<double> weights;
    for (const MixtureSource& s : sources) weights.push_back(s.weight);
    bool some_source_full = false;
    for (size_t s = 0; s < sources.size(); ++s) {
      EXPECT_LE(m.per_epoch()[s], sources[s].size);
      // The next position of the interleave goes to a source with all its samples used.
      some_source_full |= m.per_epoch()[s] == sources[s].size;
    }
    EXPECT_TRUE(some_source_full);
    const std::vector<uint16_t> longer = data::interleave(weights, m.epoch_samples() + 1);
    const uint16_t next = longer.back();
    EXPECT_EQ(m.per_epoch()[next], sources[next].size);
  }
}

TEST(Mixture, OneSourceOrdersItsSamplesAsThePlainPermutation) {
  for (const uint64_t seed : {uint64_t{42}, uint64_t{7}}) {
    const Mixture m = Mixture::single(1000);
    EXPECT_EQ(m.epoch_samples(), 1000);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> want(1000);
      std::iota(want.begin(), want.end(), 0);
      std::mt19937_64 rng(seed * 1000003ull + static_cast<uint64_t>(epoch));
      for (size_t i = want.size() - 1; i > 0; --i) std::swap(want[i], want[rng() % (i + 1)]);
      EXPECT_EQ(m.order(epoch, seed), want);
      EXPECT_EQ(train::DataOrder(1000, seed).permutation(epoch), want);
    }
  }
}

TEST(Mixture, SourcesAreFoundByIndexAndOrderedBySeedAlone) {
  const Mixture m({{"a", 3, 0, 10}, {"b", 1, 10, 4}, {"c", 1, 14, 30}}, 0);
  EXPECT_EQ(m.source_of(0), 0);
  EXPECT_EQ(m.source_of(9), 0);
  EXPECT_EQ(m.source_of(10), 1);
  EXPECT_EQ(m.source_of(43), 2);
  EXPECT_EQ(m.dataset_size(), 44);
  EXPECT_EQ(m.order(3, 1), Mixture({{"a", 3, 0, 10}, {"b", 1, 10, 4}, {"c", 1, 14, 30}}, 0).order(3, 1));
  EXPECT_NE(m.order(3, 1), m.order(3, 2));
  // a (0.6) runs out first: 10 of a, 10/0.6 ~ 16 positions, with b and c about 3 each.
  EXPECT_EQ(m.per_epoch()[0], 10);
  EXPECT_NEAR(m.per_epoch()[1], 0.2 * m.epoch_samples(), 1.0);
}

TEST(TfEvents, Crc32cMatchesItsCheckValueAndFramesRecords) {
  EXPECT_EQ(train::crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value (RFC 3720, B.4)
  EXPECT_EQ(train::crc32c(""), 0u);
  const std::string record = train::tfrecord("abc");
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(record.substr(12, 3), "abc");
  uint64_t length = 0;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t crc = 0;
  std::memcpy(&crc, record.data() + 15, 4);
  const uint32_t raw = train::crc32c("abc");
  EXPECT_EQ(crc, ((raw >> 15) | (raw << 17)) + 0xa282ead8u);
}

TEST(TfEvents, MetricsRecordsMapToTrainPerfAndValTags) {
  const auto [step, scalars] = train::tensorboard_scalars(
      R"({"step": 4, "epoch": 1, "samples": [8, 12], "loss": null, "lr": 0.001, "skipped": true, "tokens": 64, )"
      R"("sources": {"chat": 3, "code": 1}, "step_seconds": 0.500000, "tokens_per_second": 128.0, "mfu": 0.25})");
  EXPECT_EQ(step, 4);
  std::map<std::string, float> m(scalars.begin(), scalars.end());
  EXPECT_TRUE(std::isnan(m.at("train/loss")));
  EXPECT_EQ(m.at("train/lr"), 0.001f);
  EXPECT_EQ(m.at("train/skipped"), 1.0f);
  EXPECT_EQ(m.at("train/epoch"), 1.0f);
  EXPECT_EQ(m.at("train/samples/chat"), 3.0f);
  EXPECT_EQ(m.at("perf/tokens_per_second"), 128.0f);
  EXPECT_EQ(m.at("perf/mfu"), 0.25f);
  EXPECT_EQ(m.at("perf/step_seconds"), 0.5f);
  EXPECT_EQ(m.count("train/samples"), 0u);
  const auto [after, val] = train::tensorboard_scalars(
      R"({"eval_epoch": 2, "after_step": 9, "val_loss": 1.5, "val_sources": {"a": {"val_loss": 2.0, "val_rows": 3}}})");
  EXPECT_EQ(after, 9);
  std::map<std::string, float> v(val.begin(), val.end());
  EXPECT_EQ(v.at("val/loss"), 1.5f);
  EXPECT_EQ(v.at("val/epoch"), 2.0f);
  EXPECT_EQ(v.at("val/a/loss"), 2.0f);
  EXPECT_EQ(v.at("val/a/rows"), 3.0f);
  EXPECT_TRUE(train::tensorboard_scalars("{\"step\": 3, \"lo").second.empty());
}

}  // namespace
}  // namespace shardtune

// Learning-rate schedules against their formulas, the global data order (a permutation per
// epoch, the same global batches whatever the number of ranks or micro-batches), and the FLOP
// estimate against published parameter counts worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "runtime/train/data_order.h"
#include "runtime/train/dataset.h"
#include "runtime/train/flops.h"
#include "runtime/train/lr_schedule.h"

namespace shardtune::train {
namespace {

TEST(Flops, TorchtitansEstimateForPublishedModels) {
  // Llama 3.2 1B: 1,235,814,400 parameters, of which the (tied) embedding is 128256 x 2048.
  // 6 x (1235814400 - 262668288) + 12 x 16 layers x 32 heads x 64 x 2048 tokens.
  const model::LlamaConfig small = model::LlamaConfig::from_file(std::string(ST_FIXTURES) + "/hf_configs/llama-3.2-1b.json");
  EXPECT_DOUBLE_EQ(training_flops_per_token(small, 2048), 5838876672.0 + 805306368.0);
  // Llama 3 8B: 8,030,261,248 parameters; embedding 128256 x 4096; 32 layers of 32 heads of 128.
  const model::LlamaConfig big = model::LlamaConfig::from_file(std::string(ST_FIXTURES) + "/hf_configs/llama-3-8b.json");
  EXPECT_DOUBLE_EQ(training_flops_per_token(big, 8192), 6.0 * 7504924672.0 + 12884901888.0);
}

TEST(LrSchedule, StepLrMultipliesByGammaEachEpoch) {
  job::TrainSection t;
  t.lr = 1e-4;
  t.gamma = 0.85;
  const LrSchedule s(t, 1000);
  EXPECT_DOUBLE_EQ(s.lr(0, 0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(999, 0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(5, 2), 1e-4 * 0.85 * 0.85);
}

TEST(LrSchedule, WarmupThenCosineToZero) {
  job::TrainSection t;
  t.lr = 2e-3;
  t.lr_scheduler = job::LrScheduler::kCosine;
  t.warmup_steps = 10;
  const LrSchedule s(t, 110);
  EXPECT_DOUBLE_EQ(s.lr(0, 0), 2e-4);
  EXPECT_DOUBLE_EQ(s.lr(9, 0), 2e-3);
  EXPECT_DOUBLE_EQ(s.lr(10, 0), 2e-3);
  EXPECT_NEAR(s.lr(60, 0), 1e-3, 1e-15);  // halfway through the decay
  EXPECT_NEAR(s.lr(110, 3), 0.0, 1e-18);
  for (int64_t i = 11; i < 110; ++i) EXPECT_LT(s.lr(i, 0), s.lr(i - 1, 0));
}

TEST(DataOrder, EachEpochIsAPermutationAndEpochsDiffer) {
  const DataOrder order(1000, 10, 42);
  const auto p0 = order.permutation(0), p1 = order.permutation(1);
  EXPECT_EQ(std::set<int64_t>(p0.begin(), p0.end()).size(), 1000u);
  EXPECT_NE(p0, p1);
  EXPECT_EQ(p0, DataOrder(1000, 10, 42).permutation(0));  // reproducible
  EXPECT_NE(p0, DataOrder(1000, 10, 43).permutation(0));
}

TEST(DataOrder, GlobalBatchesDoNotDependOnHowTheyAreSplit) {
  const int64_t global = 24;
  const DataOrder order(240, global, 7);
  const auto perm = order.permutation(3);
  for (int64_t step = 0; step < order.steps_per_epoch(); ++step) {
    const std::set<int64_t> want(perm.begin() + step * global, perm.begin() + (step + 1) * global);
    for (int ranks : {1, 2, 3, 4, 6}) {
      for (int accumulation : {1, 2, 4}) {
        if (global % (ranks * accumulation) != 0) continue;
        std::multiset<int64_t> got;
        for (int m = 0; m < accumulation; ++m)
          for (int r = 0; r < ranks; ++r)
            for (int64_t i : order.samples(perm, step * order.global_batch(), m, accumulation, r, ranks)) got.insert(i);
        EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), want) << ranks << " ranks, " << accumulation;
        EXPECT_EQ(got.size(), want.size());
      }
    }
  }
}

TEST(DataOrder, LengthGroupingSortsWithinFixedWindowsIndependentOfTheBatch) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 3000; ++i) lengths.push_back((i * 7919) % 257);
  const DataOrder a(3000, 8, 5, lengths), b(3000, 24, 5, lengths);
  const auto p = a.permutation(2);
  EXPECT_EQ(p, b.permutation(2)) << "the order must not depend on the global batch";
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 3000u);
  EXPECT_NE(p, a.permutation(3));
  for (size_t w = 0; w < p.size(); w += DataOrder::kLengthWindow) {
    const size_t end = std::min(p.size(), w + DataOrder::kLengthWindow);
    for (size_t i = w + 1; i < end; ++i)
      ASSERT_GE(lengths[static_cast<size_t>(p[i - 1])], lengths[static_cast<size_t>(p[i])]) << "window at " << w;
  }
  // Without lengths, the same seed gives a plain shuffle.
  EXPECT_NE(DataOrder(3000, 8, 5).permutation(2), p);
}

TEST(SyntheticCopyDataset, TheSecondHalfCopiesTheFirstAndOnlyItCounts) {
  const SyntheticCopyDataset data(10, 12, 256, 1);
  const Sample s = data.get(4);
  ASSERT_EQ(s.input_ids.size(), 12u);
  EXPECT_EQ(s.input_ids[0], SyntheticCopyDataset::kBos);
  EXPECT_EQ(s.input_ids[6], SyntheticCopyDataset::kSep);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(s.input_ids[static_cast<size_t>(i)], s.input_ids[static_cast<size_t>(i + 6)]);
    EXPECT_EQ(s.labels[static_cast<size_t>(i)], -100);
    EXPECT_EQ(s.labels[static_cast<size_t>(i + 6)], s.input_ids[static_cast<size_t>(i + 6)]);
  }
  EXPECT_EQ(data.get(4).input_ids, s.input_ids);  // a function of the index
  EXPECT_NE(data.get(5).input_ids, s.input_ids);
}

}  // namespace
}  // namespace shardtune::train

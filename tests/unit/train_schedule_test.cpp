// The run's schedule (steps, epochs, learning rate from the sample cursor) against the step-counted
// formulas and an exhaustive count of samples, the global data order (a permutation per epoch, the
// same steps whatever the number of ranks or micro-batches), and the FLOP estimate against
// published parameter counts worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>
#include <set>

#include "runtime/train/data_order.h"
#include "runtime/data/dataset.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/flops.h"
#include "runtime/train/run_schedule.h"

namespace shardtune::train {
namespace {

TEST(Flops, EstimateForPublishedModelsBesideTorchtitans) {
  // Llama 3.2 1B: 1,235,814,400 parameters, of which the (tied) embedding is 128256 x 2048; the
  // tied head multiplies every token by those 262,668,288 weights all the same, which torchtitan's
  // estimate leaves out with the embedding: 6 x 1235814400 against 6 x (1235814400 - 262668288),
  // each + 12 x 16 layers x 32 heads x 64 x 2048 tokens.
  const model::LlamaConfig small = model::LlamaConfig::from_file(std::string(ST_FIXTURES) + "/hf_configs/llama-3.2-1b.json");
  EXPECT_DOUBLE_EQ(training_flops_per_token(small, 2048), 7414886400.0 + 805306368.0);
  EXPECT_DOUBLE_EQ(torchtitan_flops_per_token(small, 2048), 5838876672.0 + 805306368.0);
  // Llama 3 8B: 8,030,261,248 parameters; embedding 128256 x 4096 and an untied head of the same
  // size; 32 layers of 32 heads of 128. Both estimates agree.
  const model::LlamaConfig big = model::LlamaConfig::from_file(std::string(ST_FIXTURES) + "/hf_configs/llama-3-8b.json");
  EXPECT_DOUBLE_EQ(training_flops_per_token(big, 8192), 6.0 * 7504924672.0 + 12884901888.0);
  EXPECT_DOUBLE_EQ(torchtitan_flops_per_token(big, 8192), training_flops_per_token(big, 8192));
}

job::TrainSection train_section(int64_t epochs, double lr = 1e-4) {
  job::TrainSection t;
  t.num_epochs = epochs;
  t.lr = lr;
  return t;
}

TEST(RunSchedule, StepLrMultipliesByGammaEachEpoch) {
  job::TrainSection t = train_section(3);
  t.gamma = 0.85;
  const RunSchedule s(t, 1000, 10);
  EXPECT_DOUBLE_EQ(s.lr(s.step_at({0, 0})), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(s.step_at({0, 990})), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr(s.step_at({2, 50})), 1e-4 * 0.85 * 0.85);
}

// At a batch that divides the data, the cosine schedule is the step-counted formula:
// warmup lr (k+1)/W at step k < W, then lr (1 + cos(pi (k - W) / (T - W))) / 2.
TEST(RunSchedule, WarmupThenCosineToZeroAtTheStepCountedFormula) {
  job::TrainSection t = train_section(1, 2e-3);
  t.lr_scheduler = job::LrScheduler::kCosine;
  t.warmup_steps = 10;
  const RunSchedule s(t, 110 * 4, 4);
  ASSERT_EQ(s.steps_left({0, 0}), 110);
  Cursor c;
  double previous = 0;
  for (int64_t k = 0; k < 110; ++k) {
    const StepSpan span = s.step_at(c);
    ASSERT_EQ(span.size(), 4);
    const double want = k < 10 ? 2e-3 * static_cast<double>(k + 1) / 10.0
                               : 1e-3 * (1.0 + std::cos(M_PI * static_cast<double>(k - 10) / 100.0));
    EXPECT_NEAR(s.lr(span), want, 1e-18) << "step " << k;
    if (k > 10) {
      EXPECT_LT(s.lr(span), previous);
    }
    previous = s.lr(span);
    c = s.after(span);
  }
  EXPECT_TRUE(s.finished(c));
  EXPECT_NEAR(previous, 1e-3 * (1.0 + std::cos(M_PI * 99.0 / 100.0)), 1e-18);
}

// Every sample of every epoch once, in steps of the global batch and a short last step per epoch,
// whatever the batch: a run that changes its batch at any point trains the same samples.
TEST(RunSchedule, EveryEpochIsCoveredExactlyOnceAtAnyBatchAndAnyChangeOfBatch) {
  const job::TrainSection t = train_section(3);
  const int64_t n = 37;
  for (int64_t first : {1, 2, 5, 8, 37}) {
    for (int64_t second : {1, 3, 4, 6, 36}) {
      for (int64_t switch_after : {0, 1, 4, 7, 10}) {
        const RunSchedule a(t, n, first), b(t, n, second, first);
        std::vector<int64_t> seen(static_cast<size_t>(3 * n), 0);
        Cursor c;
        for (int64_t step = 0; !a.finished(c); ++step) {
          const RunSchedule& s = step < switch_after ? a : b;
          const StepSpan span = s.step_at(c);
          ASSERT_GT(span.size(), 0);
          ASSERT_LE(span.size(), s.global_batch());
          for (int64_t i = span.begin; i < span.end; ++i) ++seen[static_cast<size_t>(span.epoch * n + i)];
          c = s.after(span);
          EXPECT_EQ(s.ends_epoch(span), c.sample == 0);
        }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 3 * n) << first << " then " << second;
        EXPECT_EQ(c, (Cursor{3, 0}));
      }
    }
  }
}

// max_train_step and warmup_steps are counted in steps of the reference batch: another batch stops
// and ends warmup at the same sample positions.
TEST(RunSchedule, StepCountedKeysMeanTheReferenceBatchesSamples) {
  job::TrainSection t = train_section(2);
  t.max_train_step = 12;  // 10 steps per epoch at batch 4 over 37 samples (the last of 1): 37 + 2 x 4
  t.lr_scheduler = job::LrScheduler::kCosine;
  t.warmup_steps = 3;
  const RunSchedule ref(t, 37, 4), other(t, 37, 6, 4);
  EXPECT_EQ(ref.end(), 45);
  EXPECT_EQ(other.end(), 45);
  EXPECT_EQ(ref.steps_left({0, 0}), 12);
  EXPECT_EQ(other.steps_left({0, 0}), 7 + 2);  // 6 x 6 + 1, then 6 + 2
  // The step that crosses the end of warmup (sample 12) at batch 6: [12, 18) is past it.
  EXPECT_DOUBLE_EQ(other.lr(other.step_at({0, 6})), t.lr);
  EXPECT_DOUBLE_EQ(other.lr(other.step_at({0, 0})), t.lr * 6.0 / 12.0);
  EXPECT_DOUBLE_EQ(ref.lr(ref.step_at({0, 12})), t.lr);
  EXPECT_DOUBLE_EQ(other.lr(other.step_at({0, 12})), t.lr);
  // Both end at the same sample of epoch 2, and the learning rate there is the same function of it.
  EXPECT_DOUBLE_EQ(ref.lr(ref.step_at({1, 4})), other.lr(StepSpan{1, 4, 8}));
}

TEST(DataOrder, EachEpochIsAPermutationAndEpochsDiffer) {
  const DataOrder order(1000, 42);
  const auto p0 = order.permutation(0), p1 = order.permutation(1);
  EXPECT_EQ(std::set<int64_t>(p0.begin(), p0.end()).size(), 1000u);
  EXPECT_NE(p0, p1);
  EXPECT_EQ(p0, DataOrder(1000, 42).permutation(0));  // reproducible
  EXPECT_NE(p0, DataOrder(1000, 43).permutation(0));
}

// Any step, full or short, is split over micro-batches and ranks without a sample lost or doubled,
// each slot taking its floor or ceiling share.
TEST(DataOrder, StepsAreSplitOverSlotsWithoutLossOrDuplicates) {
  const DataOrder order(240, 7);
  const auto perm = order.permutation(3);
  for (int64_t count : {1, 3, 5, 24, 23}) {
    const int64_t first = 240 - count;
    const std::set<int64_t> want(perm.begin() + first, perm.begin() + first + count);
    for (int ranks : {1, 2, 3, 4, 6}) {
      for (int accumulation : {1, 2, 4}) {
        const int64_t slots = ranks * accumulation;
        std::multiset<int64_t> got;
        for (int m = 0; m < accumulation; ++m)
          for (int r = 0; r < ranks; ++r) {
            const std::vector<int64_t> ids = order.samples(perm, first, count, m, accumulation, r, ranks);
            EXPECT_GE(static_cast<int64_t>(ids.size()), count / slots);
            EXPECT_LE(static_cast<int64_t>(ids.size()), (count + slots - 1) / slots);
            got.insert(ids.begin(), ids.end());
          }
        EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), want) << ranks << " ranks, " << accumulation;
        EXPECT_EQ(got.size(), want.size());
      }
    }
  }
}

TEST(DataOrder, LengthGroupingSortsWithinFixedWindowsIndependentOfTheBatch) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 3000; ++i) lengths.push_back((i * 7919) % 257);
  const DataOrder a(3000, 5, lengths);
  const auto p = a.permutation(2);
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 3000u);
  EXPECT_NE(p, a.permutation(3));
  for (size_t w = 0; w < p.size(); w += DataOrder::kLengthWindow) {
    const size_t end = std::min(p.size(), w + DataOrder::kLengthWindow);
    for (size_t i = w + 1; i < end; ++i)
      ASSERT_GE(lengths[static_cast<size_t>(p[i - 1])], lengths[static_cast<size_t>(p[i])]) << "window at " << w;
  }
  // Without lengths, the same seed gives a plain shuffle.
  EXPECT_NE(DataOrder(3000, 5).permutation(2), p);
}

TEST(SyntheticCopyDataset, TheSecondHalfCopiesTheFirstAndOnlyItCounts) {
  const data::SyntheticCopyDataset copy(10, 12, 256, 1);
  const data::Sample s = copy.get(4);
  ASSERT_EQ(s.input_ids.size(), 12u);
  EXPECT_EQ(s.input_ids[0], data::SyntheticCopyDataset::kBos);
  EXPECT_EQ(s.input_ids[6], data::SyntheticCopyDataset::kSep);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(s.input_ids[static_cast<size_t>(i)], s.input_ids[static_cast<size_t>(i + 6)]);
    EXPECT_EQ(s.labels[static_cast<size_t>(i)], -100);
    EXPECT_EQ(s.labels[static_cast<size_t>(i + 6)], s.input_ids[static_cast<size_t>(i + 6)]);
  }
  EXPECT_EQ(copy.get(4).input_ids, s.input_ids);  // a function of the index
  EXPECT_NE(copy.get(5).input_ids, s.input_ids);
}

// Validation's rows: every row in exactly one batch of one rank, whatever the set's size, the
// batch and the rank count; a batch's shares differ by at most one row; ceil(n / global batch)
// batches, the last one short.
TEST(EvalRows, EveryRowOnceAtAnyWorldSize) {
  for (int64_t n = 0; n <= 40; ++n)
    for (int64_t per_rank = 1; per_rank <= 5; ++per_rank)
      for (int ranks = 1; ranks <= 4; ++ranks) {
        SCOPED_TRACE(testing::Message() << n << " rows, " << per_rank << " per rank, " << ranks << " ranks");
        const int64_t batches = eval_batches(n, per_rank, ranks);
        EXPECT_EQ(batches, (n + per_rank * ranks - 1) / (per_rank * ranks));
        std::vector<int> seen(static_cast<size_t>(n), 0);
        for (int64_t b = 0; b < batches; ++b) {
          size_t fewest = SIZE_MAX, most = 0;
          for (int r = 0; r < ranks; ++r) {
            const std::vector<int64_t> rows = eval_rows(n, per_rank, b, r, ranks);
            EXPECT_LE(static_cast<int64_t>(rows.size()), per_rank);
            fewest = std::min(fewest, rows.size());
            most = std::max(most, rows.size());
            for (int64_t row : rows) {
              ASSERT_TRUE(row >= 0 && row < n) << row;
              ++seen[static_cast<size_t>(row)];
            }
          }
          EXPECT_LE(most - fewest, 1u);
        }
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
        EXPECT_TRUE(eval_rows(n, per_rank, batches, 0, ranks).empty());
      }
}

}  // namespace
}  // namespace shardtune::train

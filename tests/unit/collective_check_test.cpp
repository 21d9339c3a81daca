// The preflight's bf16 checks against replayed reductions: rings, trees and random orders of
// 2 to 1,024 ranks, with every hop rounded to bf16 as NCCL does, inputs scaled by 1/N before
// (NCCL's average) or the sum divided after (MPI's). Correct reductions must pass at every size;
// a lost, doubled, swapped or unscaled contribution must fail.
#include <c10/util/BFloat16.h>
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/dist/collective_check.h"

namespace shardtune::dist {
namespace {

float bf16(float x) { return static_cast<float>(c10::BFloat16(x)); }  // round to nearest even

enum class Scale { kNone, kPreBf16, kPreFloat, kPostDivide };
enum class Order { kRing, kTree, kRandom };

// contributions[r] = rank r's vector. Returns the reduced vector as one rank receives it.
using Contributions = std::vector<std::vector<float>>;

std::vector<float> replay(const Contributions& in, Order order, Scale scale, uint32_t seed) {
  const int n = static_cast<int>(in.size());
  const size_t len = in[0].size();
  std::mt19937 rng(seed);
  std::vector<int> ring(n);
  std::iota(ring.begin(), ring.end(), 0);
  if (seed != 0) std::shuffle(ring.begin(), ring.end(), rng);
  const float pre = scale == Scale::kPreBf16 ? bf16(1.0f / n) : 1.0f / n;
  auto input = [&](int r, size_t j) {
    const float x = bf16(in[r][j]);
    return scale == Scale::kPreBf16 || scale == Scale::kPreFloat ? bf16(x * pre) : x;
  };
  // Sum of the inputs of ranks ring[lo..hi) as a binary tree: each node adds its children.
  std::function<float(size_t, int, int)> tree = [&](size_t j, int lo, int hi) -> float {
    if (hi - lo == 1) return input(ring[lo], j);
    const int mid = lo + (hi - lo) / 2;
    return bf16(tree(j, lo, mid) + tree(j, mid, hi));
  };
  std::vector<float> out(len);
  for (size_t j = 0; j < len; ++j) {
    float acc = 0;
    if (order == Order::kRing) {
      // Chunk c of n is reduced around the ring starting after position c, one hop at a time.
      const int chunk = static_cast<int>(j * n / len);
      acc = input(ring[(chunk + 1) % n], j);
      for (int k = 2; k <= n; ++k) acc = bf16(acc + input(ring[(chunk + k) % n], j));
    } else if (order == Order::kTree) {
      acc = tree(j, 0, n);
    } else {
      std::vector<float> pool(n);
      for (int r = 0; r < n; ++r) pool[r] = input(r, j);
      while (pool.size() > 1) {  // merge two random partial sums
        std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
        const size_t a = pick(rng);
        std::swap(pool[a], pool.back());
        const float x = pool.back();
        pool.pop_back();
        const size_t b = pick(rng) % pool.size();
        pool[b] = bf16(pool[b] + x);
      }
      acc = pool[0];
    }
    out[j] = scale == Scale::kPostDivide ? bf16(acc / n) : acc;
  }
  return out;
}

Contributions sum_inputs(int n) {
  Contributions c(n);
  for (int r = 0; r < n; ++r) c[r] = bf16_sum_pattern(n, r);
  return c;
}
Contributions avg_inputs(int n) {
  Contributions c(n);
  for (int r = 0; r < n; ++r) c[r] = bf16_avg_pattern(n, r);
  return c;
}

bool sampled(int n) {  // every size to 256, then a spread with the powers of two and their neighbours
  if (n <= 256 || n % 37 == 0) return true;
  for (int p = 512; p <= 1024; p *= 2)
    if (n >= p - 1 && n <= p + 1) return true;
  return false;
}

TEST(CollectiveCheck, SummedPatternIsExactInEveryOrderFrom2To1024Ranks) {
  for (int n = 2; n <= 1024; ++n) {
    const Contributions in = sum_inputs(n);
    for (Order order : {Order::kRing, Order::kTree, Order::kRandom})
      for (uint32_t seed : {0u, 7u}) {
        const std::string wrong = check_bf16_sum(replay(in, order, Scale::kNone, seed + n), n);
        ASSERT_EQ(wrong, "") << n << " ranks, order " << static_cast<int>(order);
      }
  }
}

TEST(CollectiveCheck, AveragedPatternHoldsInEveryOrderAndScalingFrom2To1024Ranks) {
  for (int n = 2; n <= 1024; ++n) {
    if (!sampled(n)) continue;
    const Contributions in = avg_inputs(n);
    for (Order order : {Order::kRing, Order::kTree, Order::kRandom})
      for (Scale scale : {Scale::kPreBf16, Scale::kPreFloat, Scale::kPostDivide}) {
        if (order == Order::kRandom && n > 128 && scale != Scale::kPreBf16) continue;  // time
        const std::string wrong = check_bf16_avg(replay(in, order, scale, n), n);
        ASSERT_EQ(wrong, "") << n << " ranks, order " << static_cast<int>(order) << " scale "
                             << static_cast<int>(scale);
      }
  }
}

// What the preflight held before: the average of each rank's own index, expected exactly. The
// same replay shows it wrong at the sizes where real NCCL rings are, so the replay is faithful
// enough to have found it.
TEST(CollectiveCheck, ReplayShowsTheOldAverageOfRankIndicesFailingAtScale) {
  int first_wrong = 0;
  for (int n = 2; n <= 256 && first_wrong == 0; ++n) {
    Contributions in(n);
    for (int r = 0; r < n; ++r) in[r] = std::vector<float>(1, static_cast<float>(r));
    const float got = replay(in, Order::kRing, Scale::kPreBf16, 0)[0];
    if (got != static_cast<float>(n - 1) / 2.0f) first_wrong = n;
  }
  EXPECT_GT(first_wrong, 2);
  EXPECT_LE(first_wrong, 64) << "the old check held in ring order up to 256 ranks";
}

// Each corruption of a correct reduction, at sizes around the limits of the pattern.
TEST(CollectiveCheck, CorruptedReductionsFail) {
  for (int n : {2, 3, 6, 12, 32, 127, 128, 129, 255, 256, 257, 511, 512, 1000, 1024}) {
    for (const bool averaged : {false, true}) {
      auto inputs = [&] { return averaged ? avg_inputs(n) : sum_inputs(n); };
      auto check = [&](const Contributions& in, Scale scale) {
        const std::vector<float> got = replay(in, Order::kTree, averaged ? scale : Scale::kNone, 0);
        return averaged ? check_bf16_avg(got, n) : check_bf16_sum(got, n);
      };
      ASSERT_EQ(check(inputs(), Scale::kPreBf16), "") << n;
      for (int victim : {0, n / 2, n - 1}) {
        Contributions lost = inputs();
        std::fill(lost[victim].begin(), lost[victim].end(), 0.0f);
        EXPECT_NE(check(lost, Scale::kPreBf16), "") << n << " ranks, rank " << victim << " lost";
        Contributions doubled = inputs();
        for (float& x : doubled[victim]) x *= 2;
        EXPECT_NE(check(doubled, Scale::kPreBf16), "") << n << " ranks, rank " << victim << " doubled";
        // A rank's buffer reduced in place of its neighbour's (a change only where they differ: the
        // summed pattern gives ranks of one residue class the same buffer).
        Contributions twice = inputs();
        if (twice[(victim + 1) % n] == twice[victim]) continue;
        twice[(victim + 1) % n] = twice[victim];
        EXPECT_NE(check(twice, Scale::kPreBf16), "") << n << " ranks, rank " << victim << " sent twice";
      }
      if (averaged) {
        Contributions in = inputs();  // summed, never scaled
        EXPECT_NE(check(in, Scale::kNone), "") << n << " ranks, average not scaled";
      }
    }
  }
}

TEST(CollectiveCheck, ResultOfTheWrongLengthIsNamed) {
  EXPECT_NE(check_bf16_sum({1.0f}, 4).find("1 elements came back, 8 were sent"), std::string::npos);
  std::vector<float> got = bf16_sum_expected(4);
  got[5] += 1;
  EXPECT_NE(check_bf16_sum(got, 4).find("element 5"), std::string::npos);
}

}  // namespace
}  // namespace shardtune::dist

// Streamed-loading rounds, exhaustively on random layouts: for every shard count, storage order,
// stored element sizes and round size, the rounds stage every parameter element exactly once, in
// storage order, inside the stated capacity and at aligned offsets; and the takes of each shard put
// exactly its elements at their places in the shard, each taken from where it was staged.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "runtime/fsdp/load_plan.h"

namespace shardtune::fsdp {
namespace {

std::vector<FlatLayout::Entry> random_entries(std::mt19937& rng) {
  std::uniform_int_distribution<int> count(1, 7), dim(0, 11), rank(0, 2);
  std::vector<FlatLayout::Entry> out;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> shape;
    for (int d = rank(rng); d > 0; --d) shape.push_back(dim(rng));
    out.push_back({"p" + std::to_string(i), shape});
  }
  return out;
}

TEST(LoadPlan, RoundsStageEveryElementOnceAndTakesPutItInItsShard) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> size_pick(0, 2), round_pick(1, 40);
  const int64_t sizes[] = {2, 4, 8};
  for (int trial = 0; trial < 300; ++trial) {
    const auto entries = random_entries(rng);
    std::vector<size_t> order(entries.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> stored;
    for (size_t i = 0; i < entries.size(); ++i) stored.push_back(sizes[size_pick(rng)]);
    const int64_t max_size = *std::max_element(stored.begin(), stored.end());
    const int64_t round_numel = round_pick(rng);
    for (int shards = 1; shards <= 6; ++shards) {
      const FlatLayout layout(entries, shards);
      // Where each (param, element) was staged: (round, byte offset).
      std::map<std::pair<size_t, int64_t>, std::pair<int64_t, int64_t>> staged;
      std::vector<size_t> seen_order;
      const int64_t rounds = round_count(layout.numel(), round_numel);
      for (int64_t r = 0; r < rounds; ++r) {
        const std::vector<RoundParam> params = round_params(layout, order, r, round_numel, stored);
        int64_t elements = 0, end = 0;
        for (const RoundParam& p : params) {
          EXPECT_EQ(p.staged_offset % kStageAlignment, 0);
          EXPECT_GE(p.staged_offset, end) << "staged ranges overlap";
          EXPECT_LT(p.begin, p.end);
          for (int64_t e = p.begin; e < p.end; ++e)
            EXPECT_TRUE(staged.emplace(std::make_pair(p.param, e), std::make_pair(r, p.staged_offset + (e - p.begin) * stored[p.param])).second)
                << "element staged twice";
          end = p.staged_offset + (p.end - p.begin) * stored[p.param];
          elements += p.end - p.begin;
          if (seen_order.empty() || seen_order.back() != p.param) seen_order.push_back(p.param);
        }
        EXPECT_LE(end, stage_capacity(round_numel, entries.size(), max_size));
        EXPECT_EQ(stage_capacity(round_numel, entries.size(), max_size) % kStageAlignment, 0);
        EXPECT_EQ(elements, std::min(round_numel, layout.numel() - r * round_numel));
      }
      EXPECT_EQ(static_cast<int64_t>(staged.size()), layout.numel());
      std::vector<size_t> nonempty;  // storage order, without parameters of no elements
      for (size_t p : order)
        if (layout.params()[p].numel > 0) nonempty.push_back(p);
      EXPECT_EQ(seen_order, nonempty) << "rounds must follow the storage order";

      for (int s = 0; s < shards; ++s) {
        const std::vector<ShardPiece> pieces = layout.pieces_in_shard(s);
        std::vector<int> filled(static_cast<size_t>(layout.shard_numel()), 0);
        for (int64_t r = 0; r < rounds; ++r) {
          for (const ShardTake& t : shard_takes(round_params(layout, order, r, round_numel, stored), pieces, stored)) {
            for (int64_t i = 0; i < t.length; ++i) {
              const int64_t flat = layout.shard_begin(s) + t.shard_offset + i;  // its flat position
              const ParamSpan& p = layout.params()[t.param];
              ASSERT_GE(flat, p.offset);
              ASSERT_LT(flat, p.offset + p.numel);
              const auto where = staged.at({t.param, flat - p.offset});
              EXPECT_EQ(where, std::make_pair(r, t.staged_offset + i * stored[t.param]));
              ++filled[static_cast<size_t>(t.shard_offset + i)];
            }
          }
        }
        const int64_t real = std::clamp<int64_t>(layout.numel() - layout.shard_begin(s), 0, layout.shard_numel());
        for (int64_t i = 0; i < layout.shard_numel(); ++i)
          EXPECT_EQ(filled[static_cast<size_t>(i)], i < real ? 1 : 0) << "shard " << s << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace shardtune::fsdp

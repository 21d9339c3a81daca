// Streamed-loading rounds, exhaustively on random layouts: for every shard count, storage order,
// stored element sizes and round size, the rounds stage every parameter element exactly once, in
// storage order, inside the stated capacity and at aligned offsets; and the takes of each shard put
// exactly its elements at their places in the shard, each taken from where it was staged. Replicas'
// parts tile each shard; and readers that serve any split of the ranks read exactly what their
// ranks take, plus the rest of a granule where a range ends inside one, so that every granule is
// read whole by the reader of its first element and no element is read by two readers otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

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

TEST(LoadPlan, ReplicaPartsTileTheShard) {
  for (int64_t numel = 0; numel <= 40; ++numel) {
    for (int parts = 1; parts <= 7; ++parts) {
      for (int64_t align = 1; align <= 4; ++align) {
        int64_t at = 0, shortest = numel, longest = 0;
        for (int i = 0; i < parts; ++i) {
          const ShardPart p = replica_part(numel, parts, i, align);
          EXPECT_EQ(p.begin, at);
          EXPECT_LE(p.begin, p.end);
          if (p.end != numel) EXPECT_EQ(p.end % align, 0);
          at = p.end;
          shortest = std::min(shortest, p.length());
          longest = std::max(longest, p.length());
        }
        EXPECT_EQ(at, numel) << numel << " " << parts << " " << align;
        EXPECT_LE(longest - shortest, 2 * align) << numel << " " << parts << " " << align;
      }
    }
  }
}

TEST(LoadPlan, ReadersReadWhatTheirRanksTakeAndEachGranuleWholeOnce) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> size_pick(0, 2), round_pick(1, 40), granule_pick(0, 3), coin(0, 1);
  const int64_t sizes[] = {2, 4, 8};
  const int64_t granules[] = {1, 2, 3, 8};
  for (int trial = 0; trial < 200; ++trial) {
    const auto entries = random_entries(rng);
    std::vector<size_t> order(entries.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> stored, granule;
    for (size_t i = 0; i < entries.size(); ++i) {
      stored.push_back(sizes[size_pick(rng)]);
      granule.push_back(granules[granule_pick(rng)]);
    }
    const int64_t round_numel = round_pick(rng);
    const int shards = 1 + static_cast<int>(rng() % 4), replicas = 1 + static_cast<int>(rng() % 3);
    const FlatLayout layout(entries, shards);
    // Every (shard, replica) rank, dealt to readers at random (readers serving nobody are dropped).
    std::vector<std::vector<std::pair<int, int>>> readers(1 + rng() % 4);
    for (int s = 0; s < shards; ++s)
      for (int r = 0; r < replicas; ++r) readers[rng() % readers.size()].emplace_back(s, r);
    // (param, element) -> how many readers read it; and which reader read a granule's first element.
    std::map<std::pair<size_t, int64_t>, int> reads;
    std::vector<std::set<std::pair<size_t, int64_t>>> read_by;
    for (const auto& ranks : readers) {
      std::vector<std::vector<ShardPiece>> pieces;
      for (const auto& [s, r] : ranks)
        pieces.push_back(layout.pieces_in_part(s, replica_part(layout.shard_numel(), replicas, r)));
      const NeededRanges needed = needed_ranges(layout, pieces, granule);
      std::set<std::pair<size_t, int64_t>> read;  // by this reader, with where it was staged
      for (int64_t round = 0; round < round_count(layout.numel(), round_numel); ++round) {
        const std::vector<RoundParam> all = round_params(layout, order, round, round_numel, stored);
        std::map<std::pair<size_t, int64_t>, int64_t> staged;
        for (const RoundParam& p : round_reads(all, needed, stored)) {
          for (int64_t e = p.begin; e < p.end; ++e) {
            staged[std::make_pair(p.param, e)] = p.staged_offset + (e - p.begin) * stored[p.param];
            EXPECT_TRUE(read.insert({p.param, e}).second) << "read twice by one reader";
          }
        }
        for (const RoundParam& p : all)  // staged where the full round stages it
          for (int64_t e = p.begin; e < p.end; ++e)
            if (staged.count({p.param, e})) EXPECT_EQ(staged[std::make_pair(p.param, e)], p.staged_offset + (e - p.begin) * stored[p.param]);
        for (const std::vector<ShardPiece>& mine : pieces) {
          for (const ShardTake& t : shard_takes(all, mine, stored)) {
            const int64_t first = t.shard_offset;  // the take's elements: find them among the pieces
            for (const ShardPiece& piece : mine) {
              if (piece.param != t.param || first < piece.shard_offset || first >= piece.shard_offset + piece.length)
                continue;
              for (int64_t i = 0; i < t.length; ++i) {
                const int64_t e = piece.param_offset + (first - piece.shard_offset) + i;
                ASSERT_TRUE(staged.count({t.param, e})) << "a rank takes an element its reader did not read";
                EXPECT_EQ(staged[std::make_pair(t.param, e)], t.staged_offset + i * stored[t.param]);
              }
            }
          }
        }
      }
      for (const auto& key : read) ++reads[key];
      read_by.push_back(read);
      // Nothing beyond the ranks' elements but the rest of a granule one of them ends in.
      for (const auto& [param, e] : read) {
        bool held = false, tail = false;
        for (const std::vector<ShardPiece>& mine : pieces)
          for (const ShardPiece& piece : mine) {
            if (piece.param != param) continue;
            const int64_t end = piece.param_offset + piece.length, g = granule[param];
            held = held || (e >= piece.param_offset && e < end);
            tail = tail || (e >= end && e < (end + g - 1) / g * g);
          }
        EXPECT_TRUE(held || tail) << "param " << param << " element " << e;
      }
    }
    // Every element read, each granule whole by one reader; an element read twice only at the end
    // of some range inside a granule (at most granule - 1 elements a reader and range).
    for (size_t p = 0; p < layout.params().size(); ++p) {
      const int64_t numel = layout.params()[p].numel, g = granule[p];
      int64_t extra = 0;
      for (int64_t e = 0; e < numel; ++e) {
        ASSERT_GE(reads[std::make_pair(p, e)], 1) << "param " << p << " element " << e << " read by nobody";
        extra += reads[std::make_pair(p, e)] - 1;
      }
      EXPECT_LE(extra, static_cast<int64_t>(readers.size() * (shards * replicas)) * (g - 1));
      if (g == 1) {
        EXPECT_EQ(extra, 0);
      }
      for (int64_t begin = 0; begin < numel; begin += g) {
        bool whole = false;
        for (const auto& read : read_by) {
          if (!read.count({p, begin})) continue;
          bool all = true;
          for (int64_t e = begin; e < std::min(numel, begin + g); ++e) all = all && read.count({p, e}) > 0;
          whole = whole || all;
        }
        EXPECT_TRUE(whole) << "param " << p << ": the granule at " << begin << " is read whole by no reader";
      }
    }
  }
}

}  // namespace
}  // namespace shardtune::fsdp

// Flat-parameter arithmetic, exhaustively: for many parameter lists and every shard count up to
// 16, the shards tile the padded buffer, every element of every parameter lies in exactly one
// piece of exactly one shard at the right place, and padding is the minimum that divides evenly.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardtune::fsdp {
namespace {

std::vector<FlatLayout::Entry> random_entries(std::mt19937& rng) {
  std::uniform_int_distribution<int> count(1, 9), dim(0, 13), rank(0, 3);
  std::vector<FlatLayout::Entry> out;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> shape;
    const int r = rank(rng);
    for (int d = 0; d < r; ++d) shape.push_back(dim(rng));  // rank 0: a scalar; dims may be 0
    out.push_back({"p" + std::to_string(i), shape});
  }
  return out;
}

TEST(FlatLayout, ShardsTileEveryParameterExactlyOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const auto entries = random_entries(rng);
    for (int shards = 1; shards <= 16; ++shards) {
      const FlatLayout layout(entries, shards);
      int64_t total = 0;
      for (const ParamSpan& p : layout.params()) {
        EXPECT_EQ(p.offset, total);
        total += p.numel;
      }
      ASSERT_EQ(layout.numel(), total);
      EXPECT_EQ(layout.padded_numel() % shards, 0);
      EXPECT_GE(layout.padding(), 0);
      EXPECT_LT(layout.padding(), shards);  // the least padding that divides evenly
      // Owner of each flat element, built from the pieces.
      std::vector<int> owner(static_cast<size_t>(layout.numel()), -1);
      for (int s = 0; s < shards; ++s) {
        EXPECT_EQ(layout.shard_begin(s), s * layout.shard_numel());
        int64_t covered = 0;
        for (const ShardPiece& piece : layout.pieces_in_shard(s)) {
          const ParamSpan& p = layout.params()[piece.param];
          ASSERT_GT(piece.length, 0);
          ASSERT_GE(piece.param_offset, 0);
          ASSERT_LE(piece.param_offset + piece.length, p.numel);
          ASSERT_GE(piece.shard_offset, 0);
          ASSERT_LE(piece.shard_offset + piece.length, layout.shard_numel());
          // The piece sits where the flat buffer says.
          EXPECT_EQ(layout.shard_begin(s) + piece.shard_offset, p.offset + piece.param_offset);
          for (int64_t k = 0; k < piece.length; ++k) {
            int& o = owner[static_cast<size_t>(p.offset + piece.param_offset + k)];
            EXPECT_EQ(o, -1) << "element owned twice";
            o = s;
          }
          covered += piece.length;
        }
        const int64_t shard_end = std::min(layout.numel(), layout.shard_begin(s) + layout.shard_numel());
        EXPECT_EQ(covered, std::max<int64_t>(0, shard_end - layout.shard_begin(s)));
      }
      for (int o : owner) ASSERT_GE(o, 0) << "element owned by no shard";
    }
  }
}

// Aligned layouts (quantised storage): every parameter starts on a unit of `align` elements, every
// shard holds whole units, elements still lie in exactly one piece, and the padding is the least
// that does so: the gaps to each next unit, then whole units up to a multiple of the shard count.
TEST(FlatLayout, AlignedShardsHoldWholeUnitsOfOneParameter) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const auto entries = random_entries(rng);
    for (int64_t align : {2, 5, 16}) {
      for (int shards = 1; shards <= 9; ++shards) {
        const FlatLayout layout(entries, shards, align);
        EXPECT_EQ(layout.shard_numel() % align, 0);
        int64_t end = 0, numel = 0;
        for (const ParamSpan& p : layout.params()) {
          EXPECT_EQ(p.offset % align, 0) << p.name;
          EXPECT_EQ(p.offset, (end + align - 1) / align * align) << p.name;
          end = p.offset + p.numel;
          numel += p.numel;
        }
        EXPECT_EQ(layout.numel(), numel);
        const int64_t units = (end + align - 1) / align;
        EXPECT_EQ(layout.padded_numel(), (units + shards - 1) / shards * shards * align);
        std::vector<int> seen(static_cast<size_t>(layout.padded_numel()), 0);
        for (int s = 0; s < shards; ++s)
          for (const ShardPiece& piece : layout.pieces_in_shard(s)) {
            const ParamSpan& p = layout.params()[piece.param];
            EXPECT_EQ(layout.shard_begin(s) + piece.shard_offset, p.offset + piece.param_offset);
            for (int64_t k = 0; k < piece.length; ++k) ++seen[static_cast<size_t>(p.offset + piece.param_offset + k)];
          }
        for (const ParamSpan& p : layout.params())
          for (int64_t k = 0; k < p.numel; ++k) ASSERT_EQ(seen[static_cast<size_t>(p.offset + k)], 1) << p.name;
      }
    }
  }
  EXPECT_THROW(FlatLayout({{"a", {3}}}, 2, 0), common::Error);
}

TEST(FlatLayout, HandWorkedExample) {
  // a: 2x3 (6), b: 5, c: scalar (1) -> 12 elements; over 5 shards: shard size 3, padding 3.
  const FlatLayout layout({{"a", {2, 3}}, {"b", {5}}, {"c", {}}}, 5);
  EXPECT_EQ(layout.numel(), 12);
  EXPECT_EQ(layout.shard_numel(), 3);
  EXPECT_EQ(layout.padding(), 3);
  const auto s2 = layout.pieces_in_shard(2);  // flat [6, 9): b[0..3)
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0].param, 1u);
  EXPECT_EQ(s2[0].param_offset, 0);
  EXPECT_EQ(s2[0].length, 3);
  const auto s3 = layout.pieces_in_shard(3);  // flat [9, 12): b[3..5), c
  ASSERT_EQ(s3.size(), 2u);
  EXPECT_EQ(s3[0].param_offset, 3);
  EXPECT_EQ(s3[1].param, 2u);
  EXPECT_EQ(s3[1].shard_offset, 2);
  EXPECT_TRUE(layout.pieces_in_shard(4).empty());  // all padding
  EXPECT_THROW(FlatLayout({{"a", {2}}}, 0), common::Error);
  EXPECT_THROW(layout.pieces_in_shard(5), common::Error);
}

}  // namespace
}  // namespace shardtune::fsdp

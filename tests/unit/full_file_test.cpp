// The consolidated file written side by side (checkpoint/full_file.h): for random layouts, shard
// counts, dtypes and tiny checksum blocks (so that blocks are cut between writers in every way),
// the writers' pieces, written in a random order, read back through HDF5 as each whole tensor, and
// each block's checksum combined from the writers' parts equals zlib's crc32 of the block.
#include <ATen/ops/arange.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/full_file.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/h5_range.h"
#include "common/error.h"
#include "tests/unit/temp_dir.h"

namespace shardtune::checkpoint {
namespace {

uint32_t zlib_crc(const float* data, int64_t n) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n * 4)));
}

struct Case {
  std::vector<fsdp::FlatLayout::Entry> entries;
  int shards;
  int64_t block;
  bool bf16;
};

Case random_case(std::mt19937& rng) {
  Case c;
  const int params = std::uniform_int_distribution<int>(1, 5)(rng);
  for (int p = 0; p < params; ++p) {
    std::vector<int64_t> shape;
    const int dims = std::uniform_int_distribution<int>(1, 2)(rng);
    for (int d = 0; d < dims; ++d) shape.push_back(std::uniform_int_distribution<int64_t>(0, 9)(rng));
    c.entries.push_back({"t" + std::to_string(p), shape});
  }
  c.shards = std::uniform_int_distribution<int>(1, 5)(rng);
  c.block = std::uniform_int_distribution<int64_t>(1, 7)(rng);
  c.bf16 = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  return c;
}

TEST(FullFile, PiecesWrittenSideBySideReadBackWholeWithCombinedBlockChecksums) {
  std::mt19937 rng(20261126);
  for (int trial = 0; trial < 60; ++trial) {
    const Case c = random_case(rng);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ": " << c.entries.size() << " tensors, " << c.shards
                                    << " shards, block " << c.block << (c.bf16 ? ", bf16" : ", fp32"));
    testing_support::TempDir dir;
    const std::string path = dir.file("model.h5");
    // Two kinds over the same layout; every element's value is its place in the flat buffer.
    const fsdp::FlatLayout layout(c.entries, c.shards);
    const at::Tensor flat = at::arange(layout.padded_numel(), at::TensorOptions().dtype(c.bf16 ? at::kBFloat16 : at::kFloat));
    std::vector<std::vector<FullUnit>> writers(static_cast<size_t>(c.shards));
    for (int s = 0; s < c.shards; ++s)
      for (const char* kind : {"param", "exp_avg"})
        writers[static_cast<size_t>(s)].push_back(
            {kind, &layout, s, flat.narrow(0, layout.shard_begin(s), layout.shard_numel()), {}});
    const std::vector<int64_t> offsets = create_full_file(path, writers[0]);
    std::vector<int> order(static_cast<size_t>(c.shards));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<CrcPart> parts;
    for (int s : order) {
      // Each writer's parts go through the text the ranks send each other.
      const auto mine = write_full_pieces(path, writers[static_cast<size_t>(s)], offsets, c.block);
      for (const CrcPart& p : parse_crc_parts_text(crc_parts_text(mine))) parts.push_back(p);
    }
    const std::vector<ManifestSlice> slices = full_slices(writers[0], "model.h5", parts, c.block);
    ASSERT_EQ(slices.size(), 2 * c.entries.size());

    H5Handle file(ST_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose);
    const at::Tensor expected = flat.to(at::kFloat);
    for (const ManifestSlice& s : slices) {
      const fsdp::ParamSpan& span = *std::find_if(layout.params().begin(), layout.params().end(),
                                                  [&](const fsdp::ParamSpan& p) { return p.name == s.tensor; });
      EXPECT_EQ(s.file, "model.h5");
      EXPECT_EQ(s.offset, 0);
      EXPECT_EQ(s.length, span.numel);
      H5Handle ds = open_checked_dataset(file.get(), s.kind, s.dataset);
      std::vector<float> got(static_cast<size_t>(span.numel));
      if (span.numel > 0) read_flat_range(ds.get(), 0, span.numel, got.data());
      const float* want = expected.data_ptr<float>() + span.offset;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want)) << s.kind << "/" << s.tensor;
      std::vector<uint32_t> crcs;
      for (int64_t b = 0; b < span.numel; b += c.block) crcs.push_back(zlib_crc(want + b, std::min(c.block, span.numel - b)));
      EXPECT_EQ(s.crcs, crcs) << s.kind << "/" << s.tensor;
    }
  }
}

TEST(FullFile, BlocksNotCoveredExactlyByTheWritersAreAnError) {
  testing_support::TempDir dir;
  const fsdp::FlatLayout layout({{"w", {4, 5}}}, 2);
  const at::Tensor flat = at::arange(layout.padded_numel(), at::TensorOptions().dtype(at::kFloat));
  std::vector<FullUnit> units0{{"param", &layout, 0, flat.narrow(0, 0, layout.shard_numel()), {}}};
  std::vector<FullUnit> units1{{"param", &layout, 1, flat.narrow(0, layout.shard_numel(), layout.shard_numel()), {}}};
  const std::string path = dir.file("model.h5");
  const std::vector<int64_t> offsets = create_full_file(path, units0);
  const auto first = write_full_pieces(path, units0, offsets, 3);
  const auto second = write_full_pieces(path, units1, offsets, 3);
  std::vector<CrcPart> both = first;
  both.insert(both.end(), second.begin(), second.end());
  EXPECT_NO_THROW(full_slices(units0, "model.h5", both, 3));
  EXPECT_THROW(full_slices(units0, "model.h5", first, 3), common::Error);  // the second writer's half is missing
  std::vector<CrcPart> twice = both;
  twice.push_back(second.back());
  EXPECT_THROW(full_slices(units0, "model.h5", twice, 3), common::Error);  // a part written twice
}

}  // namespace
}  // namespace shardtune::checkpoint

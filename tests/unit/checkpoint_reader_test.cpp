// CheckpointReader against hand-built checkpoints with tiny checksum blocks (5 elements), so that
// every case of a range cutting blocks and slices is small: any range of any tensor reads back
// exactly, reads only the blocks it overlaps, and a corrupt block fails exactly the reads that
// touch it. Checksums are checked against zlib's crc32, an independent implementation.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/block_crc.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kBlock = 5;

uint32_t zlib_crc(const float* data, int64_t n) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n * 4)));
}

// One slice as stored: file, dataset (with its on-disk shape) and the tensor elements it holds.
struct StoredSlice {
  std::string tensor, file, dataset;
  int64_t offset, length;
  std::vector<hsize_t> dims;    // the dataset's shape (its product is `length`), unless shared
  int64_t dataset_offset = 0;  // where the slice starts in a dataset it shares (format 4)
};

// Every case runs on two layouts (the parameter): a dataset per slice, as the conversions write
// files; and, as a training rank writes them (format 4), two slices of `a` in one dataset of f0.h5
// after 3 elements no slice names, with 2 more after them (all -7, never to be read).
class CheckpointReaderTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("shardtune-reader-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // a: [7, 9] = 63 elements in three slices over two files (lengths 20, 30, 13: blocks of 5
    // with a short last one); b: [6, 11] = 66 elements stored whole as a 2-D dataset, as a full
    // checkpoint stores tensors.
    tensors_ = {{"a", {7, 9}}, {"b", {6, 11}}};
    slices_ = {{"a", "f0.h5", "a@0", 0, 20, {20}},
               {"a", "f1.h5", "a@20", 20, 30, {30}},
               {"a", "f0.h5", "a@50", 50, 13, {13}},
               {"b", "f1.h5", "b", 0, 66, {6, 11}}};
    if (shared()) {
      slices_[0] = {"a", "f0.h5", "flat-0000", 0, 20, {3 + 20 + 13 + 2}, 3};
      slices_[2] = {"a", "f0.h5", "flat-0000", 50, 13, {3 + 20 + 13 + 2}, 23};
    }
    for (const auto& [name, shape] : tensors_) {
      std::vector<float>& v = values_[name];
      v.resize(static_cast<size_t>(shape[0] * shape[1]));
      std::iota(v.begin(), v.end(), name == "a" ? 1000.0f : 2000.0f);
    }
    for (const char* f : {"f0.h5", "f1.h5"}) {
      H5Handle file(ST_H5_CHECK(H5Fcreate((dir_ + "/" + f).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
      H5Handle group(ST_H5_CHECK(H5Gcreate2(file.get(), "/param", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      std::map<std::string, std::pair<std::vector<hsize_t>, std::vector<float>>> datasets;
      for (const StoredSlice& s : slices_) {
        if (s.file != f) continue;
        auto& [dims, data] = datasets[s.dataset];
        dims = s.dims;
        data.resize(static_cast<size_t>(std::accumulate(dims.begin(), dims.end(), hsize_t{1}, std::multiplies<>())), -7.0f);
        std::copy_n(values_[s.tensor].begin() + s.offset, s.length, data.begin() + s.dataset_offset);
      }
      for (const auto& [name, stored] : datasets) {
        const auto& [dims, data] = stored;
        H5Handle space(ST_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
        H5Handle ds(ST_H5_CHECK(H5Dcreate2(group.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                           H5P_DEFAULT, H5P_DEFAULT)),
                    H5Dclose);
        ST_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
      }
    }
    write_manifest(shared() ? 4 : 2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  bool shared() const { return GetParam(); }

  // Format 2 lists zlib's CRC-32 of every block of kBlock elements; format 1 one per slice.
  void write_manifest(int version) {
    json m = {{"format", "shardtune-sharded"}, {"version", version}, {"layout", "sharded"}, {"step", 1}};
    if (version >= 2) m["crc32_block"] = kBlock;
    for (const auto& [name, shape] : tensors_) m["tensors"][name] = {{"shape", shape}, {"dtype", "F32"}};
    m["slices"] = json::array();
    for (const StoredSlice& s : slices_) {
      json j = {{"kind", "param"},       {"tensor", s.tensor}, {"file", s.file},
                {"dataset", s.dataset}, {"offset", s.offset}, {"length", s.length}};
      if (s.dataset_offset != 0) j["dataset_offset"] = s.dataset_offset;
      const float* data = values_[s.tensor].data() + s.offset;
      if (version == 1) {
        j["crc32"] = zlib_crc(data, s.length);
      } else {
        for (int64_t b = 0; b < s.length; b += kBlock) j["crc32_blocks"].push_back(zlib_crc(data + b, std::min(kBlock, s.length - b)));
      }
      m["slices"].push_back(j);
    }
    if (version >= 3) m.update({{"epoch", 0}, {"sample_in_epoch", 0}, {"world_size", 2}, {"shard_group_size", 2}});
    write_json(m);
  }

  // The manifest `m`, from version 3 with its own checksum: zlib's CRC-32 of it without the checksum,
  // as json::dump(1) writes it.
  void write_json(json m) {
    m.erase("manifest_crc32");
    if (m["version"].get<int>() >= 3) {
      const std::string text = m.dump(1);
      m["manifest_crc32"] = ::crc32(0, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size()));
    }
    std::ofstream(dir_ + "/manifest.json") << m.dump(1);
  }

  // Opening the checkpoint fails with an error that says `what`.
  void expect_refused(const std::string& what) {
    try {
      CheckpointReader reader(dir_);
      ADD_FAILURE() << "the manifest was accepted; expected an error saying: " << what;
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }

  // Overwrites one stored element (of tensor `a`, element `element`) without touching the manifest.
  void corrupt_a(int64_t element) {
    for (const StoredSlice& s : slices_) {
      if (s.tensor != "a" || element < s.offset || element >= s.offset + s.length) continue;
      H5Handle file(ST_H5_CHECK(H5Fopen((dir_ + "/" + s.file).c_str(), H5F_ACC_RDWR, H5P_DEFAULT)), H5Fclose);
      H5Handle ds(ST_H5_CHECK(H5Dopen2(file.get(), ("/param/" + s.dataset).c_str(), H5P_DEFAULT)), H5Dclose);
      H5Handle space(ST_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
      const hsize_t start[1] = {static_cast<hsize_t>(element - s.offset + s.dataset_offset)}, one[1] = {1};
      ST_H5_CHECK(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, one, nullptr));
      H5Handle mem(ST_H5_CHECK(H5Screate_simple(1, one, nullptr)), H5Sclose);
      const float bad = -1.0f;
      ST_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, &bad));
    }
  }

  std::string dir_;
  std::map<std::string, std::vector<int64_t>> tensors_;
  std::vector<StoredSlice> slices_;
  std::map<std::string, std::vector<float>> values_;
};

TEST(BlockCrc, PiecesOfAnySizeGiveZlibsSumOfEachBlock) {
  std::vector<float> data(1000);
  std::iota(data.begin(), data.end(), 0.5f);
  std::mt19937 rng(3);
  for (int64_t block : {1, 7, 64, 1000, 4096}) {
    std::vector<uint32_t> want;
    for (int64_t b = 0; b < 1000; b += block) want.push_back(zlib_crc(data.data() + b, std::min<int64_t>(block, 1000 - b)));
    BlockCrc sums(block);
    for (int64_t at = 0; at < 1000;) {
      const int64_t n = std::min<int64_t>(std::uniform_int_distribution<int64_t>(0, 150)(rng), 1000 - at);
      sums.add(data.data() + at, n);
      at += n;
    }
    EXPECT_EQ(sums.finish(), want) << "block " << block;
    EXPECT_EQ(block_crcs(data.data(), 1000, block), want) << "block " << block;
  }
  EXPECT_TRUE(block_crcs(data.data(), 0).empty());
}

TEST_P(CheckpointReaderTest, AnyRangeReadsBackExactlyAndOnlyItsBlocks) {
  CheckpointReader reader(dir_);
  std::mt19937 rng(7);
  for (const auto& [name, shape] : tensors_) {
    const int64_t numel = shape[0] * shape[1];
    for (int i = 0; i < 400; ++i) {
      const int64_t offset = std::uniform_int_distribution<int64_t>(0, numel - 1)(rng);
      const int64_t count = std::uniform_int_distribution<int64_t>(1, numel - offset)(rng);
      std::vector<float> got(static_cast<size_t>(count), 0.0f);
      const uint64_t before = reader.bytes_read();
      reader.read_range("param", name, offset, count, got.data());
      ASSERT_TRUE(std::equal(got.begin(), got.end(), values_[name].begin() + offset)) << name << " " << offset << "+" << count;
      // Every slice it touches adds at most the two partly used blocks at the range's edges.
      int touched = 0;
      for (const StoredSlice& s : slices_)
        touched += s.tensor == name && s.offset < offset + count && offset < s.offset + s.length;
      const uint64_t read = reader.bytes_read() - before;
      EXPECT_GE(read, static_cast<uint64_t>(count) * 4);
      EXPECT_LE(read, static_cast<uint64_t>(count + 2 * (kBlock - 1) * touched) * 4) << name << " " << offset << "+" << count;
    }
  }
}

TEST_P(CheckpointReaderTest, StreamsInAnyPiecesWithoutCrossingABlock) {
  CheckpointReader reader(dir_);
  std::mt19937 rng(11);
  for (const auto& [name, shape] : tensors_) {
    CheckpointReader::Stream stream = reader.stream("param", name);
    std::vector<float> got;
    std::vector<float> piece(16);
    for (int64_t n; (n = stream.read(piece.data(), std::uniform_int_distribution<int64_t>(1, 16)(rng))) > 0;) {
      EXPECT_LE(n, kBlock);
      const int64_t at = static_cast<int64_t>(got.size());
      EXPECT_EQ(at / kBlock, (at + n - 1) / kBlock) << "a piece crosses a block boundary";
      got.insert(got.end(), piece.begin(), piece.begin() + n);
    }
    EXPECT_EQ(got, values_[name]) << name;
  }
}

TEST_P(CheckpointReaderTest, ACorruptBlockFailsExactlyTheReadsThatTouchIt) {
  corrupt_a(33);  // in slice a@20 (f1.h5), block 2 of it: elements 30..35 of the tensor
  CheckpointReader reader(dir_);
  std::vector<float> got(63);
  for (int64_t offset = 0; offset < 63; offset += 3)
    for (int64_t count : {1, 4, 9, 25}) {
      if (offset + count > 63) continue;
      const bool touches = offset < 35 && 30 < offset + count;
      if (!touches) {
        EXPECT_NO_THROW(reader.read_range("param", "a", offset, count, got.data())) << offset << "+" << count;
        continue;
      }
      try {
        reader.read_range("param", "a", offset, count, got.data());
        ADD_FAILURE() << "read " << offset << "+" << count << " of a corrupt block";
      } catch (const common::Error& e) {
        EXPECT_NE(std::string(e.what()).find("f1.h5: param of a (elements 30..35) fails its checksum"), std::string::npos)
            << e.what();
      }
    }
  CheckpointReader::Stream stream = reader.stream("param", "a");
  std::vector<float> piece(63);
  EXPECT_THROW(while (stream.read(piece.data(), 63) > 0) {}, common::Error);
  const VerifyReport report = verify_sharded_checkpoint(dir_);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find("f1.h5: param of a (elements 20..50)"), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[0].find("checksum mismatch in elements 30..35"), std::string::npos) << report.problems[0];
}

// Streams whole tensors in random pieces, without a copy; every element checked against `values`.
void expect_streams(CheckpointReader& reader, const std::vector<std::string>& names,
                    std::map<std::string, std::vector<float>>& values, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const std::string& name : names) {
    CheckpointReader::Stream stream = reader.stream("param", name);
    std::vector<float> got;
    for (std::span<const float> piece; !(piece = stream.next(std::uniform_int_distribution<int64_t>(1, 16)(rng))).empty();)
      got.insert(got.end(), piece.begin(), piece.end());
    EXPECT_EQ(got, values[name]) << name;
  }
}

TEST_P(CheckpointReaderTest, StreamsReadAheadGiveTheSameElements) {
  CheckpointReader reader(dir_);
  reader.read_ahead({{"param", "a"}, {"param", "b"}});
  EXPECT_EQ(reader.slices_read_ahead(), slices_.size()) << "HDF5's contiguous float32 datasets are read directly";
  expect_streams(reader, {"a", "b"}, values_, 5);
  EXPECT_EQ(reader.bytes_read_ahead(), (63u + 66u) * 4) << "every element came through the read-ahead";
  // Out of the declared order: what the read-ahead passed by (all of a) is read through HDF5.
  reader.read_ahead({{"param", "a"}, {"param", "b"}});
  expect_streams(reader, {"b", "a"}, values_, 6);
  EXPECT_EQ(reader.bytes_read_ahead(), (63u + 66u + 66u) * 4);
  EXPECT_EQ(reader.bytes_read(), (63u + 66u) * 2 * 4);
  // Declared twice, streamed once each: nothing is handed out to the wrong stream.
  reader.read_ahead({{"param", "a"}, {"param", "a"}, {"param", "b"}});
  expect_streams(reader, {"a", "b", "a"}, values_, 7);
}

TEST_P(CheckpointReaderTest, AChunkedDatasetIsReadThroughHdf5) {
  {  // b rewritten chunked: HDF5 places its bytes in chunks of its own choosing
    H5Handle file(ST_H5_CHECK(H5Fopen((dir_ + "/f1.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT)), H5Fclose);
    ST_H5_CHECK(H5Ldelete(file.get(), "/param/b", H5P_DEFAULT));
    const hsize_t dims[2] = {6, 11}, chunk[2] = {2, 11};
    H5Handle space(ST_H5_CHECK(H5Screate_simple(2, dims, nullptr)), H5Sclose);
    H5Handle dcpl(ST_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
    ST_H5_CHECK(H5Pset_chunk(dcpl.get(), 2, chunk));
    H5Handle ds(ST_H5_CHECK(H5Dcreate2(file.get(), "/param/b", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                                       H5P_DEFAULT)),
                H5Dclose);
    ST_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values_["b"].data()));
  }
  CheckpointReader reader(dir_);
  reader.read_ahead({{"param", "a"}, {"param", "b"}});
  EXPECT_EQ(reader.slices_read_ahead(), slices_.size() - 1);
  expect_streams(reader, {"a", "b"}, values_, 8);
  EXPECT_EQ(reader.bytes_read_ahead(), 63u * 4) << "b was read through HDF5";
  EXPECT_TRUE(verify_sharded_checkpoint(dir_).problems.empty());
}

TEST_P(CheckpointReaderTest, ACorruptBlockReadAheadFailsItsStream) {
  corrupt_a(33);
  CheckpointReader reader(dir_);
  reader.read_ahead({{"param", "a"}});
  ASSERT_EQ(reader.slices_read_ahead(), 3u);
  CheckpointReader::Stream stream = reader.stream("param", "a");
  try {
    while (!stream.next(4).empty()) {
    }
    ADD_FAILURE() << "streamed a corrupt block";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("f1.h5: param of a (elements 30..35) fails its checksum"), std::string::npos)
        << e.what();
  }
  EXPECT_GT(reader.bytes_read(), 30u * 4);
  EXPECT_EQ(reader.bytes_read_ahead(), reader.bytes_read()) << "the corrupt block came through the read-ahead";
}

TEST_P(CheckpointReaderTest, FormatOneWithOneSumPerSliceStillReads) {
  if (shared()) GTEST_SKIP() << "format 1 has a dataset per slice";
  write_manifest(1);
  {
    CheckpointReader reader(dir_);
    std::vector<float> got(40);
    reader.read_range("param", "a", 12, 40, got.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), values_["a"].begin() + 12));
    EXPECT_TRUE(verify_sharded_checkpoint(dir_).problems.empty());
  }
  corrupt_a(55);
  CheckpointReader reader(dir_);
  std::vector<float> got(63);
  EXPECT_NO_THROW(reader.read_range("param", "a", 0, 50, got.data()));
  EXPECT_THROW(reader.read_range("param", "a", 60, 1, got.data()), common::Error);
  EXPECT_EQ(verify_sharded_checkpoint(dir_).problems.size(), 1u);
}

TEST_P(CheckpointReaderTest, AManifestWithTheWrongNumberOfSumsIsNamed) {
  json m = json::parse(std::ifstream(dir_ + "/manifest.json"));
  m["slices"][1]["crc32_blocks"].erase(0);
  write_json(m);
  expect_refused("slice 1 (param of \"a\" in \"f1.h5\"): 5 checksums listed for 6 blocks");
  m["slices"][1].erase("crc32_blocks");
  write_json(m);
  expect_refused("slice 1: \"crc32_blocks\" is missing");
}

TEST_P(CheckpointReaderTest, ASliceBeyondItsDatasetOrBeforeItIsNamed) {
  if (!shared()) GTEST_SKIP() << "slices of their own datasets";
  json m = json::parse(std::ifstream(dir_ + "/manifest.json"));
  m["slices"][2]["dataset_offset"] = 30;  // 30 + 13 elements, of a dataset of 38
  write_json(m);
  {
    CheckpointReader reader(dir_);
    std::vector<float> got(13);
    try {
      reader.read_range("param", "a", 50, 13, got.data());
      ADD_FAILURE() << "read past the end of a dataset";
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find("f0.h5: param of a (elements 50..63): the dataset holds 38 elements, too few "
                                           "for elements 30..43 of it"),
                std::string::npos)
          << e.what();
    }
    const VerifyReport report = verify_sharded_checkpoint(dir_);
    ASSERT_EQ(report.problems.size(), 1u);
    EXPECT_NE(report.problems[0].find("too few for elements 30..43"), std::string::npos) << report.problems[0];
  }
  m["slices"][2]["dataset_offset"] = int64_t{1} << 41;
  write_json(m);
  expect_refused("slice 2 (param of \"a\" in \"f0.h5\"): dataset_offset 2199023255552 is past any dataset");
  m["slices"][2]["dataset_offset"] = -1;
  write_json(m);
  expect_refused("slice 2: \"dataset_offset\" is -1, expected an integer of at least 0");
}

INSTANTIATE_TEST_SUITE_P(Layouts, CheckpointReaderTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "SharedDatasets" : "DatasetPerSlice"; });

}  // namespace
}  // namespace shardtune::checkpoint

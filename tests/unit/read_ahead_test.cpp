// common::ReadAhead: random ranges of random files, taken in random pieces with random ranges
// skipped, hand out exactly the files' bytes, with O_DIRECT and through the page cache; a file
// shorter than a range, or missing, is an error naming it.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/read_ahead.h"
#include "common/write_behind.h"  // kDirectAlignment
#include "tests/unit/temp_dir.h"

namespace shardtune::common {
namespace {

std::vector<char> write_random_file(const std::string& path, size_t bytes, std::mt19937& rng) {
  std::vector<char> data(bytes);
  for (char& c : data) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
  return data;
}

// Random ranges over a few files read back in random pieces; some ranges are skipped whole or
// left half-read, as a reader that streams out of its plan would.
// `files` files, at most `max_open` of them open at once (0: the default share).
void random_reads(const std::filesystem::path& dir, uint32_t seed, bool direct, int files = 3, size_t max_open = 0) {
  std::mt19937 rng(seed);
  std::vector<std::string> paths;
  std::vector<std::vector<char>> contents;
  for (int f = 0; f < files; ++f) {
    paths.push_back((dir / ("f" + std::to_string(f))).string());
    contents.push_back(write_random_file(paths.back(), std::uniform_int_distribution<size_t>(1, 200000)(rng), rng));
  }
  std::vector<ReadAhead::Range> ranges;
  for (int r = 0; r < 40; ++r) {
    const size_t f = rng() % paths.size();
    const auto size = static_cast<int64_t>(contents[f].size());
    const int64_t offset = std::uniform_int_distribution<int64_t>(0, size)(rng);
    const int64_t bytes = rng() % 8 == 0 ? 0 : std::uniform_int_distribution<int64_t>(0, size - offset)(rng);
    ranges.push_back({paths[f], offset, bytes});
  }
  const int buffers = 1 + static_cast<int>(rng() % 4), threads = 1 + static_cast<int>(rng() % 3);
  const size_t buffer_bytes = kDirectAlignment * (1 + rng() % 12);
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << buffers << " buffers of " << buffer_bytes
                                    << " bytes, " << threads << " threads, direct " << direct << ", "
                                    << max_open << " files open at most");
  ReadAhead ahead(ranges, buffers, buffer_bytes, threads, direct, max_open);
  for (size_t r = 0; r < ranges.size(); ++r) {
    const int fate = static_cast<int>(rng() % 10);  // 0: skipped, 1: half read, else read whole
    if (fate == 0) continue;
    const ReadAhead::Range& range = ranges[r];
    const std::vector<char>& file = contents[static_cast<size_t>(std::find(paths.begin(), paths.end(), range.path) - paths.begin())];
    int64_t at = 0;
    const int64_t stop = fate == 1 ? range.bytes / 2 : range.bytes;
    while (at < stop) {
      const size_t max = 1 + rng() % (2 * buffer_bytes);
      const ReadAhead::Piece piece = ahead.next(r, max);
      ASSERT_GT(piece.bytes, 0u) << "range " << r << " ended at byte " << at << " of " << range.bytes;
      ASSERT_LE(piece.bytes, max);
      ASSERT_LE(at + static_cast<int64_t>(piece.bytes), range.bytes);
      ASSERT_TRUE(std::equal(piece.data, piece.data + piece.bytes, file.begin() + range.offset + at))
          << "range " << r << " differs from the file at byte " << at;
      at += static_cast<int64_t>(piece.bytes);
    }
    if (fate != 1) {
      EXPECT_EQ(ahead.next(r, 100).bytes, 0u) << "range " << r << " goes on past its end";
    }
  }
  EXPECT_EQ(ahead.next(0, 100).bytes, 0u) << "a range passed by is over";
  // Beyond the bound only while every open file is being read, by one of the threads.
  if (max_open > 0) EXPECT_LE(ahead.peak_open(), std::max(max_open, static_cast<size_t>(threads)));
}

TEST(ReadAhead, HandsOutExactlyTheFilesBytes) {
  testing_support::TempDir dir;
  for (uint32_t seed = 1; seed <= 25; ++seed) random_reads(dir.path(), seed, true);
}

// Many files read with few open at once: each is closed and opened again as its ranges come round.
TEST(ReadAhead, HandsOutExactlyTheFilesBytesWithFewFilesOpen) {
  testing_support::TempDir dir;
  for (uint32_t seed = 200; seed < 215; ++seed) random_reads(dir.path(), seed, seed % 2 == 0, 9, 1 + seed % 3);
}

TEST(ReadAhead, HandsOutExactlyTheFilesBytesThroughThePageCache) {
  testing_support::TempDir dir;
  for (uint32_t seed = 100; seed < 110; ++seed) random_reads(dir.path(), seed, false);
}

TEST(ReadAhead, ReadsDirectlyFromADiskFileSystem) {
  testing_support::TempDir dir;
  std::mt19937 rng(4);
  write_random_file(dir.file("f"), 10000, rng);
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir.path().c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC) GTEST_SKIP() << dir.path() << " is tmpfs, which refuses O_DIRECT";
  ReadAhead ahead({{dir.file("f"), 0, 10000}});
  while (ahead.next(0, 4096).bytes > 0) {  // files are opened as they are read
  }
  EXPECT_TRUE(ahead.direct());
}

TEST(ReadAhead, AFileShorterThanItsRangeIsAnErrorNamingIt) {
  testing_support::TempDir dir;
  std::mt19937 rng(5);
  write_random_file(dir.file("short.bin"), 5000, rng);
  ReadAhead ahead({{dir.file("short.bin"), 0, 4000}, {dir.file("short.bin"), 4000, 3000}}, 2, kDirectAlignment);
  while (ahead.next(0, 1000).bytes > 0) {
  }
  try {
    while (ahead.next(1, 1000).bytes > 0) {
    }
    FAIL() << "a range past the end of the file was handed out";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("short.bin"), std::string::npos) << e.what();
  }
}

TEST(ReadAhead, AMissingFileIsAnErrorNamingIt) {
  testing_support::TempDir dir;
  try {
    ReadAhead ahead({{dir.file("absent.bin"), 0, 10}});
    FAIL() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("absent.bin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardtune::common
